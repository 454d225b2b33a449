// Package bench measures what aiforge adds over calling an engine directly:
// the engine simulator is called both ways in the same run, interleaved, so
// the figures are ratios against a baseline that saw the same noise.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/enginesim"
)

// Options size a run.
type Options struct {
	// Requests per latency series at concurrency 1.
	Requests int
	// Concurrency and Duration of the throughput runs.
	Concurrency int
	Duration    time.Duration
	// Tokens per streamed answer.
	Tokens int
	// Progress receives one line per phase.
	Progress io.Writer
}

// Series is latency statistics of one path.
type Series struct {
	P50, P99 time.Duration
}

// Report holds the figures of a run.
type Report struct {
	PlainDirect, PlainAiforge   Series
	StreamDirect, StreamAiforge Series
	RPSDirect, RPSAiforge       float64
	Concurrency                 int
	Tokens                      int
}

// Print writes the report as a table.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "%-34s %10s %10s %10s\n", "concurrency 1", "direct", "aiforge", "added")
	row := func(name string, d, a time.Duration) {
		fmt.Fprintf(w, "%-34s %10s %10s %10s\n", name, us(d), us(a), us(a-d))
	}
	row("plain chat p50", r.PlainDirect.P50, r.PlainAiforge.P50)
	row("plain chat p99", r.PlainDirect.P99, r.PlainAiforge.P99)
	row(fmt.Sprintf("streamed chat (%d tokens) p50", r.Tokens), r.StreamDirect.P50, r.StreamAiforge.P50)
	row(fmt.Sprintf("streamed chat (%d tokens) p99", r.Tokens), r.StreamDirect.P99, r.StreamAiforge.P99)
	fmt.Fprintf(w, "\n%-34s %10s %10s %10s\n", fmt.Sprintf("concurrency %d, plain chat", r.Concurrency), "direct", "aiforge", "ratio")
	fmt.Fprintf(w, "%-34s %10.0f %10.0f %9.1f%%\n", "requests per second", r.RPSDirect, r.RPSAiforge, 100*r.RPSAiforge/r.RPSDirect)
}

func us(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000) }

// Env is a running engine simulator and an all-in-one aiforge (auth and
// usage on) with one model bound to the simulator.
type Env struct {
	Direct, Gateway target
	// Sim is the engine simulator, at EngineURL (ending in /v1).
	Sim       *enginesim.Sim
	EngineURL string
	// Admin is the admin API client, Tenant the tenant's API client.
	Admin, Tenant *cli.Client
	close         func()
}

// Close stops everything Setup started.
func (e *Env) Close() { e.close() }

// Setup starts the simulator and aiforge and waits until the model answers.
func Setup(ctx context.Context, progress io.Writer) (*Env, error) {
	return SetupEngine(ctx, progress, enginesim.Config{}, nil)
}

// SetupEngine is Setup with the simulator configured by sim (its Models are
// set by the bench).
func SetupEngine(ctx context.Context, progress io.Writer, sim enginesim.Config, tune func(*app.Options)) (*Env, error) {
	if progress == nil {
		progress = io.Discard
	}
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	sim.Models = []string{"bench-upstream"}
	engine, engineURL, closeSim, err := enginesim.Start(sim)
	if err != nil {
		return nil, err
	}
	closers = append(closers, closeSim)
	dir, err := os.MkdirTemp("", "aiforge-bench-")
	if err != nil {
		cleanup()
		return nil, err
	}
	closers = append(closers, func() { _ = os.RemoveAll(dir) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanup()
		return nil, err
	}
	const admin = "bench-admin-key-0123456789"
	opts := app.Options{DataDir: dir, EdgeListener: ln, AdminKey: admin}
	if tune != nil {
		tune(&opts)
	}
	a, err := app.New(opts)
	if err != nil {
		cleanup()
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	closers = append(closers, func() { stop(); <-done })
	base := "http://" + ln.Addr().String()

	fmt.Fprintln(progress, "starting aiforge and the engine simulator ...")
	fail := func(err error) (*Env, error) { cleanup(); return nil, err }
	if err := waitReady(ctx, base); err != nil {
		return fail(err)
	}
	cl := &cli.Client{BaseURL: base, Token: admin}
	if err := cl.Do(ctx, "POST", "/admin/v1/tenants", map[string]string{"id": "bench"}, nil); err != nil {
		return fail(err)
	}
	var key struct {
		Key string `json:"key"`
	}
	if err := cl.Do(ctx, "POST", "/admin/v1/keys", map[string]any{"tenant": "bench"}, &key); err != nil {
		return fail(err)
	}
	if err := cl.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "bench", "engine": map[string]any{"base_url": engineURL, "model": "bench-upstream"}}, nil); err != nil {
		return fail(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute}}
	env := &Env{
		Sim:       engine,
		EngineURL: engineURL,
		Admin:     cl,
		Tenant:    &cli.Client{BaseURL: base, Token: key.Key},
		Direct:    target{hc: hc, url: engineURL + "/chat/completions", model: "bench-upstream"},
		Gateway:   target{hc: hc, url: base + "/v1/chat/completions", model: "bench", key: key.Key},
		close:     cleanup,
	}
	if err := waitServed(ctx, env.Gateway); err != nil {
		return fail(err)
	}
	return env, nil
}

// Run measures both paths, interleaved at concurrency 1 and one after the
// other at o.Concurrency.
func Run(ctx context.Context, o Options) (Report, error) {
	if o.Requests == 0 {
		o.Requests = 2000
	}
	if o.Concurrency == 0 {
		o.Concurrency = 32
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Tokens == 0 {
		o.Tokens = 16
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	rep := Report{Concurrency: o.Concurrency, Tokens: o.Tokens}
	env, err := Setup(ctx, o.Progress)
	if err != nil {
		return rep, err
	}
	defer env.Close()
	direct, gw := env.Direct, env.Gateway

	// Warm both paths: connections, pools, caches.
	for i := 0; i < 200; i++ {
		_, _ = direct.Call(false, o.Tokens)
		_, _ = gw.Call(false, o.Tokens)
	}

	fmt.Fprintf(o.Progress, "concurrency 1: %d plain requests each way, interleaved ...\n", o.Requests)
	rep.PlainDirect, rep.PlainAiforge, err = interleaved(o.Requests, func() (time.Duration, error) { return direct.Call(false, o.Tokens) },
		func() (time.Duration, error) { return gw.Call(false, o.Tokens) })
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(o.Progress, "concurrency 1: %d streamed requests each way, interleaved ...\n", o.Requests)
	rep.StreamDirect, rep.StreamAiforge, err = interleaved(o.Requests, func() (time.Duration, error) { return direct.Call(true, o.Tokens) },
		func() (time.Duration, error) { return gw.Call(true, o.Tokens) })
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(o.Progress, "concurrency %d: %s direct, then %s through aiforge ...\n", o.Concurrency, o.Duration, o.Duration)
	if rep.RPSDirect, err = throughput(o.Concurrency, o.Duration, func() error { _, err := direct.Call(false, o.Tokens); return err }); err != nil {
		return rep, err
	}
	if rep.RPSAiforge, err = throughput(o.Concurrency, o.Duration, func() error { _, err := gw.Call(false, o.Tokens); return err }); err != nil {
		return rep, err
	}
	return rep, nil
}

type target struct {
	hc    *http.Client
	url   string
	model string
	key   string
	// prompt is the user message (default "measure me").
	prompt string
}

// Call sends one chat request and reads the whole answer.
func (t target) Call(stream bool, tokens int) (time.Duration, error) {
	prompt := t.prompt
	if prompt == "" {
		prompt = "measure me"
	}
	body := fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":%d,"stream":%t}`, t.model, prompt, tokens, stream)
	req, _ := http.NewRequest("POST", t.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if t.key != "" {
		req.Header.Set("Authorization", "Bearer "+t.key)
	}
	start := time.Now()
	resp, err := t.hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: HTTP %d", t.url, resp.StatusCode)
	}
	return d, nil
}

func interleaved(n int, a, b func() (time.Duration, error)) (Series, Series, error) {
	da := make([]time.Duration, 0, n)
	db := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		x, err := a()
		if err != nil {
			return Series{}, Series{}, err
		}
		y, err := b()
		if err != nil {
			return Series{}, Series{}, err
		}
		da = append(da, x)
		db = append(db, y)
	}
	return stats(da), stats(db), nil
}

func stats(d []time.Duration) Series {
	slices.Sort(d)
	return Series{P50: d[len(d)/2], P99: d[len(d)*99/100]}
}

func throughput(conc int, dur time.Duration, call func() error) (float64, error) {
	var count atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := call(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return 0, e
	}
	return float64(count.Load()) / time.Since(start).Seconds(), nil
}

func waitReady(ctx context.Context, base string) error {
	for i := 0; i < 2000; i++ {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("aiforge did not become ready")
}

func waitServed(ctx context.Context, t target) error {
	var err error
	for i := 0; i < 500; i++ {
		if _, err = t.Call(false, 1); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("model not served: %w", err)
}
