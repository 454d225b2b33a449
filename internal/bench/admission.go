package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/aiforge/aiforge/pkg/guard"
	"github.com/aiforge/aiforge/pkg/registry"
)

// AdmissionOptions size an admission run.
type AdmissionOptions struct {
	// Iterations of the admission step per prompt size and kind.
	Iterations int
	// Requests per series of the edge overhead run (direct, admission off,
	// admission on, interleaved).
	Requests int
	// PromptBytes is the prompt size of the edge overhead run.
	PromptBytes int
	Tokens      int
	Progress    io.Writer
}

// StepSeries is the admission step's latency at one prompt size.
type StepSeries struct {
	Bytes             int
	Benign, Malicious Series
}

// AdmissionReport holds the figures of an admission run.
type AdmissionReport struct {
	Steps                 []StepSeries
	PromptBytes           int
	Direct, Off, On       Series
	BlockedMaliciousFound bool
}

// AdmissionSizes are the prompt sizes the admission step is measured at.
var AdmissionSizes = []int{1 << 10, 4 << 10, 16 << 10}

// admissionStep is what the edge does per request before any hold: the
// classifier over the request's segments, and the policy.
func admissionStep(ctx context.Context, c guard.Classifier, segs []guard.Segment, t *registry.Tenant, k *registry.Key) (time.Duration, bool, error) {
	start := time.Now()
	p := registry.EffectiveAdmission(t, k)
	v, err := c.Classify(ctx, segs)
	if err != nil {
		return 0, false, err
	}
	malicious := v.Malicious
	if p.Threshold > 0 {
		malicious = v.Score >= p.Threshold
	}
	return time.Since(start), malicious && p.Mode == registry.AdmissionBlock, nil
}

// RunAdmission measures the admission step alone at AdmissionSizes, then
// the edge's overhead with admission off and on (two keys of one tenant,
// one of them overriding the policy to off), interleaved with direct calls
// of the engine in the same run.
func RunAdmission(ctx context.Context, o AdmissionOptions) (AdmissionReport, error) {
	if o.Iterations == 0 {
		o.Iterations = 2000
	}
	if o.Requests == 0 {
		o.Requests = 1000
	}
	if o.PromptBytes == 0 {
		o.PromptBytes = 4 << 10
	}
	if o.Tokens == 0 {
		o.Tokens = 16
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	rep := AdmissionReport{PromptBytes: o.PromptBytes, BlockedMaliciousFound: true}
	cls := guard.NewBuiltin(guard.BuiltinConfig{})
	tenant := &registry.Tenant{ID: "bench", Admission: &registry.AdmissionPolicy{Mode: registry.AdmissionBlock}}
	key := &registry.Key{ID: "key_bench", Tenant: "bench"}
	for _, size := range AdmissionSizes {
		fmt.Fprintf(o.Progress, "admission step: %d x %d bytes, benign and malicious ...\n", o.Iterations, size)
		st := StepSeries{Bytes: size}
		for _, malicious := range []bool{false, true} {
			segs := []guard.Segment{
				{Role: "system", Source: guard.SourceMessage, Text: "You are a helpful assistant."},
				{Role: "user", Source: guard.SourceMessage, Text: guard.SamplePrompt(size, malicious)},
			}
			ds := make([]time.Duration, 0, o.Iterations)
			for i := 0; i < o.Iterations+o.Iterations/10; i++ {
				d, blocked, err := admissionStep(ctx, cls, segs, tenant, key)
				if err != nil {
					return rep, err
				}
				if malicious && !blocked {
					rep.BlockedMaliciousFound = false
				}
				if i >= o.Iterations/10 { // the first tenth warms up
					ds = append(ds, d)
				}
			}
			if malicious {
				st.Malicious = stats(ds)
			} else {
				st.Benign = stats(ds)
			}
		}
		rep.Steps = append(rep.Steps, st)
	}

	env, err := Setup(ctx, o.Progress)
	if err != nil {
		return rep, err
	}
	defer env.Close()
	// The bench tenant is new, so it blocks; a second key turns it off.
	var offKey struct {
		Key string `json:"key"`
	}
	if err := env.Admin.Do(ctx, "POST", "/admin/v1/keys", map[string]any{"tenant": "bench", "admission": map[string]any{"mode": "off"}}, &offKey); err != nil {
		return rep, err
	}
	prompt := guard.SamplePrompt(o.PromptBytes, false)
	direct, on, off := env.Direct, env.Gateway, env.Gateway
	direct.prompt, on.prompt, off.prompt = prompt, prompt, prompt
	off.key = offKey.Key
	for i := 0; i < 200; i++ {
		for _, t := range []target{direct, off, on} {
			if _, err := t.Call(false, o.Tokens); err != nil {
				return rep, err
			}
		}
	}
	fmt.Fprintf(o.Progress, "edge overhead: %d plain requests of %d bytes each way (direct, admission off, admission on), interleaved ...\n", o.Requests, o.PromptBytes)
	dd := make([]time.Duration, 0, o.Requests)
	doff := make([]time.Duration, 0, o.Requests)
	don := make([]time.Duration, 0, o.Requests)
	for i := 0; i < o.Requests; i++ {
		for _, c := range []struct {
			t   target
			out *[]time.Duration
		}{{direct, &dd}, {off, &doff}, {on, &don}} {
			d, err := c.t.Call(false, o.Tokens)
			if err != nil {
				return rep, err
			}
			*c.out = append(*c.out, d)
		}
	}
	rep.Direct, rep.Off, rep.On = stats(dd), stats(doff), stats(don)
	return rep, nil
}

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}

// Print writes the report as tables.
func (r AdmissionReport) Print(w io.Writer) {
	fmt.Fprintf(w, "%-30s %10s %10s %10s %10s\n", "admission step (classifier+policy)", "benign p50", "p99", "malic. p50", "p99")
	for _, s := range r.Steps {
		fmt.Fprintf(w, "%-34s %10s %10s %10s %10s\n", fmt.Sprintf("%d KB prompt", s.Bytes>>10), us(s.Benign.P50), us(s.Benign.P99), us(s.Malicious.P50), us(s.Malicious.P99))
	}
	if !r.BlockedMaliciousFound {
		fmt.Fprintln(w, "warning: the built-in classifier let a sample injection through")
	}
	fmt.Fprintf(w, "\nedge overhead, %d-byte prompt %10s %10s %10s %10s %10s\n", r.PromptBytes, "direct", "adm. off", "adm. on", "on/off", "added")
	row := func(name string, d, off, on time.Duration) {
		fmt.Fprintf(w, "%-30s %10s %10s %10s %10s %10s\n", name, us(d), us(off), us(on), ratio(on, off), us(on-off))
	}
	row("plain chat p50", r.Direct.P50, r.Off.P50, r.On.P50)
	row("plain chat p99", r.Direct.P99, r.Off.P99, r.On.P99)
	fmt.Fprintf(w, "%-30s %10s %10s %10s\n", "overhead over direct, p50", "", us(r.Off.P50-r.Direct.P50), us(r.On.P50-r.Direct.P50))
	fmt.Fprintf(w, "%-30s %10s %10s %10s\n", "overhead ratio on/off, p50", "", "", ratio(r.On.P50-r.Direct.P50, r.Off.P50-r.Direct.P50))
}
