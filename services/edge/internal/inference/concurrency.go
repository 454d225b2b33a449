package inference

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/registry"
)

// concurrency counts the requests in flight on this replica per key and
// per tenant, against their max_concurrent_requests. The limits are per
// edge replica: counting across replicas would put a bus round trip (and a
// lease to expire after a crash) on every request.
type concurrency struct {
	mu       sync.Mutex
	inFlight map[string]int64 // "k/"+key id, "t/"+tenant
}

// acquire counts one more request of key, or returns the refusal when the
// key or its tenant is at its limit. release must be called once the
// request ends.
func (c *concurrency) acquire(key *registry.Key, tenant registry.Limits) (release func(), e *contracts.Error) {
	kl, tl := key.MaxConcurrentRequests, tenant.MaxConcurrentRequests
	if kl <= 0 && tl <= 0 {
		return func() {}, nil
	}
	kk, tk := "k/"+key.ID, "t/"+key.Tenant
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight == nil {
		c.inFlight = make(map[string]int64)
	}
	switch {
	case kl > 0 && c.inFlight[kk] >= kl:
		return nil, errConcurrency("API key", kl)
	case tl > 0 && c.inFlight[tk] >= tl:
		return nil, errConcurrency("tenant", tl)
	}
	c.inFlight[kk]++
	c.inFlight[tk]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, k := range []string{kk, tk} {
			if c.inFlight[k]--; c.inFlight[k] <= 0 {
				delete(c.inFlight, k)
			}
		}
	}, nil
}

func errConcurrency(who string, limit int64) *contracts.Error {
	return &contracts.Error{Status: http.StatusTooManyRequests, Type: contracts.TypeRateLimit, Code: contracts.CodeConcurrencyLimit,
		Message: fmt.Sprintf("The %s has %d requests in flight, its max_concurrent_requests; retry when one has finished.", who, limit)}
}
