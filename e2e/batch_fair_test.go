package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

// engineLog records, in front of an engine simulator, when each request
// with a "tag=<name>" in its body started and ended at the engine.
type engineLog struct {
	mu      sync.Mutex
	entries []engineEntry
}

type engineEntry struct {
	tag        string
	start, end time.Time
}

var engineTagRE = regexp.MustCompile(`tag=([a-z0-9_-]+)`)

// recordingEngine starts a simulator behind a recording proxy and returns
// the proxy's base URL.
func recordingEngine(t *testing.T, cfg enginesim.Config) (*engineLog, string) {
	t.Helper()
	_, base := sim(t, cfg)
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	l := &engineLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var i = -1
		if m := engineTagRE.FindSubmatch(body); m != nil {
			l.mu.Lock()
			i = len(l.entries)
			l.entries = append(l.entries, engineEntry{tag: string(m[1]), start: time.Now()})
			l.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
		if i >= 0 {
			l.mu.Lock()
			l.entries[i].end = time.Now()
			l.mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	return l, srv.URL + "/v1"
}

func (l *engineLog) snapshot() []engineEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]engineEntry(nil), l.entries...)
}

// taggedLines writes n chat lines tagged tag, custom ids "<tag>-<i>".
func taggedLines(model, tag string, n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"%s-%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"tag=%s line %d"}],"max_tokens":2}}`+"\n",
			tag, i, model, tag, i)
	}
	return b.Bytes()
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n at worst.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// TestBatchFairShareAcrossTenants: three tenants with queue weights 1:2:3
// submit batches for one model at once. While all three have lines
// waiting, the engine sees their lines in proportion to the weights:
// within 10% of each share, Jain's index of share/weight reported.
func TestBatchFairShareAcrossTenants(t *testing.T) {
	const perTenant = 3000
	log, base := recordingEngine(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 2, TimeToFirstToken: 20 * time.Millisecond})
	s := startStack(t, stackOpts{})
	ctx := context.Background()
	if err := s.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "fair",
		"engine": map[string]any{"base_url": base, "model": "up", "max_concurrency": 6}}, nil); err != nil {
		t.Fatal(err)
	}
	tenants := []string{"ta", "tb", "tc"}
	weights := map[string]float64{"ta": 1, "tb": 2, "tc": 3}
	clients := map[string]*openai.Client{}
	for _, tn := range tenants {
		key, _ := s.tenantKey(tn)
		cl := sdkClient(s, key)
		clients[tn] = &cl
		// The model is in no configured pool: its implicit pool is named
		// after it.
		if err := s.admin.Do(ctx, "PUT", "/admin/v1/batch/queues/fair/"+tn, map[string]any{"weight": weights[tn]}, nil); err != nil {
			t.Fatal(err)
		}
		s.waitServed(key, "fair")
	}
	files := map[string]string{}
	for _, tn := range tenants {
		f, err := clients[tn].Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(taggedLines("fair", tn, perTenant)), "lines.jsonl", "application/jsonl"),
			Purpose: openai.FilePurposeBatch})
		if err != nil {
			t.Fatal(err)
		}
		files[tn] = f.ID
	}
	ids := map[string]string{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, tn := range tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := clients[tn].Batches.New(ctx, openai.BatchNewParams{InputFileID: files[tn], Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
				CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ids[tn] = b.ID
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Contention lasts until the first tenant has no line left to start.
	eventually(t, 5*time.Minute, func() bool {
		n := map[string]int{}
		for _, e := range log.snapshot() {
			n[e.tag]++
		}
		return n["ta"] == perTenant || n["tb"] == perTenant || n["tc"] == perTenant
	}, "one tenant's lines all started")
	entries := log.snapshot()
	// The window: from the first moment all three had started a line to
	// the last start before one tenant ran out.
	seen := map[string]bool{}
	from := -1
	for i, e := range entries {
		seen[e.tag] = true
		if len(seen) == 3 {
			from = i
			break
		}
	}
	counts := map[string]int{}
	to := from
	for i := from; i < len(entries); i++ {
		counts[entries[i].tag]++
		to = i
		if counts[entries[i].tag]+countBefore(entries[:from], entries[i].tag) == perTenant {
			break
		}
	}
	total := to - from + 1
	var xs []float64
	for _, tn := range tenants {
		share := float64(counts[tn]) / float64(total)
		want := weights[tn] / 6
		t.Logf("tenant %s (weight %.0f): %d of %d lines started while all three waited: share %.4f, want %.4f (%+.1f%%)",
			tn, weights[tn], counts[tn], total, share, want, 100*(share-want)/want)
		if math.Abs(share-want) > 0.1*want {
			t.Errorf("tenant %s share %.4f is not within 10%% of %.4f", tn, share, want)
		}
		xs = append(xs, share/weights[tn])
	}
	t.Logf("Jain index of share/weight over %d lines: %.5f", total, jain(xs))
	for _, tn := range tenants {
		if _, err := clients[tn].Batches.Cancel(ctx, ids[tn]); err != nil {
			t.Logf("cancel %s: %v", ids[tn], err)
		}
	}
}

func countBefore(es []engineEntry, tag string) int {
	n := 0
	for _, e := range es {
		if e.tag == tag {
			n++
		}
	}
	return n
}

// TestRealtimeRequestDuringABigBatchWaitsForOneLine: while a big batch
// keeps every slot of the model's worker busy, real-time requests are
// served: each takes the next slot a batch line frees (the batch service
// dispatches only to free capacity, and real-time requests come first in a
// worker's slot queue), so it waits for at most one batch line per slot
// to end. The wait is reported in batch-line durations.
func TestRealtimeRequestDuringABigBatchWaitsForOneLine(t *testing.T) {
	const slots = 2
	const lineTime = 100 * time.Millisecond
	log, base := recordingEngine(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 2, TimeToFirstToken: lineTime})
	s := startStack(t, stackOpts{})
	ctx := context.Background()
	if err := s.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "busy",
		"engine": map[string]any{"base_url": base, "model": "up", "max_concurrency": slots}}, nil); err != nil {
		t.Fatal(err)
	}
	key, _ := s.tenantKey("acme")
	s.waitServed(key, "busy")
	c := sdkClient(s, key)
	b := submitBatch(t, c, taggedLines("busy", "batch", 300), nil)
	// Every slot running batch lines.
	eventually(t, time.Minute, func() bool {
		running := 0
		for _, e := range log.snapshot() {
			if e.tag == "batch" && e.end.IsZero() {
				running++
			}
		}
		return running == slots
	}, "every slot running a batch line")
	var waits []float64
	for i := range 8 {
		tag := fmt.Sprintf("realtime%d", i)
		sent := time.Now()
		st, body := s.post(key, "/v1/chat/completions", fmt.Sprintf(`{"model":"busy","messages":[{"role":"user","content":"tag=%s"}],"max_tokens":2}`, tag))
		if st != http.StatusOK {
			t.Fatalf("real-time request %d: %d %s", i, st, body)
		}
		var started time.Time
		for _, e := range log.snapshot() {
			if e.tag == tag {
				started = e.start
			}
		}
		// Batch lines that ended while the request waited: one per slot
		// when it took the first slot freed after it arrived, plus at most
		// one that ended while the request was still on its way to the
		// worker. A request queued behind batch lines would see each slot
		// end twice or more.
		ended := 0
		for _, e := range log.snapshot() {
			if e.tag == "batch" && e.end.After(sent) && e.end.Before(started) {
				ended++
			}
		}
		if ended > slots+1 {
			t.Errorf("real-time request %d: %d batch lines ended at the engine while it waited, on %d slots", i, ended, slots)
			for _, e := range log.snapshot() {
				if e.start.After(sent.Add(-2*lineTime)) && e.start.Before(started.Add(lineTime)) {
					t.Logf("  %s start %+v end %+v", e.tag, e.start.Sub(sent), e.end.Sub(sent))
				}
			}
		}
		waits = append(waits, float64(started.Sub(sent))/float64(lineTime))
	}
	sort.Float64s(waits)
	t.Logf("real-time wait for a slot during the batch, in batch-line durations (%s): median %.2f, max %.2f", lineTime, waits[len(waits)/2], waits[len(waits)-1])
	if _, err := c.Batches.Cancel(ctx, b.ID); err != nil {
		t.Logf("cancel: %v", err)
	}
}
