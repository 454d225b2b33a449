package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/enginesim"
)

// SoakOptions size a soak: steady load through aiforge for Duration, a
// sample of the process's memory every Every, then Idle without load and a
// last sample. aiforge, the simulator and the load generator share this
// process, so RSS and the Go heap are all three together (the embedded
// nats-server included); the heap profiles tell them apart.
type SoakOptions struct {
	Duration    time.Duration
	Every       time.Duration
	Idle        time.Duration
	Concurrency int
	// DirectFirst, when set, runs the same load straight to the simulator
	// for this long before the soak and prints its CPU per request.
	DirectFirst time.Duration
	// StreamEvery makes every n-th request streamed (0: none).
	StreamEvery int
	Tokens      int
	// HeapProfileDir, when set, receives heap-start.pprof (after warm-up)
	// and heap-end.pprof (after the idle period), each after a GC:
	//	go tool pprof -base heap-start.pprof heap-end.pprof
	HeapProfileDir string
	// CPUProfile, when set, is written over the loaded part of the soak.
	CPUProfile string
	// DedupHorizon, when set, is the usage ledger's (usage.Config): a
	// short one shows within a short soak that the ids it remembers stop
	// growing once the horizon is full.
	DedupHorizon time.Duration
	Progress     io.Writer
}

// AddFlags registers the soak's flags (`aiforge bench --soak 2m ...`).
func (o *SoakOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Duration, "soak", 0, "instead of the comparison, drive steady load through aiforge for this long and report memory over time")
	fs.DurationVar(&o.Every, "soak-every", 10*time.Second, "soak: interval between memory samples")
	fs.DurationVar(&o.Idle, "soak-idle", 30*time.Second, "soak: idle period after the load before the last sample")
	fs.IntVar(&o.Concurrency, "soak-concurrency", 8, "soak: concurrent clients")
	fs.DurationVar(&o.DirectFirst, "soak-direct", 5*time.Second, "soak: first drive the simulator directly for this long, for its CPU per request (0: skip)")
	fs.IntVar(&o.StreamEvery, "soak-stream-every", 4, "soak: every n-th request is streamed (0: none)")
	fs.StringVar(&o.HeapProfileDir, "heap-profile", "", "soak: write heap-start.pprof and heap-end.pprof into this directory")
	fs.StringVar(&o.CPUProfile, "cpu-profile", "", "soak: write a CPU profile of the loaded period to this file")
	fs.DurationVar(&o.DedupHorizon, "soak-dedup-horizon", 0, "soak: the usage ledger's dedup horizon (0: the default, an hour); a shorter one shows the ledger's memory levelling off within a short soak")
}

// Sample is the process's memory at one moment.
type Sample struct {
	Elapsed    time.Duration
	Requests   int64
	RSS        uint64 // VmRSS
	HeapLive   uint64 // live heap marked by the last GC
	HeapInuse  uint64 // heap spans in use (live and not yet swept)
	HeapIdle   uint64 // heap spans held but unused, not released
	Released   uint64 // heap returned to the OS
	HeapObjs   uint64
	Goroutines int
	GCs        uint32
	CPU        time.Duration // user and system CPU time of the process so far
}

// SoakReport is every sample of a soak, the last one after the idle period.
type SoakReport struct {
	Samples []Sample
}

func soakHeader(w io.Writer) {
	fmt.Fprintf(w, "%-10s %9s %7s %8s %8s %9s %9s %9s %9s %10s %6s %5s\n",
		"elapsed", "requests", "rps", "cpu/req", "rss", "heap-live", "heap-use", "heap-idle", "released", "heap-objs", "gorout", "gcs")
}

// print writes s; rps and cpu/req are over the period since prev.
func (s Sample) print(w io.Writer, label string, prev Sample) {
	rps, cpu := 0.0, "-"
	if n := s.Requests - prev.Requests; n > 0 {
		rps = float64(n) / (s.Elapsed - prev.Elapsed).Seconds()
		cpu = fmt.Sprintf("%dus", ((s.CPU - prev.CPU) / time.Duration(n)).Microseconds())
	}
	mb := func(b uint64) string { return fmt.Sprintf("%.1fMB", float64(b)/(1<<20)) }
	el := s.Elapsed.Truncate(time.Second).String()
	if label != "" {
		el = label
	}
	fmt.Fprintf(w, "%-10s %9d %7.0f %8s %8s %9s %9s %9s %9s %10d %6d %5d\n",
		el, s.Requests, rps, cpu, mb(s.RSS), mb(s.HeapLive), mb(s.HeapInuse), mb(s.HeapIdle), mb(s.Released), s.HeapObjs, s.Goroutines, s.GCs)
}

func sample(start time.Time, requests int64) Sample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	s := Sample{
		Elapsed:    time.Since(start),
		Requests:   requests,
		RSS:        vmRSS(),
		HeapInuse:  ms.HeapInuse,
		HeapIdle:   ms.HeapIdle - ms.HeapReleased,
		Released:   ms.HeapReleased,
		HeapObjs:   ms.HeapObjects,
		Goroutines: runtime.NumGoroutine(),
		GCs:        ms.NumGC,
		CPU:        cpuTime(),
	}
	if live[0].Value.Kind() == metrics.KindUint64 {
		s.HeapLive = live[0].Value.Uint64()
	}
	return s
}

// cpuTime is the user and system CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// load drives o.Concurrency clients against t for d (or until ctx ends),
// counting answers in served; the first error stops it.
func load(ctx context.Context, t target, o SoakOptions, d time.Duration, served *atomic.Int64) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := 0; i < o.Concurrency; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := i; ctx.Err() == nil; n++ {
				stream := o.StreamEvery > 0 && n%o.StreamEvery == 0
				if _, err := t.Call(stream, o.Tokens); err != nil {
					firstErr.CompareAndSwap(nil, err)
					cancel()
					return
				}
				served.Add(1)
			}
		}(i)
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return e
	}
	return nil
}

// vmRSS is this process's resident set in bytes (0 where /proc is absent).
func vmRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func writeHeap(dir, name string) error {
	runtime.GC()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Soak starts the bench environment, drives steady load through aiforge
// and prints a memory sample every o.Every to w.
func Soak(ctx context.Context, o SoakOptions, w io.Writer) (SoakReport, error) {
	var rep SoakReport
	if o.Every <= 0 {
		o.Every = 10 * time.Second
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.Tokens <= 0 {
		o.Tokens = 16
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.HeapProfileDir != "" {
		if err := os.MkdirAll(o.HeapProfileDir, 0o755); err != nil {
			return rep, err
		}
	}
	env, err := SetupEngine(ctx, o.Progress, enginesim.Config{}, func(a *app.Options) { a.Usage.DedupHorizon = o.DedupHorizon })
	if err != nil {
		return rep, err
	}
	defer env.Close()
	gw := env.Gateway
	for i := 0; i < 200; i++ {
		if _, err := gw.Call(i%2 == 0, o.Tokens); err != nil {
			return rep, err
		}
	}
	if o.HeapProfileDir != "" {
		if err := writeHeap(o.HeapProfileDir, "heap-start.pprof"); err != nil {
			return rep, err
		}
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return rep, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return rep, err
		}
		defer f.Close()
	}
	// The same load straight to the simulator first: the CPU a request
	// costs the load generator and the simulator, to subtract from the
	// soak's cpu/req (they share this process with aiforge).
	if o.DirectFirst > 0 {
		var n atomic.Int64
		t0, c0 := time.Now(), cpuTime()
		if err := load(ctx, env.Direct, o, o.DirectFirst, &n); err != nil {
			return rep, err
		}
		fmt.Fprintf(w, "direct to the simulator for %s: %.0f rps, %dus cpu/req\n", o.DirectFirst,
			float64(n.Load())/time.Since(t0).Seconds(), ((cpuTime() - c0) / time.Duration(max(n.Load(), 1))).Microseconds())
	}
	fmt.Fprintf(o.Progress, "soak: %s at concurrency %d (every %d-th streamed), then %s idle ...\n", o.Duration, o.Concurrency, o.StreamEvery, o.Idle)

	var served atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadErr := make(chan error, 1)
	go func() { loadErr <- load(loadCtx, gw, o, o.Duration, &served); stopLoad() }()

	start := time.Now()
	soakHeader(w)
	first := sample(start, 0)
	first.print(w, "", first)
	rep.Samples = append(rep.Samples, first)
	tick := time.NewTicker(o.Every)
	prev := first
loaded:
	for {
		select {
		case <-loadCtx.Done():
			break loaded
		case <-tick.C:
			s := sample(start, served.Load())
			s.print(w, "", prev)
			rep.Samples = append(rep.Samples, s)
			prev = s
		}
	}
	tick.Stop()
	err = <-loadErr
	if o.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return rep, err
	}
	s := sample(start, served.Load())
	s.print(w, "load end", first)
	rep.Samples = append(rep.Samples, s)
	if o.Idle > 0 {
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(o.Idle):
		}
		s = sample(start, served.Load())
		s.print(w, "idle "+o.Idle.String(), s)
		rep.Samples = append(rep.Samples, s)
	}
	if o.HeapProfileDir != "" {
		if err := writeHeap(o.HeapProfileDir, "heap-end.pprof"); err != nil {
			return rep, err
		}
		s = sample(start, served.Load())
		s.print(w, "after GC", s)
		rep.Samples = append(rep.Samples, s)
		fmt.Fprintf(o.Progress, "heap profiles in %s: go tool pprof -base %s %s\n", o.HeapProfileDir,
			filepath.Join(o.HeapProfileDir, "heap-start.pprof"), filepath.Join(o.HeapProfileDir, "heap-end.pprof"))
	}
	return rep, nil
}
