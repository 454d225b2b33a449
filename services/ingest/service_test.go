package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/services/ingest/internal/hostile"
	"github.com/aiforge/aiforge/services/ingest/internal/testpdf"
)

// outcome is a chunked or failed event seen on the bus.
type outcome struct {
	tenant, file string
	failed       bool
	code, msg    string
	chunks       int
	pages        int
}

type harness struct {
	t       *testing.T
	js      jetstream.JetStream
	objects objstore.Store
	mu      sync.Mutex
	seen    []outcome
}

func newHarness(t *testing.T) *harness {
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
	objects, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = objects.Close() })
	h := &harness{t: t, js: js, objects: objects}
	reg := events.NewRegistry(func() events.Event { return &events.DocChunkedV1{} }, func() events.Event { return &events.DocFailedV1{} })
	cons, err := js.OrderedConsumer(ctx, events.StreamDocs, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.DocsChunkedAll, events.DocsFailedAll}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		_, ev, err := reg.Decode(m.Headers(), m.Data())
		if err != nil {
			t.Errorf("decode %s: %v", m.Subject(), err)
			return
		}
		var o outcome
		switch ev := ev.(type) {
		case *events.DocChunkedV1:
			o = outcome{tenant: ev.Tenant, file: ev.FileID, chunks: ev.Chunks, pages: ev.Pages}
		case *events.DocFailedV1:
			o = outcome{tenant: ev.Tenant, file: ev.FileID, failed: true, code: ev.Code, msg: ev.Message}
		}
		h.mu.Lock()
		h.seen = append(h.seen, o)
		h.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return h
}

// run starts a service; the returned stop ends it and waits for Run.
func (h *harness) run(cfg Config, p Parser) (stop func()) {
	h.t.Helper()
	svc, err := New(cfg, Deps{JS: h.js, Objects: h.objects, Parser: p})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("Run: %v", err)
			}
		})
	}
	h.t.Cleanup(stop)
	return stop
}

func (h *harness) submit(tenant, file, filename string, data []byte) {
	h.t.Helper()
	ctx := context.Background()
	key := objstore.TenantPrefix(tenant) + "files/" + file
	if _, err := h.objects.Put(ctx, key, strings.NewReader(string(data)), int64(len(data)), "application/octet-stream"); err != nil {
		h.t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	req := events.DocIngestRequestedV1{
		DocRef:    events.DocRef{Tenant: tenant, StoreID: "vs_1", FileID: file, Run: "r1"},
		ObjectKey: key, Filename: filename, ContentSHA256: hex.EncodeToString(sum[:]),
		Chunking: events.Chunking{MaxTokens: 800, OverlapTokens: 400}, RequestedAt: time.Now().UTC(),
	}
	if _, err := events.Publish(ctx, h.js, req, events.Envelope{ID: "ingest-" + tenant + "-" + file, Source: "test", Tenant: tenant}); err != nil {
		h.t.Fatal(err)
	}
}

// outcomes returns what was seen of a tenant's file.
func (h *harness) outcomes(tenant, file string) []outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []outcome
	for _, o := range h.seen {
		if o.tenant == tenant && o.file == file {
			out = append(out, o)
		}
	}
	return out
}

// waitFor polls until cond holds.
func (h *harness) waitFor(what string, timeout time.Duration, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gated holds the files named slow-* until its gate opens, counting those
// held at once.
type gated struct {
	inner         Parser
	gate          chan struct{}
	held, maxHeld atomic.Int32
}

func (g *gated) Parse(ctx context.Context, req ParseRequest) (*Parsed, error) {
	if strings.HasPrefix(req.Filename, "slow-") {
		n := g.held.Add(1)
		for {
			m := g.maxHeld.Load()
			if n <= m || g.maxHeld.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-g.gate:
		case <-ctx.Done():
			g.held.Add(-1)
			return nil, ctx.Err()
		}
		g.held.Add(-1)
	}
	return g.inner.Parse(ctx, req)
}

// Tenant A's slow files take at most their share of the workers, several at
// once; tenant B's small file, submitted after them, completes while all of
// A's are still being parsed.
func TestSlowTenantDoesNotDelayAnother(t *testing.T) {
	h := newHarness(t)
	inner, err := NewInProcess()
	if err != nil {
		t.Fatal(err)
	}
	g := &gated{inner: inner, gate: make(chan struct{})}
	h.run(Config{Workers: 3}, g)
	for i := range 5 {
		h.submit("tenant-a", fmt.Sprintf("file-a%d", i), fmt.Sprintf("slow-%d.txt", i), []byte("Slow file of tenant A."))
	}
	h.waitFor("two of A's files parsing at once", 30*time.Second, func() bool { return g.held.Load() == 2 })
	h.submit("tenant-b", "file-b", "small.txt", []byte("Small file of tenant B."))
	h.waitFor("B's file chunked", 30*time.Second, func() bool { return len(h.outcomes("tenant-b", "file-b")) > 0 })
	if o := h.outcomes("tenant-b", "file-b")[0]; o.failed || o.chunks != 1 {
		t.Fatalf("B's outcome %+v", o)
	}
	for i := range 5 {
		if o := h.outcomes("tenant-a", fmt.Sprintf("file-a%d", i)); len(o) != 0 {
			t.Fatalf("A's file %d finished before B's: %+v", i, o)
		}
	}
	if g.held.Load() != 2 || g.maxHeld.Load() != 2 {
		t.Fatalf("A held %d workers (at most %d), want 2 of 3", g.held.Load(), g.maxHeld.Load())
	}
	close(g.gate)
	for i := range 5 {
		file := fmt.Sprintf("file-a%d", i)
		h.waitFor("A's "+file, 30*time.Second, func() bool { return len(h.outcomes("tenant-a", file)) > 0 })
	}
}

// Every hostile document fails at once, once, in the parser child, with its
// limit named; another tenant's small file completes meanwhile; after a
// restart none of them comes back.
func TestHostileFilesFailOnceAndStayFailed(t *testing.T) {
	h := newHarness(t)
	t.Setenv("AIFORGE_TEST_PARSE_CHILD", "1")
	child := &ChildProcess{Command: []string{os.Args[0]}}
	stop := h.run(Config{}, child)
	var corpus []hostile.Case
	for _, c := range hostile.Corpus() {
		if !c.Heavy || !raceEnabled { // minutes under the race detector
			corpus = append(corpus, c)
		}
	}
	for i, c := range corpus {
		h.submit("tenant-a", fmt.Sprintf("hostile-%d", i), c.Filename, c.Data())
	}
	h.submit("tenant-b", "small", "small.txt", []byte("A small and friendly file."))
	for i, c := range corpus {
		file := fmt.Sprintf("hostile-%d", i)
		h.waitFor(c.Name, 5*time.Minute, func() bool { return len(h.outcomes("tenant-a", file)) > 0 })
		o := h.outcomes("tenant-a", file)[0]
		switch {
		case c.Limit == "" && o.failed:
			t.Errorf("%s failed: %+v", c.Name, o)
		case c.Limit != "" && (!o.failed || o.code != "invalid_file" || !strings.Contains(o.msg, c.Limit)):
			t.Errorf("%s: outcome %+v, want a failure naming %s", c.Name, o, c.Limit)
		}
	}
	h.waitFor("B's small file", time.Minute, func() bool { return len(h.outcomes("tenant-b", "small")) > 0 })

	// restart: nothing of A's comes back
	stop()
	h.run(Config{}, child)
	h.submit("tenant-b", "after-restart", "after.txt", []byte("Submitted after the restart."))
	h.waitFor("B's file after the restart", time.Minute, func() bool { return len(h.outcomes("tenant-b", "after-restart")) > 0 })
	for i, c := range corpus {
		if n := len(h.outcomes("tenant-a", fmt.Sprintf("hostile-%d", i))); n != 1 {
			t.Errorf("%s: %d outcomes, want 1", c.Name, n)
		}
	}
}

// A 20,000-page PDF (the documented page limit) completes: parsing takes
// longer than the consumer's 30 s AckWait on a small machine, and the lease
// is kept meanwhile.
func TestTwentyThousandPagePDF(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("generates and parses a 16 MB PDF of 20,000 pages (about a minute; .ci/run runs it without -race)")
	}
	h := newHarness(t)
	t.Setenv("AIFORGE_TEST_PARSE_CHILD", "1")
	h.run(Config{}, &ChildProcess{Command: []string{os.Args[0]}})
	h.submit("tenant-a", "big", "big.pdf", testpdf.Report(t, 20000))
	h.waitFor("the 20,000-page PDF", 10*time.Minute, func() bool { return len(h.outcomes("tenant-a", "big")) > 0 })
	if o := h.outcomes("tenant-a", "big"); len(o) != 1 || o[0].failed || o[0].pages != 20000 || o[0].chunks < 20000 {
		t.Fatalf("outcomes %+v", o)
	}
}

// Shutting down abandons a file being parsed instead of waiting for it; its
// request comes back to the next run, which completes it once.
func TestShutdownAbandonsWorkInProgress(t *testing.T) {
	h := newHarness(t)
	inner, err := NewInProcess()
	if err != nil {
		t.Fatal(err)
	}
	g := &gated{inner: inner, gate: make(chan struct{})} // never opened
	stop := h.run(Config{}, g)
	h.submit("tenant-a", "file-1", "slow-1.txt", []byte("A file parsed across a restart."))
	h.waitFor("the file parsing", 30*time.Second, func() bool { return g.held.Load() == 1 })
	stop() // returns although the parse would never end
	if o := h.outcomes("tenant-a", "file-1"); len(o) != 0 {
		t.Fatalf("outcome before the restart: %+v", o)
	}
	h.run(Config{}, inner)
	h.waitFor("the file after the restart", 30*time.Second, func() bool { return len(h.outcomes("tenant-a", "file-1")) > 0 })
	if o := h.outcomes("tenant-a", "file-1"); len(o) != 1 || o[0].failed {
		t.Fatalf("outcomes %+v", o)
	}
}
