package batch

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/registry"
)

type delivery struct {
	header http.Header
	body   []byte
}

func TestWebhooksSignedAndRetried(t *testing.T) {
	e := newEnv(t, Config{WebhookBackoff: []time.Duration{10 * time.Millisecond}})
	var mu sync.Mutex
	var got []delivery
	failures := 1 // the first delivery is answered 500 and retried
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		got = append(got, delivery{r.Header.Clone(), b})
	}))
	defer hook.Close()

	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(raw)
	sealedSecret, err := testSecretsKey.Public().Seal([]byte(secret), registry.WebhookSecretContext(testTenant, hook.URL))
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := e.js.KeyValue(testCtx(t), events.BucketTenants)
	if err != nil {
		t.Fatal(err)
	}
	ten := registry.Tenant{ID: testTenant, CreatedAt: time.Now(), Webhook: &registry.Webhook{URL: hook.URL, SecretSealed: sealedSecret,
		Events: []string{registry.WebhookBatchCompleted, registry.WebhookBatchFailed}}}
	if _, err := kv.Put(testCtx(t), tenants, "t."+testTenant, ten); err != nil {
		t.Fatal(err)
	}
	e.startWorker("w1", 2, true)
	e.start()

	ok := e.submit(api.EndpointChatCompletions, chatLines(2))
	bad := e.submit(api.EndpointChatCompletions, []string{`{"custom_id":"x"}`})
	e.waitStatus(ok.ID, 30*time.Second, api.StatusCompleted)
	e.waitStatus(bad.ID, 30*time.Second, api.StatusFailed)
	e.eventually(30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 2
	}, "two webhooks delivered")

	mu.Lock()
	defer mu.Unlock()
	types := map[string]string{}
	for _, d := range got {
		var ev WebhookEvent
		if err := json.Unmarshal(d.body, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Object != "event" || ev.CreatedAt == 0 || len(ev.ID) < 5 || ev.ID[:4] != "evt_" || d.header.Get("webhook-id") != ev.ID {
			t.Fatalf("event %s, headers %v", d.body, d.header)
		}
		ts := d.header.Get("webhook-timestamp")
		if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
			t.Fatalf("timestamp %q", ts)
		}
		if want := Sign(raw, ev.ID, ts, d.body); d.header.Get("webhook-signature") != want {
			t.Fatalf("signature %q, want %q", d.header.Get("webhook-signature"), want)
		}
		types[ev.Data.ID] = ev.Type
	}
	if types[ok.ID] != "batch.completed" || types[bad.ID] != "batch.failed" || len(types) != 2 {
		t.Fatalf("deliveries %v", types)
	}
}

func TestWebhookClientRefusesLinkLocal(t *testing.T) {
	c := webhookClient(2 * time.Second)
	for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://[fe80::1]:80/"} {
		resp, err := c.Get(u)
		if err == nil {
			_ = resp.Body.Close()
			t.Fatalf("%s was dialled", u)
		}
		if !errors.Is(err, errRefusedAddress) {
			t.Fatalf("%s: %v, want the refusal", u, err)
		}
	}
}

func TestQueuesQuery(t *testing.T) {
	e := newEnv(t, Config{})
	e.worker.gate = make(chan struct{})
	e.startWorker("w1", 2, true)
	e.start()
	rec := e.submit(api.EndpointChatCompletions, chatLines(10))
	e.eventually(30*time.Second, func() bool { return e.get(rec.ID).Status == api.StatusInProgress }, "in progress")

	ask := func(kind string) api.QueuesReply {
		b, _ := json.Marshal(api.QueryRequest{Kind: kind})
		m, err := e.nc.Request(events.BatchQuery, b, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r api.QueuesReply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	var r api.QueuesReply
	e.eventually(30*time.Second, func() bool {
		r = ask(api.QueryQueues)
		for _, q := range r.Queues {
			if q.Tenant == testTenant && q.Admitted == 2 && q.Waiting > 0 {
				return true
			}
		}
		return false
	}, "the tenant's queue with 2 lines admitted and more waiting")
	if r.Error != "" || len(r.Pools) == 0 || r.Pools[0].Name != testModel || !r.Pools[0].Implicit {
		t.Fatalf("reply %+v", r)
	}
	if r := ask("nope"); r.Error == "" {
		t.Fatalf("an unknown kind was answered: %+v", r)
	}
	close(e.worker.gate)
	e.waitStatus(rec.ID, 30*time.Second, api.StatusCompleted)
}
