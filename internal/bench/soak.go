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
	"time"

	"github.com/spf13/pflag"
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
	// StreamEvery makes every n-th request streamed (0: none).
	StreamEvery int
	Tokens      int
	// HeapProfileDir, when set, receives heap-start.pprof (after warm-up)
	// and heap-end.pprof (after the idle period), each after a GC:
	//	go tool pprof -base heap-start.pprof heap-end.pprof
	HeapProfileDir string
	// CPUProfile, when set, is written over the loaded part of the soak.
	CPUProfile string
	Progress   io.Writer
}

// AddFlags registers the soak's flags (`aiforge bench --soak 2m ...`).
func (o *SoakOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Duration, "soak", 0, "instead of the comparison, drive steady load through aiforge for this long and report memory over time")
	fs.DurationVar(&o.Every, "soak-every", 10*time.Second, "soak: interval between memory samples")
	fs.DurationVar(&o.Idle, "soak-idle", 30*time.Second, "soak: idle period after the load before the last sample")
	fs.IntVar(&o.Concurrency, "soak-concurrency", 8, "soak: concurrent clients")
	fs.IntVar(&o.StreamEvery, "soak-stream-every", 4, "soak: every n-th request is streamed (0: none)")
	fs.StringVar(&o.HeapProfileDir, "heap-profile", "", "soak: write heap-start.pprof and heap-end.pprof into this directory")
	fs.StringVar(&o.CPUProfile, "cpu-profile", "", "soak: write a CPU profile of the loaded period to this file")
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
}

// SoakReport is every sample of a soak, the last one after the idle period.
type SoakReport struct {
	Samples []Sample
}

func soakHeader(w io.Writer) {
	fmt.Fprintf(w, "%-10s %9s %7s %8s %9s %9s %9s %9s %10s %6s %5s\n",
		"elapsed", "requests", "rps", "rss", "heap-live", "heap-use", "heap-idle", "released", "heap-objs", "gorout", "gcs")
}

func (s Sample) print(w io.Writer, label string, rps float64) {
	mb := func(b uint64) string { return fmt.Sprintf("%.1fMB", float64(b)/(1<<20)) }
	el := s.Elapsed.Truncate(time.Second).String()
	if label != "" {
		el = label
	}
	fmt.Fprintf(w, "%-10s %9d %7.0f %8s %9s %9s %9s %9s %10d %6d %5d\n",
		el, s.Requests, rps, mb(s.RSS), mb(s.HeapLive), mb(s.HeapInuse), mb(s.HeapIdle), mb(s.Released), s.HeapObjs, s.Goroutines, s.GCs)
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
	}
	if live[0].Value.Kind() == metrics.KindUint64 {
		s.HeapLive = live[0].Value.Uint64()
	}
	return s
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
	env, err := Setup(ctx, o.Progress)
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
	fmt.Fprintf(o.Progress, "soak: %s at concurrency %d (every %d-th streamed), then %s idle ...\n", o.Duration, o.Concurrency, o.StreamEvery, o.Idle)

	var served atomic.Int64
	var firstErr atomic.Value
	loadCtx, stopLoad := context.WithTimeout(ctx, o.Duration)
	defer stopLoad()
	var wg sync.WaitGroup
	for i := 0; i < o.Concurrency; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := i; loadCtx.Err() == nil; n++ {
				stream := o.StreamEvery > 0 && n%o.StreamEvery == 0
				if _, err := gw.Call(stream, o.Tokens); err != nil {
					firstErr.CompareAndSwap(nil, err)
					stopLoad()
					return
				}
				served.Add(1)
			}
		}(i)
	}

	start := time.Now()
	soakHeader(w)
	first := sample(start, 0)
	first.print(w, "", 0)
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
			s.print(w, "", float64(s.Requests-prev.Requests)/(s.Elapsed-prev.Elapsed).Seconds())
			rep.Samples = append(rep.Samples, s)
			prev = s
		}
	}
	tick.Stop()
	wg.Wait()
	if o.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	if e, ok := firstErr.Load().(error); ok {
		return rep, e
	}
	s := sample(start, served.Load())
	s.print(w, "load end", float64(s.Requests)/s.Elapsed.Seconds())
	rep.Samples = append(rep.Samples, s)
	if o.Idle > 0 {
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(o.Idle):
		}
		s = sample(start, served.Load())
		s.print(w, "idle "+o.Idle.String(), 0)
		rep.Samples = append(rep.Samples, s)
	}
	if o.HeapProfileDir != "" {
		if err := writeHeap(o.HeapProfileDir, "heap-end.pprof"); err != nil {
			return rep, err
		}
		s = sample(start, served.Load())
		s.print(w, "after GC", 0)
		rep.Samples = append(rep.Samples, s)
		fmt.Fprintf(o.Progress, "heap profiles in %s: go tool pprof -base %s %s\n", o.HeapProfileDir,
			filepath.Join(o.HeapProfileDir, "heap-start.pprof"), filepath.Join(o.HeapProfileDir, "heap-end.pprof"))
	}
	return rep, nil
}
