package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// The batch scheduler's configuration (package pkg/batch): worker classes
// (flavors), pools with quotas, cohorts and tenant queues, one key each in
// events.BucketBatchQueues, which the batch service watches.

// nameRE is a flavor's or cohort's name: one key token.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)

// poolRE is a pool's name. A model in no pool has an implicit pool named
// after it, so a pool name may be a model name: dots and slashes too, as a
// key allows them.
var poolRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_/=.-]{0,199}$`)

func validPool(name string) bool {
	return poolRE.MatchString(name) && !strings.Contains(name, "..") && !strings.HasSuffix(name, ".") && !strings.HasSuffix(name, "/")
}

func (s *Service) batchRoutes(mux *http.ServeMux) {
	mux.HandleFunc("PUT /admin/v1/batch/flavors/{name}", s.admin(s.putFlavor))
	mux.HandleFunc("GET /admin/v1/batch/flavors", s.admin(listConfig[batch.Flavor](s, batch.FlavorPrefix)))
	mux.HandleFunc("GET /admin/v1/batch/flavors/{name}", s.admin(s.getConfig("Flavor", batch.FlavorKey, nameRE.MatchString, decodeAs[batch.Flavor])))
	mux.HandleFunc("DELETE /admin/v1/batch/flavors/{name}", s.admin(s.deleteConfig("Flavor", "batch_flavor", batch.FlavorKey, nameRE.MatchString)))

	mux.HandleFunc("PUT /admin/v1/batch/cohorts/{name}", s.admin(s.putCohort))
	mux.HandleFunc("GET /admin/v1/batch/cohorts", s.admin(listConfig[batch.Cohort](s, batch.CohortPrefix)))
	mux.HandleFunc("GET /admin/v1/batch/cohorts/{name}", s.admin(s.getConfig("Cohort", batch.CohortKey, nameRE.MatchString, decodeAs[batch.Cohort])))
	mux.HandleFunc("DELETE /admin/v1/batch/cohorts/{name}", s.admin(s.deleteConfig("Cohort", "batch_cohort", batch.CohortKey, nameRE.MatchString)))

	mux.HandleFunc("PUT /admin/v1/batch/pools/{name...}", s.admin(s.putPool))
	mux.HandleFunc("GET /admin/v1/batch/pools", s.admin(listConfig[batch.Pool](s, batch.PoolPrefix)))
	mux.HandleFunc("GET /admin/v1/batch/pools/{name...}", s.admin(s.getConfig("Pool", batch.PoolKey, validPool, decodeAs[batch.Pool])))
	mux.HandleFunc("DELETE /admin/v1/batch/pools/{name...}", s.admin(s.deleteConfig("Pool", "batch_pool", batch.PoolKey, validPool)))

	// A queue is addressed by its pool and tenant: .../queues/POOL/TENANT
	// (a pool name may hold slashes; a tenant id never does).
	mux.HandleFunc("PUT /admin/v1/batch/queues/{path...}", s.admin(s.putQueue))
	mux.HandleFunc("GET /admin/v1/batch/queues", s.admin(s.listQueues))
	mux.HandleFunc("GET /admin/v1/batch/queues/{path...}", s.admin(s.getQueue))
	mux.HandleFunc("DELETE /admin/v1/batch/queues/{path...}", s.admin(s.deleteQueue))
	mux.HandleFunc("GET /admin/v1/batch/queues/status", s.admin(s.queuesStatus))
}

func decodeAs[T any](b []byte) (any, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

// noQueues answers when the edge has no batch queue bucket (tests of other
// domains build the admin API without one).
func (s *Service) queuesReady(w http.ResponseWriter) bool {
	if s.d.BatchQueues == nil {
		contracts.Write(w, contracts.ErrServiceUnavailable("batch configuration", "is not available on this edge"))
		return false
	}
	return true
}

func (s *Service) configError(w http.ResponseWriter, r *http.Request, what string, err error) {
	if errors.Is(err, kv.ErrNotFound) {
		contracts.Write(w, contracts.ErrNotFound(what+" not found."))
		return
	}
	s.log.Error("batch configuration store", "what", what, "err", err)
	contracts.Write(w, httpapi.StoreError(r.Context(), err, "batch configuration", "The batch configuration could not be read or written."))
}

func invalid(param, msg string) *contracts.Error {
	return contracts.ErrBadRequest(param, contracts.CodeInvalidRequest, msg)
}

// putConfig stores v under key: 201 when it is new, 200 when it replaced
// an entry.
func (s *Service) putConfig(w http.ResponseWriter, r *http.Request, what, key string, v any) {
	_, err := s.d.BatchQueues.Get(r.Context(), key)
	status := http.StatusOK
	if err != nil {
		status = http.StatusCreated
	}
	if _, err := kv.Put(r.Context(), s.d.BatchQueues, key, v); err != nil {
		s.configError(w, r, what, err)
		return
	}
	s.log.Info("batch configuration set", "key", key)
	httpapi.WriteJSON(w, status, v)
}

func listConfig[T any](s *Service, prefix string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.queuesReady(w) {
			return
		}
		es, err := kv.List[T](r.Context(), s.d.BatchQueues, prefix+">")
		if err != nil {
			s.configError(w, r, strings.TrimSuffix(prefix, "."), err)
			return
		}
		data := kv.Values(es)
		if data == nil {
			data = []T{}
		}
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	}
}

func (s *Service) getConfig(what string, keyOf func(string) string, valid func(string) bool, decode func([]byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.queuesReady(w) {
			return
		}
		name := r.PathValue("name")
		if !valid(name) {
			contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("%s '%s' not found.", what, httpapi.Bounded(name, 200))))
			return
		}
		e, err := s.d.BatchQueues.Get(r.Context(), keyOf(name))
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			err = kv.ErrNotFound
		}
		if err != nil {
			s.configError(w, r, fmt.Sprintf("%s '%s'", what, name), err)
			return
		}
		v, err := decode(e.Value())
		if err != nil {
			s.configError(w, r, what, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, v)
	}
}

func (s *Service) deleteConfig(what, object string, keyOf func(string) string, valid func(string) bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.queuesReady(w) {
			return
		}
		name := r.PathValue("name")
		if !valid(name) {
			contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("%s '%s' not found.", what, httpapi.Bounded(name, 200))))
			return
		}
		if err := kv.Delete(r.Context(), s.d.BatchQueues, keyOf(name)); err != nil {
			s.configError(w, r, fmt.Sprintf("%s '%s'", what, name), err)
			return
		}
		s.log.Info("batch configuration deleted", "key", keyOf(name))
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": name, "object": object, "deleted": true})
	}
}

// nameFromPath fills a body's name from the path, refusing a body that
// names another.
func nameFromPath(pathName string, body *string) *contracts.Error {
	if *body != "" && *body != pathName {
		return invalid("name", fmt.Sprintf("The body names '%s' but the path '%s'.", httpapi.Bounded(*body, 200), httpapi.Bounded(pathName, 200)))
	}
	*body = pathName
	return nil
}

// decodeNamed reads the body of a PUT of a named entity: the service must
// hold the queues bucket, the path's name must pass valid (rule says what
// a name is), and a name in the body must be the path's.
func decodeNamed[T any](s *Service, w http.ResponseWriter, r *http.Request, valid func(string) bool, rule string, nameOf func(*T) *string) (T, string, bool) {
	var v T
	if !s.queuesReady(w) || !httpapi.DecodeStrict(w, r, &v) {
		return v, "", false
	}
	name := r.PathValue("name")
	if !valid(name) {
		contracts.Write(w, invalid("name", rule))
		return v, "", false
	}
	if e := nameFromPath(name, nameOf(&v)); e != nil {
		contracts.Write(w, e)
		return v, "", false
	}
	return v, name, true
}

func (s *Service) putFlavor(w http.ResponseWriter, r *http.Request) {
	f, name, ok := decodeNamed(s, w, r, nameRE.MatchString,
		"A flavor name is 1-63 characters of A-Z, a-z, 0-9, '-' and '_', starting with a letter or digit.",
		func(f *batch.Flavor) *string { return &f.Name })
	if ok {
		s.putConfig(w, r, "Flavor", batch.FlavorKey(name), f)
	}
}

func (s *Service) putCohort(w http.ResponseWriter, r *http.Request) {
	c, name, ok := decodeNamed(s, w, r, nameRE.MatchString,
		"A cohort name is 1-63 characters of A-Z, a-z, 0-9, '-' and '_', starting with a letter or digit.",
		func(c *batch.Cohort) *string { return &c.Name })
	if ok {
		s.putConfig(w, r, "Cohort", batch.CohortKey(name), c)
	}
}

func (s *Service) putPool(w http.ResponseWriter, r *http.Request) {
	p, name, ok := decodeNamed(s, w, r, validPool,
		"A pool name is 1-200 characters of A-Z, a-z, 0-9 and '-_/=.', starting with a letter or digit.",
		func(p *batch.Pool) *string { return &p.Name })
	if !ok {
		return
	}
	if err := p.Validate(); err != nil {
		contracts.Write(w, invalid("", httpapi.UpperFirst(err.Error())))
		return
	}
	if p.Cohort != "" && !nameRE.MatchString(p.Cohort) {
		contracts.Write(w, invalid("cohort", "A cohort name is 1-63 characters of A-Z, a-z, 0-9, '-' and '_'."))
		return
	}
	if len(p.Models) == 0 {
		contracts.Write(w, invalid("models", "A pool serves at least one model."))
		return
	}
	for i, m := range p.Models {
		if m == "" || len(m) > 256 || strings.ContainsAny(m, " \t\r\n") {
			contracts.Write(w, invalid("models", fmt.Sprintf("models[%d] must be a model name.", i)))
			return
		}
	}
	for i, q := range p.Quotas {
		if !nameRE.MatchString(q.Flavor) {
			contracts.Write(w, invalid("quotas", fmt.Sprintf("quotas[%d].flavor must name a flavor (a worker class).", i)))
			return
		}
	}
	if p.Quotas == nil {
		p.Quotas = []batch.Quota{}
	}
	s.putConfig(w, r, "Pool", batch.PoolKey(name), p)
}

// queuePath splits .../queues/POOL/TENANT.
func queuePath(path string) (pool, tenant string, ok bool) {
	i := strings.LastIndex(path, "/")
	if i <= 0 {
		return "", "", false
	}
	pool, tenant = path[:i], path[i+1:]
	return pool, tenant, validPool(pool) && registry.ValidTenantID(tenant)
}

func (s *Service) putQueue(w http.ResponseWriter, r *http.Request) {
	if !s.queuesReady(w) {
		return
	}
	var q batch.Queue
	if !httpapi.DecodeStrict(w, r, &q) {
		return
	}
	pool, tenant, ok := queuePath(r.PathValue("path"))
	if !ok {
		contracts.Write(w, invalid("", "Address a queue as /admin/v1/batch/queues/POOL/TENANT with a valid pool name and tenant id."))
		return
	}
	if e := nameFromPath(pool, &q.Pool); e != nil {
		contracts.Write(w, e)
		return
	}
	if e := nameFromPath(tenant, &q.Tenant); e != nil {
		contracts.Write(w, e)
		return
	}
	if err := q.Validate(); err != nil {
		contracts.Write(w, invalid("", httpapi.UpperFirst(err.Error())))
		return
	}
	if _, err := s.store.GetTenant(r.Context(), tenant); err != nil {
		s.storeError(w, r, err, "Tenant '"+tenant+"'")
		return
	}
	s.putConfig(w, r, "Queue", batch.QueueKey(pool, tenant), q)
}

func (s *Service) listQueues(w http.ResponseWriter, r *http.Request) {
	if !s.queuesReady(w) {
		return
	}
	es, err := kv.List[batch.Queue](r.Context(), s.d.BatchQueues, batch.QueuePrefix+">")
	if err != nil {
		s.configError(w, r, "Queues", err)
		return
	}
	pool, tenant := r.URL.Query().Get("pool"), r.URL.Query().Get("tenant")
	data := []batch.Queue{}
	for _, e := range es {
		if (pool == "" || e.Value.Pool == pool) && (tenant == "" || e.Value.Tenant == tenant) {
			data = append(data, e.Value)
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Service) getQueue(w http.ResponseWriter, r *http.Request) {
	if !s.queuesReady(w) {
		return
	}
	pool, tenant, ok := queuePath(r.PathValue("path"))
	if !ok {
		contracts.Write(w, contracts.ErrNotFound("Queue not found."))
		return
	}
	q, _, err := kv.Get[batch.Queue](r.Context(), s.d.BatchQueues, batch.QueueKey(pool, tenant))
	if err != nil {
		s.configError(w, r, fmt.Sprintf("Queue of tenant '%s' in pool '%s'", tenant, pool), err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, q)
}

func (s *Service) deleteQueue(w http.ResponseWriter, r *http.Request) {
	if !s.queuesReady(w) {
		return
	}
	pool, tenant, ok := queuePath(r.PathValue("path"))
	if !ok {
		contracts.Write(w, contracts.ErrNotFound("Queue not found."))
		return
	}
	if err := kv.Delete(r.Context(), s.d.BatchQueues, batch.QueueKey(pool, tenant)); err != nil {
		s.configError(w, r, fmt.Sprintf("Queue of tenant '%s' in pool '%s'", tenant, pool), err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": pool + "/" + tenant, "object": "batch_queue", "deleted": true})
}

// queuesStatus asks the batch service for the scheduler's state.
func (s *Service) queuesStatus(w http.ResponseWriter, r *http.Request) {
	if s.d.NC == nil {
		contracts.Write(w, contracts.ErrServiceUnavailable("batch", "is not reachable from this edge"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.d.BatchQueryTimeout)
	defer cancel()
	body, _ := json.Marshal(batch.QueryRequest{Kind: batch.QueryQueues})
	msg, err := s.d.NC.RequestWithContext(ctx, events.BatchQuery, body)
	if err != nil {
		why := "did not answer in time"
		if errors.Is(err, nats.ErrNoResponders) {
			why = "is not running"
		}
		contracts.Write(w, contracts.ErrServiceUnavailable("batch", why))
		return
	}
	var reply batch.QueuesReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		s.log.Error("batch queues reply", "err", err)
		contracts.Write(w, &contracts.Error{Status: http.StatusBadGateway, Type: contracts.TypeServer, Code: contracts.CodeInternal,
			Message: "The batch service's answer could not be read."})
		return
	}
	if reply.Error != "" {
		contracts.Write(w, &contracts.Error{Status: http.StatusBadGateway, Type: contracts.TypeServer, Code: contracts.CodeServiceUnavailable,
			Message: "The batch service could not answer: " + httpapi.Bounded(reply.Error, 300)})
		return
	}
	if reply.Pools == nil {
		reply.Pools = []batch.PoolStatus{}
	}
	if reply.Queues == nil {
		reply.Queues = []batch.QueueStatus{}
	}
	httpapi.WriteJSON(w, http.StatusOK, reply)
}
