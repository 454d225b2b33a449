package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/internal/cli"
	api "github.com/aiforge/aiforge/pkg/sandbox"
	sandboxsvc "github.com/aiforge/aiforge/services/sandbox"
	sbxrt "github.com/aiforge/aiforge/services/sandbox/runtime"
)

// SandboxOptions size a sandbox run.
type SandboxOptions struct {
	// Execs per warm exec series (default 300).
	Execs int
	// Colds is the rounds of the cold start series (default 20).
	Colds int
	// Runsc is the runsc binary (default runsc from PATH).
	Runsc    string
	Progress io.Writer
}

// SandboxExec is one language's warm exec series: on the runtime directly
// (no edge, no bus) and through aiforge (HTTP to the edge, the bus to the
// sandbox service, the same kind of sandbox).
type SandboxExec struct {
	Language, Code  string
	Direct, Aiforge Series
}

// SandboxReport holds the figures of a sandbox run.
type SandboxReport struct {
	Execs, Colds int
	CPUs         int
	Runsc        string // runsc --version's first line
	Platform     string
	Python, Bash SandboxExec
	// The cold series, one of each per round, interleaved:
	// RunscDo is `runsc do /bin/true` (gVisor's own floor: no bundle, no
	// limits, no interpreter); RuntimeStart is runtime.Start on the
	// runtime directly (what a cold create does, without edge, bus or
	// records) and RuntimeFirst the same plus a first exec; ColdCreate and
	// ColdFirst are a create and the create plus its first exec through
	// aiforge with the warm pool off; WarmCreate and WarmFirst the same
	// with the pool on (1g=2), the pool refilled before each.
	RunscDo                    Series
	RuntimeStart, RuntimeFirst Series
	ColdCreate, ColdFirst      Series
	WarmCreate, WarmFirst      Series
	// ColdStartsPoolOff and ColdStartsPoolOn are the cold starts the two
	// services counted during the cold series (Colds and 0).
	ColdStartsPoolOff, ColdStartsPoolOn int64
}

// Targets of issue 15.
const (
	SandboxWarmTarget = 10 * time.Millisecond
	SandboxColdTarget = time.Second
)

// sandboxPool is the pool of the warm stack; its class is the default
// create's (memory_limit 1g, network disabled).
const sandboxPool = "1g=2"

// Print writes the report.
func (r SandboxReport) Print(w io.Writer) {
	fmt.Fprintf(w, "agent code sandboxes: %s, --platform=%s, %d CPUs, sandboxes of 1 GiB and 1 CPU, network none\n", r.Runsc, r.Platform, r.CPUs)
	fmt.Fprintf(w, "\nwarm exec, concurrency 1, %d execs per series, interleaved\n", r.Execs)
	fmt.Fprintf(w, "%-44s %10s %10s %14s\n", "", "p50", "p99", "aiforge/direct")
	for _, e := range []SandboxExec{r.Python, r.Bash} {
		fmt.Fprintf(w, "%-44s %10s %10s %14s\n", e.Language+" "+e.Code+", runtime directly", us(e.Direct.P50), us(e.Direct.P99), "")
		fmt.Fprintf(w, "%-44s %10s %10s %14s\n", e.Language+" "+e.Code+", through aiforge", us(e.Aiforge.P50), us(e.Aiforge.P99),
			fmt.Sprintf("%s (+%s)", ratio(e.Aiforge.P50, e.Direct.P50), us(e.Aiforge.P50-e.Direct.P50)))
	}
	fmt.Fprintf(w, "\ncold start, %d rounds, one of each per round, each measured on a settled machine\n", r.Colds)
	fmt.Fprintf(w, "%-44s %10s %10s %14s\n", "", "p50", "p99", "p50/baseline")
	row := func(name string, s Series, base *Series) {
		rt := "baseline"
		if base != nil {
			rt = fineRatio(s.P50, base.P50)
		}
		fmt.Fprintf(w, "%-44s %10s %10s %14s\n", name, us(s.P50), us(s.P99), rt)
	}
	row("runsc do /bin/true (bare gVisor)", r.RunscDo, &r.RuntimeStart)
	row("runtime Start, directly", r.RuntimeStart, nil)
	row("pool off: create, through aiforge", r.ColdCreate, &r.RuntimeStart)
	row("pool "+sandboxPool+": create, through aiforge", r.WarmCreate, &r.RuntimeStart)
	row("runtime Start + first exec, directly", r.RuntimeFirst, nil)
	row("pool off: create + first exec, aiforge", r.ColdFirst, &r.RuntimeFirst)
	row("pool "+sandboxPool+": create + first exec, aiforge", r.WarmFirst, &r.RuntimeFirst)
	fmt.Fprintf(w, "cold starts counted by the services: pool off %d of %d creates, pool %s %d of %d\n",
		r.ColdStartsPoolOff, r.Colds, sandboxPool, r.ColdStartsPoolOn, r.Colds)
	warm := max(r.Python.Aiforge.P50, r.Bash.Aiforge.P50)
	fmt.Fprintf(w, "\ntarget warm exec p50 < %s: %s (slowest through aiforge %s)\n", SandboxWarmTarget, verdict(warm < SandboxWarmTarget), us(warm))
	fmt.Fprintf(w, "target cold < %s (pool off, create + first exec): p50 %s, p99 %s (p50 %s, p99 %s)\n", SandboxColdTarget,
		verdict(r.ColdFirst.P50 < SandboxColdTarget), verdict(r.ColdFirst.P99 < SandboxColdTarget), us(r.ColdFirst.P50), us(r.ColdFirst.P99))
}

// fineRatio is ratio with three decimals under 0.1 (a warm create is a
// few thousandths of a cold start).
func fineRatio(a, b time.Duration) string {
	if b > 0 && float64(a)/float64(b) < 0.1 {
		return fmt.Sprintf("%.3fx", float64(a)/float64(b))
	}
	return ratio(a, b)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// ErrSandboxBenchUnavailable is returned when runsc cannot run here.
var ErrSandboxBenchUnavailable = errors.New("bench --sandbox needs runsc (gVisor) and root")

// SandboxBenchAvailable says why the sandbox bench cannot run here, or nil.
func SandboxBenchAvailable(runsc string) error {
	if runsc == "" {
		runsc = "runsc"
	}
	if _, err := exec.LookPath(runsc); err != nil {
		return fmt.Errorf("%w: %s is not installed (apt-get install runsc): %v", ErrSandboxBenchUnavailable, runsc, err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: runsc runs its sandboxes as root on this machine; run the bench as root", ErrSandboxBenchUnavailable)
	}
	return nil
}

// RunSandbox measures agent code execs and container starts through
// aiforge and, in the same run, on the sandbox runtime directly. Two
// in-process stacks (sandbox, usage and edge targets, real HTTP on
// loopback) run side by side: one with the warm pool 1g=2, one with the
// pool off. Cold series are measured one at a time on a settled machine:
// before each, the warm pool is refilled and every ended sandbox is gone
// (checked on the services' metrics), so a refill never runs during a
// measurement.
func RunSandbox(ctx context.Context, o SandboxOptions) (SandboxReport, error) {
	if o.Execs <= 0 {
		o.Execs = 300
	}
	if o.Colds <= 0 {
		o.Colds = 20
	}
	if o.Runsc == "" {
		o.Runsc = "runsc"
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	rep := SandboxReport{Execs: o.Execs, Colds: o.Colds, CPUs: runtime.NumCPU(), Platform: sandboxsvc.DefaultPlatform}
	if err := SandboxBenchAvailable(o.Runsc); err != nil {
		return rep, err
	}
	dir, err := os.MkdirTemp("", "aiforge-bench-sandbox-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)

	fmt.Fprintln(o.Progress, "starting two aiforge stacks (warm pool "+sandboxPool+", pool off) and a sandbox runtime ...")
	pooled, err := startSandboxStack(ctx, filepath.Join(dir, "pooled"), o.Runsc, sandboxPool)
	if err != nil {
		return rep, fmt.Errorf("stack with the warm pool: %w", err)
	}
	defer pooled.close()
	unpooled, err := startSandboxStack(ctx, filepath.Join(dir, "unpooled"), o.Runsc, "none")
	if err != nil {
		return rep, fmt.Errorf("stack without a pool: %w", err)
	}
	defer unpooled.close()
	rt, err := sbxrt.New(sbxrt.Config{Runsc: o.Runsc, Platform: sandboxsvc.DefaultPlatform, StateDir: filepath.Join(dir, "runtime"),
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return rep, fmt.Errorf("sandbox runtime: %w", err)
	}
	defer rt.Close()
	rep.Runsc = runscVersion(ctx, o.Runsc)

	settle := func() error {
		if err := pooled.waitPool(ctx, 2, 2); err != nil {
			return err
		}
		return unpooled.waitPool(ctx, 0, 0)
	}
	if err := settle(); err != nil {
		return rep, err
	}

	// Warm execs: one container from the pool, one sandbox of the same
	// class on the runtime.
	direct, err := rt.Start(ctx, sbxrt.Spec{MemoryBytes: 1 << 30})
	if err != nil {
		return rep, fmt.Errorf("runtime start: %w", err)
	}
	defer direct.Close()
	ct, err := pooled.create(ctx)
	if err != nil {
		return rep, err
	}
	defer pooled.remove(context.WithoutCancel(ctx), ct)
	series := []*SandboxExec{
		{Language: api.LanguagePython, Code: "print(1+1)"},
		{Language: api.LanguageBash, Code: "echo 2"},
	}
	directExec := func(e *SandboxExec) (time.Duration, error) {
		t0 := time.Now()
		res, err := direct.Exec(ctx, api.ExecRequest{Language: e.Language, Code: e.Code, TimeoutMS: 10_000}, nil)
		d := time.Since(t0)
		if err != nil {
			return 0, fmt.Errorf("direct %s exec: %w", e.Language, err)
		}
		return d, checkTwo(e.Language, res.ExecResult)
	}
	edgeExec := func(e *SandboxExec) (time.Duration, error) {
		t0 := time.Now()
		res, err := pooled.exec(ctx, ct, e.Language, e.Code)
		d := time.Since(t0)
		if err != nil {
			return 0, err
		}
		return d, checkTwo(e.Language, res)
	}
	fmt.Fprintln(o.Progress, "warming the exec paths ...")
	for range 20 {
		for _, e := range series {
			if _, err := directExec(e); err != nil {
				return rep, err
			}
			if _, err := edgeExec(e); err != nil {
				return rep, err
			}
		}
	}
	fmt.Fprintf(o.Progress, "warm exec: %d python and %d bash execs each way, interleaved ...\n", o.Execs, o.Execs)
	samples := make([][2][]time.Duration, len(series))
	for range o.Execs {
		for k, e := range series {
			d, err := directExec(e)
			if err != nil {
				return rep, err
			}
			a, err := edgeExec(e)
			if err != nil {
				return rep, err
			}
			samples[k][0] = append(samples[k][0], d)
			samples[k][1] = append(samples[k][1], a)
		}
	}
	for k, e := range series {
		e.Direct, e.Aiforge = stats(samples[k][0]), stats(samples[k][1])
	}
	rep.Python, rep.Bash = *series[0], *series[1]
	pooled.remove(ctx, ct)
	_ = direct.Close()

	coldBefore, err := unpooled.coldStarts()
	if err != nil {
		return rep, err
	}
	warmBefore, err := pooled.coldStarts()
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(o.Progress, "cold start: %d rounds of runsc do, runtime start, create with the pool off and create from the pool ...\n", o.Colds)
	var runscDo, rtAlone, rtFirst, coldCreate, coldFirst, warmCreate, warmFirst []time.Duration
	doRoot := filepath.Join(dir, "runsc-do")
	for i := range o.Colds {
		fmt.Fprintf(o.Progress, "  round %d/%d\n", i+1, o.Colds)
		if err := settle(); err != nil {
			return rep, err
		}
		d, err := runscDoTrue(ctx, o.Runsc, doRoot)
		if err != nil {
			return rep, err
		}
		runscDo = append(runscDo, d)

		if err := settle(); err != nil {
			return rep, err
		}
		t0 := time.Now()
		sb, err := rt.Start(ctx, sbxrt.Spec{MemoryBytes: 1 << 30})
		if err != nil {
			return rep, fmt.Errorf("runtime start: %w", err)
		}
		started := time.Since(t0)
		res, err := sb.Exec(ctx, api.ExecRequest{Language: api.LanguagePython, Code: "print(1+1)", TimeoutMS: 10_000}, nil)
		first := time.Since(t0)
		_ = sb.Close()
		if err != nil {
			return rep, fmt.Errorf("runtime first exec: %w", err)
		}
		if err := checkTwo(api.LanguagePython, res.ExecResult); err != nil {
			return rep, err
		}
		rtAlone, rtFirst = append(rtAlone, started), append(rtFirst, first)

		for _, s := range []struct {
			st            *sandboxStack
			create, first *[]time.Duration
		}{{unpooled, &coldCreate, &coldFirst}, {pooled, &warmCreate, &warmFirst}} {
			if err := settle(); err != nil {
				return rep, err
			}
			c, f, err := s.st.createAndRun(ctx)
			if err != nil {
				return rep, err
			}
			*s.create, *s.first = append(*s.create, c), append(*s.first, f)
		}
	}
	coldAfter, err := unpooled.coldStarts()
	if err != nil {
		return rep, err
	}
	warmAfter, err := pooled.coldStarts()
	if err != nil {
		return rep, err
	}
	rep.ColdStartsPoolOff, rep.ColdStartsPoolOn = int64(coldAfter-coldBefore), int64(warmAfter-warmBefore)
	if rep.ColdStartsPoolOff != int64(o.Colds) {
		return rep, fmt.Errorf("the pool-off stack counted %d cold starts for %d creates", rep.ColdStartsPoolOff, o.Colds)
	}
	if rep.ColdStartsPoolOn != 0 {
		return rep, fmt.Errorf("the pooled stack cold-started %d of %d creates: the pool was not refilled", rep.ColdStartsPoolOn, o.Colds)
	}
	rep.RunscDo, rep.RuntimeStart, rep.RuntimeFirst = stats(runscDo), stats(rtAlone), stats(rtFirst)
	rep.ColdCreate, rep.ColdFirst = stats(coldCreate), stats(coldFirst)
	rep.WarmCreate, rep.WarmFirst = stats(warmCreate), stats(warmFirst)
	return rep, nil
}

// checkTwo checks that an exec printed 2 and succeeded.
func checkTwo(lang string, r api.ExecResult) error {
	if r.Error != nil || r.ExitCode != 0 || r.Stdout != "2\n" {
		return fmt.Errorf("%s exec: want stdout \"2\\n\" and exit 0, got %+v", lang, r)
	}
	return nil
}

func runscVersion(ctx context.Context, runsc string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, runsc, "--version").Output()
	if err != nil {
		return runsc
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}

// runscDoTrue times `runsc --network=none --platform=ptrace do /bin/true`:
// gVisor's cold start with nothing of aiforge's (no bundle, no cgroup
// limits, no resident interpreter).
func runscDoTrue(ctx context.Context, runsc, root string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, runsc, "--root="+root, "--network=none", "--platform="+sandboxsvc.DefaultPlatform, "do", "/bin/true")
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(t0)
	if err != nil {
		if len(out) > 2048 {
			out = out[:2048]
		}
		return 0, fmt.Errorf("runsc do /bin/true: %v: %s", err, out)
	}
	return d, nil
}

// sandboxStack is an in-process aiforge with the sandbox service behind
// the edge, a tenant and its key.
type sandboxStack struct {
	base, key string
	hc        *http.Client
	reg       prometheus.Gatherer
	close     func()
}

func startSandboxStack(ctx context.Context, dir, runsc, pool string) (*sandboxStack, error) {
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	const admin = "bench-admin-key-0123456789"
	a, err := app.New(app.Options{
		Targets: []string{"sandbox", "usage", "edge"}, DataDir: dir, EdgeListener: ln, AdminKey: admin,
		Sandbox: sandboxsvc.Config{Runsc: runsc, Pool: pool},
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	closers = append(closers, func() { stop(); <-done })
	fail := func(err error) (*sandboxStack, error) { cleanup(); return nil, err }
	base := "http://" + ln.Addr().String()
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
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 16, MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}}
	closers = append(closers, hc.CloseIdleConnections)
	return &sandboxStack{base: base, key: key.Key, hc: hc, reg: a.Registry, close: cleanup}, nil
}

// call sends one tenant call and decodes a 200 answer into out.
func (s *sandboxStack) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := s.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		if len(b) > 512 {
			b = b[:512]
		}
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

func (s *sandboxStack) create(ctx context.Context) (string, error) {
	var c api.Container
	if err := s.call(ctx, "POST", "/v1/containers", map[string]any{"name": "bench"}, &c); err != nil {
		return "", err
	}
	if c.ID == "" {
		return "", errors.New("create container: an answer without an id")
	}
	return c.ID, nil
}

func (s *sandboxStack) exec(ctx context.Context, id, lang, code string) (api.ExecResult, error) {
	var r api.ExecResult
	err := s.call(ctx, "POST", "/v1/containers/"+id+"/exec", api.ExecRequest{Language: lang, Code: code, TimeoutMS: 10_000}, &r)
	return r, err
}

func (s *sandboxStack) remove(ctx context.Context, id string) {
	_ = s.call(ctx, "DELETE", "/v1/containers/"+id, nil, nil)
}

// createAndRun times a create and the create plus a first python exec,
// then deletes the container (untimed).
func (s *sandboxStack) createAndRun(ctx context.Context) (create, first time.Duration, err error) {
	t0 := time.Now()
	id, err := s.create(ctx)
	if err != nil {
		return 0, 0, err
	}
	create = time.Since(t0)
	defer s.remove(ctx, id)
	r, err := s.exec(ctx, id, api.LanguagePython, "print(1+1)")
	first = time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	return create, first, checkTwo(api.LanguagePython, r)
}

// metric reads a gauge or counter of the stack's registry.
func (s *sandboxStack) metric(name string) (float64, error) {
	mfs, err := s.reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue(), nil
		}
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), nil
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

func (s *sandboxStack) coldStarts() (float64, error) {
	return s.metric("aiforge_sandbox_cold_starts_total")
}

// waitPool polls the service's metrics until it has exactly warm warm
// sandboxes and live live ones: the pool refilled and every ended sandbox
// gone.
func (s *sandboxStack) waitPool(ctx context.Context, warm, live float64) error {
	deadline := time.Now().Add(time.Minute)
	for {
		w, err := s.metric("aiforge_sandbox_sandboxes_warm")
		if err != nil {
			return err
		}
		l, err := s.metric("aiforge_sandbox_sandboxes_live")
		if err != nil {
			return err
		}
		if w == warm && l == live {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sandbox service did not settle at %v warm and %v live sandboxes within a minute (%v warm, %v live)", warm, live, w, l)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
