package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/query"
	"github.com/aiforge/aiforge/pkg/registry"
)

// harness is one embedded JetStream with the bus contract, a registry and
// a fixed day grid: base is UTC midnight two days ago, so every event
// lies in the past and is stored (stream time) after its minute.
type harness struct {
	t     testing.TB
	nc    *nats.Conn
	js    jetstream.JetStream
	store *registry.Store
	base  time.Time
	// keyIDs, when set, are the two key ids of each tenant in mixed.
	keyIDs map[string][2]string
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	store, err := registry.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, nc: nc, js: js, store: store, base: time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour)}
}

// Test prices: m1 doubles at base+24h; emb is cheap; free has none.
var (
	priceM1a = registry.Price{InputPerMTokUSD: 2.5, CachedInputPerMTokUSD: 1.25, OutputPerMTokUSD: 10}
	priceM1b = registry.Price{InputPerMTokUSD: 5, CachedInputPerMTokUSD: 2.5, OutputPerMTokUSD: 20}
	priceM2  = registry.Price{InputPerMTokUSD: 0.15, CachedInputPerMTokUSD: 0.075, OutputPerMTokUSD: 0.6}
	priceEmb = registry.Price{InputPerMTokUSD: 0.02}
)

func (h *harness) setPrices() {
	h.t.Helper()
	ctx := context.Background()
	for _, p := range []struct {
		model string
		p     registry.Price
		from  time.Time
	}{
		{"m1", priceM1a, h.base.Add(-30 * 24 * time.Hour)},
		{"m1", priceM1b, h.base.Add(24 * time.Hour)},
		{"m2", priceM2, h.base.Add(-30 * 24 * time.Hour)},
		{"emb", priceEmb, h.base.Add(-30 * 24 * time.Hour)},
	} {
		p.p.EffectiveFrom = p.from
		if _, err := h.store.SetPrice(ctx, p.model, p.p); err != nil {
			h.t.Fatal(err)
		}
	}
}

// priceAt is the test's own idea of the price in force (independent of
// the ledger's code).
func (h *harness) priceAt(model string, at time.Time) (registry.Price, bool) {
	switch model {
	case "m1":
		if at.Before(h.base.Add(24 * time.Hour)) {
			return priceM1a, true
		}
		return priceM1b, true
	case "m2":
		return priceM2, true
	case "emb":
		return priceEmb, true
	}
	return registry.Price{}, false
}

func (h *harness) cost(model string, at time.Time, prompt, cached, completion int64, discount float64) int64 {
	p, ok := h.priceAt(model, at)
	if !ok {
		return 0
	}
	return int64(math.Round((float64(prompt-cached)*p.InputPerMTokUSD*1000 + float64(cached)*p.CachedInputPerMTokUSD*1000 +
		float64(completion)*p.OutputPerMTokUSD*1000) * discount))
}

// pub is one message to publish.
type pub struct {
	subject string // "" means ev.Subject(); else where an older producer put it
	ev      events.Event
	id      string // ce-id
	msgID   string // Nats-Msg-Id; "" means id
}

func recorded(h *harness, i int, tenant, key, model, endpoint string, at time.Time, prompt, cached, completion int64, status string) events.UsageRecordedV1 {
	return events.UsageRecordedV1{
		RequestID: fmt.Sprintf("req-%06d", i), Tenant: tenant, KeyID: key, Model: model, Endpoint: endpoint,
		PromptTokens: prompt, CachedPromptTokens: cached, CompletionTokens: completion, Status: status,
		Reporter: "test", StartedAt: at, FinishedAt: at.Add(800 * time.Millisecond),
	}
}

// mixed makes n usage events over the two days of the grid: V1 and V2,
// three tenants with two keys each, three endpoints, priced and unpriced
// models, some errors and cancellations.
func (h *harness) mixed(n int) []pub {
	tenants := []string{"alpha", "beta", "gamma"}
	out := make([]pub, 0, n)
	for i := range n {
		tenant := tenants[i%3]
		key := fmt.Sprintf("key_%s_%d", tenant, (i/3)%2)
		if h.keyIDs != nil {
			key = h.keyIDs[tenant][(i/3)%2]
		}
		endpoint, model := events.EndpointChatCompletions, "m1"
		switch i % 10 {
		case 3, 7:
			endpoint = events.EndpointCompletions
			model = "m2"
		case 5:
			endpoint, model = events.EndpointEmbeddings, "emb"
		case 9:
			model = "free"
		}
		status := events.UsageStatusOK
		switch {
		case i%17 == 0:
			status = events.UsageStatusError
		case i%29 == 0:
			status = events.UsageStatusCanceled
		}
		at := h.base.Add(time.Duration(i%2880)*time.Minute + time.Duration(i%60)*time.Second)
		prompt := int64(50 + i%400)
		cached := int64(i % 40)
		completion := int64(10 + i%300)
		if endpoint == events.EndpointEmbeddings {
			completion = 0
		}
		u := recorded(h, i, tenant, key, model, endpoint, at, prompt, cached, completion, status)
		var ev events.Event = u
		if i%2 == 1 {
			ev = events.UsageRecordedV2{UsageRecordedV1: u}
		}
		p := pub{ev: ev, id: u.RequestID}
		if i%4 == 3 {
			p.subject = u.Subject() // a v2 event where producers put it before v2 had its own subject
		}
		out = append(out, p)
	}
	return out
}

// expected sums what pubs should fold into, by the test's own rules.
func (h *harness) expected(pubs []pub, discounts map[string]float64) ledger.Counters {
	var c ledger.Counters
	seen := map[string]bool{}
	for _, p := range pubs {
		if seen[p.id] {
			continue
		}
		seen[p.id] = true
		var u events.UsageRecordedV1
		switch e := p.ev.(type) {
		case events.UsageRecordedV1:
			u = e
		case events.UsageRecordedV2:
			u = e.UsageRecordedV1
		default:
			continue
		}
		c.Requests++
		c.InputTokens += u.PromptTokens
		c.CachedInputTokens += u.CachedPromptTokens
		c.OutputTokens += u.CompletionTokens
		if u.Status != events.UsageStatusOK {
			c.Errors++
		}
		d := 1.0
		if f, ok := discounts[u.Endpoint]; ok {
			d = f
		}
		if _, ok := h.priceAt(u.Model, u.StartedAt); ok {
			c.CostNano += h.cost(u.Model, u.StartedAt, u.PromptTokens, u.CachedPromptTokens, u.CompletionTokens, d)
		} else {
			c.Unpriced++
		}
	}
	return c
}

// publish publishes pubs asynchronously, in order, and checks every ack.
// It returns how many were stored (not dropped as duplicates).
func (h *harness) publish(pubs []pub) int {
	h.t.Helper()
	const chunk = 2000
	stored := 0
	for lo := 0; lo < len(pubs); lo += chunk {
		futs := make([]jetstream.PubAckFuture, 0, chunk)
		for _, p := range pubs[lo:min(lo+chunk, len(pubs))] {
			m, err := events.Marshal(p.ev, events.Envelope{ID: p.id, Source: "test"})
			if err != nil {
				h.t.Fatal(err)
			}
			if p.subject != "" {
				m.Subject = p.subject
			}
			if p.msgID != "" {
				m.Header.Set(nats.MsgIdHdr, p.msgID)
			}
			f, err := h.js.PublishMsgAsync(m)
			for errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				<-h.js.PublishAsyncComplete()
				f, err = h.js.PublishMsgAsync(m)
			}
			if err != nil {
				h.t.Fatal(err)
			}
			futs = append(futs, f)
		}
		select {
		case <-h.js.PublishAsyncComplete():
		case <-time.After(60 * time.Second):
			h.t.Fatal("publish acks did not arrive")
		}
		for _, f := range futs {
			select {
			case ack := <-f.Ok():
				if !ack.Duplicate {
					stored++
				}
			case err := <-f.Err():
				h.t.Fatalf("publish: %v", err)
			}
		}
	}
	return stored
}

func (h *harness) lastSeq() uint64 {
	h.t.Helper()
	st, err := h.js.Stream(context.Background(), events.StreamUsage)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.LastSeq
}

// running is a started service.
type running struct {
	svc    *Service
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// start runs a service; hook (optional) can set test hooks before Run.
func (h *harness) start(cfg Config, hook func(s *Service, cancel context.CancelFunc)) *running {
	h.t.Helper()
	reg := prometheus.NewRegistry()
	s, err := New(cfg, Deps{NC: h.nc, JS: h.js, Registerer: reg})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if hook != nil {
		hook(s, cancel)
	}
	r := &running{svc: s, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for !s.Ready() {
		select {
		case err := <-r.done:
			r.done <- err
			if err != nil {
				h.t.Fatalf("usage service stopped at start: %v", err)
			}
			return r // stopped by its hook already
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatal("usage service not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Cleanup(func() { r.stop(h.t) })
	return r
}

// stop cancels the service and waits for Run to return.
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	r.wait(t)
}

// wait waits for Run to return.
func (r *running) wait(t testing.TB) {
	t.Helper()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("usage service did not stop")
	}
}

// waitFolded waits until the service folded up to seq.
func waitFolded(t testing.TB, s *Service, seq uint64) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for s.FoldedSeq() < seq {
		if time.Now().After(deadline) {
			t.Fatalf("folded %d of %d before the deadline", s.FoldedSeq(), seq)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// query asks the service over the bus and returns the raw reply.
func (h *harness) query(req query.UsageRequest) []byte {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := query.AskUsage(ctx, h.nc, req)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

func (h *harness) audit(from, to time.Time) query.AuditReply {
	h.t.Helper()
	b := h.query(query.UsageRequest{Op: query.OpAudit, From: from.Unix(), To: to.Unix()})
	var rep query.AuditReply
	if err := json.Unmarshal(b, &rep); err != nil || rep.To == 0 {
		h.t.Fatalf("audit reply %s: %v", b, err)
	}
	return rep
}

func (h *harness) ledgerDump(from, to time.Time, scope string) query.LedgerReply {
	h.t.Helper()
	b := h.query(query.UsageRequest{Op: query.OpLedger, From: from.Unix(), To: to.Unix(), Scope: scope})
	var rep query.LedgerReply
	if err := json.Unmarshal(b, &rep); err != nil || rep.Object != "list" {
		h.t.Fatalf("ledger reply %s: %v", b, err)
	}
	return rep
}

func sum(bs []ledger.Bucket) ledger.Counters {
	var c ledger.Counters
	for _, b := range bs {
		c.Add(b.Counters)
	}
	return c
}
