package engineproc

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one metric an engine offers, re-exported by the worker.
type Sample struct {
	// Name is the engine's name, sanitised to [a-zA-Z0-9_] (llama-server's
	// "llamacpp:prompt_tokens_total" is "llamacpp_prompt_tokens_total").
	Name    string
	Counter bool
	Value   float64
}

// Bounds on what is kept of an engine's metrics.
const (
	maxSamples     = 128
	maxMetricsBody = 4 << 20
)

// Samples returns the engine's metrics as last scraped (nil before the
// first scrape or when it offers none).
func (s *Supervisor) Samples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

func (s *Supervisor) setSamples(v []Sample) {
	s.mu.Lock()
	s.samples = v
	s.mu.Unlock()
}

// scrape reads the engine's Prometheus metrics, when it has an endpoint.
func (s *Supervisor) scrape(ctx context.Context, c Command) {
	if c.Metrics == "" {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Metrics, nil)
	if err != nil {
		return
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := s.http.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return
	}
	if v, err := promSamples(io.LimitReader(resp.Body, maxMetricsBody)); err == nil {
		s.setSamples(v)
	}
}

// promSamples keeps the unlabelled counters and gauges of a Prometheus
// text exposition (llama-server's are all unlabelled).
func promSamples(r io.Reader) ([]Sample, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var out []Sample
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) > 0 {
				continue
			}
			sm := Sample{Name: sanitize(name)}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				sm.Counter, sm.Value = true, m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				sm.Value = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				sm.Value = m.GetUntyped().GetValue()
			default:
				continue
			}
			out = append(out, sm)
		}
	}
	return bound(out), nil
}

// jsonSamples keeps the top-level numbers of a JSON health answer
// (Colibrì's /health counters: active, queued, completed, rejected).
func jsonSamples(r io.Reader) []Sample {
	var m map[string]any
	if json.NewDecoder(r).Decode(&m) != nil {
		return nil
	}
	var out []Sample
	for k, v := range m {
		if f, ok := v.(float64); ok {
			out = append(out, Sample{Name: sanitize(k), Value: f})
		}
	}
	return bound(out)
}

func bound(v []Sample) []Sample {
	sort.Slice(v, func(i, j int) bool { return v[i].Name < v[j].Name })
	// Names must stay unique after sanitising.
	out := v[:0]
	for i, sm := range v {
		if sm.Name == "" || (i > 0 && v[i-1].Name == sm.Name) {
			continue
		}
		out = append(out, sm)
	}
	if len(out) > maxSamples {
		out = out[:maxSamples]
	}
	return out
}

func sanitize(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 96 {
			break
		}
	}
	return b.String()
}

// ProcStats are the engine process group's counters from /proc: what
// expert streaming through mmap costs.
type ProcStats struct {
	// ReadBytes is the bytes read from storage (/proc/<pid>/io).
	ReadBytes uint64
	// MajorFaults are page faults that read from disk (mmap'd weights not
	// in the page cache), MinorFaults those served from memory.
	MajorFaults uint64
	MinorFaults uint64
	// ResidentBytes is the resident set.
	ResidentBytes uint64
}

// ProcStats sums the counters of the engine's process group (the engine
// and the runners it started); false when the engine is not running or
// /proc cannot tell.
func (s *Supervisor) ProcStats() (ProcStats, bool) {
	pgid := s.State().PID
	if pgid <= 0 {
		return ProcStats{}, false
	}
	return groupStats("/proc", pgid)
}

func groupStats(root string, pgid int) (ProcStats, bool) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return ProcStats{}, false
	}
	var st ProcStats
	found := false
	page := uint64(os.Getpagesize())
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := filepath.Join(root, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// The command name may hold spaces and parentheses: fields start
		// after the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		// f[0] is field 3 (state): pgrp is field 5, minflt 10, majflt 12,
		// rss 24.
		if len(f) < 22 {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g != pgid {
			continue
		}
		found = true
		minflt, _ := strconv.ParseUint(f[7], 10, 64)
		majflt, _ := strconv.ParseUint(f[9], 10, 64)
		rss, _ := strconv.ParseUint(f[21], 10, 64)
		st.MinorFaults += minflt
		st.MajorFaults += majflt
		st.ResidentBytes += rss * page
		if io, err := os.ReadFile(filepath.Join(dir, "io")); err == nil {
			for _, line := range strings.Split(string(io), "\n") {
				if v, ok := strings.CutPrefix(line, "read_bytes: "); ok {
					n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
					st.ReadBytes += n
				}
			}
		}
	}
	return st, found
}
