package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

// CacheOptions size a semantic cache run.
type CacheOptions struct {
	// Requests per path (miss, exact hit, similar hit) and per mode
	// (plain, streamed); default 300.
	Requests int
	// TimeToFirstToken is the simulator's delay, so that a miss is visibly
	// slower than a hit (default 20ms).
	TimeToFirstToken time.Duration
	// Tokens per answer (default 16).
	Tokens   int
	Progress io.Writer
}

// CachePaths is one mode's series: a miss served by the simulator, an
// exact hit (the same request again) and a similarity hit (the prompt
// reworded).
type CachePaths struct {
	Miss, Exact, Similar Series
}

// CacheReport holds the figures of a cache run.
type CacheReport struct {
	Requests         int
	TimeToFirstToken time.Duration
	Tokens           int
	Plain, Stream    CachePaths
}

// CacheHitTarget is the p50 a cache hit should stay under (issue 14).
const CacheHitTarget = time.Millisecond

// Print writes the report as a table.
func (r CacheReport) Print(w io.Writer) {
	fmt.Fprintf(w, "semantic cache, concurrency 1, %d requests per path, simulator time to first token %s, %d tokens\n",
		r.Requests, r.TimeToFirstToken, r.Tokens)
	fmt.Fprintf(w, "%-26s %10s %10s %12s\n", "", "p50", "p99", "p50 vs miss")
	for _, m := range []struct {
		name string
		p    CachePaths
	}{{"plain", r.Plain}, {"streamed", r.Stream}} {
		row := func(path string, s Series) {
			ratio := "-"
			if path != "miss" && m.p.Miss.P50 > 0 {
				ratio = fmt.Sprintf("%.3f", float64(s.P50)/float64(m.p.Miss.P50))
			}
			fmt.Fprintf(w, "%-26s %10s %10s %12s\n", m.name+" "+path, us(s.P50), us(s.P99), ratio)
		}
		row("miss", m.p.Miss)
		row("exact hit", m.p.Exact)
		row("similar hit", m.p.Similar)
	}
	worst := max(r.Plain.Exact.P50, r.Plain.Similar.P50, r.Stream.Exact.P50, r.Stream.Similar.P50)
	verdict := "met"
	if worst >= CacheHitTarget {
		verdict = "NOT met"
	}
	fmt.Fprintf(w, "target hit p50 < %s: %s (slowest hit p50 %s)\n", us(CacheHitTarget), verdict, us(worst))
}

// cacheModel is the model the cache bench registers, with the cache on.
const cacheModel = "bench-cache"

// RunCache measures, in one run and interleaved, a cache miss, an exact
// hit and a similarity hit, plain and streamed, through aiforge to a
// model whose cache is on (similarity 0.8, lexical).
func RunCache(ctx context.Context, o CacheOptions) (CacheReport, error) {
	if o.Requests <= 0 {
		o.Requests = 300
	}
	if o.TimeToFirstToken <= 0 {
		o.TimeToFirstToken = 20 * time.Millisecond
	}
	if o.Tokens <= 0 {
		o.Tokens = 16
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	rep := CacheReport{Requests: o.Requests, TimeToFirstToken: o.TimeToFirstToken, Tokens: o.Tokens}
	env, err := SetupEngine(ctx, o.Progress, enginesim.Config{TimeToFirstToken: o.TimeToFirstToken}, nil)
	if err != nil {
		return rep, err
	}
	defer env.Close()
	if err := env.Admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": cacheModel,
		"engine": map[string]any{"base_url": env.EngineURL, "model": "bench-upstream"},
		"cache":  map[string]any{"enabled": true, "similarity": 0.8}}, nil); err != nil {
		return rep, err
	}
	gw := env.Gateway
	gw.model = cacheModel
	if err := waitServed(ctx, gw); err != nil {
		return rep, err
	}
	cc := cacheCaller{t: gw, tokens: o.Tokens}

	// Warm connections and code paths with prompts of their own.
	for i := range 20 {
		if _, err := cc.round(ctx, false, -1-i); err != nil {
			return rep, fmt.Errorf("warm-up: %w", err)
		}
	}
	fmt.Fprintf(o.Progress, "%d rounds of miss, exact hit and similar hit, plain then streamed, interleaved ...\n", o.Requests)
	var plain, stream [3][]time.Duration
	for i := range o.Requests {
		for _, s := range []bool{false, true} {
			d, err := cc.round(ctx, s, i)
			if err != nil {
				return rep, err
			}
			into := &plain
			if s {
				into = &stream
			}
			for k := range d {
				into[k] = append(into[k], d[k])
			}
		}
	}
	rep.Plain = CachePaths{Miss: stats(plain[0]), Exact: stats(plain[1]), Similar: stats(plain[2])}
	rep.Stream = CachePaths{Miss: stats(stream[0]), Exact: stats(stream[1]), Similar: stats(stream[2])}
	return rep, nil
}

type cacheCaller struct {
	t      target
	tokens int
}

// The prompts of round i share five terms (explain, ticket, affect,
// cluster, region) of eight with every other round's, a cosine of 0.625,
// under the 0.8 threshold: each round's first prompt is a miss. The
// reworded prompt has the same terms in another order plus "please"
// (cosine 0.94): a similarity hit, not an exact one. Streamed rounds have
// prompts of their own (the cache key ignores "stream").
func cachePrompts(stream bool, i int) (first, reworded string) {
	m := "p"
	if stream {
		m = "s"
	}
	id := fmt.Sprintf("%s%d", m, i)
	first = fmt.Sprintf("Explain how ticket t%s affects cluster c%s in region r%s", id, id, id)
	reworded = fmt.Sprintf("For cluster c%s in region r%s, please explain how ticket t%s affects it", id, id, id)
	return first, reworded
}

// round is one measured miss, exact hit and similar hit of round i, each
// checked by the X-Aiforge-Cache header; between the miss and the exact
// hit it waits, untimed, for the answer to be stored (after the response).
func (c cacheCaller) round(ctx context.Context, stream bool, i int) ([3]time.Duration, error) {
	var out [3]time.Duration
	first, reworded := cachePrompts(stream, i)
	d, kind, err := c.call(stream, first)
	if err != nil {
		return out, err
	}
	if kind != "" {
		return out, fmt.Errorf("round %d: a new prompt was answered from the cache (%s)", i, kind)
	}
	out[0] = d
	if err := c.waitHit(ctx, stream, first); err != nil {
		return out, fmt.Errorf("round %d: %w", i, err)
	}
	for k, want := range []string{1: "exact", 2: "similar"} {
		if k == 0 {
			continue
		}
		prompt := first
		if k == 2 {
			prompt = reworded
		}
		d, kind, err := c.call(stream, prompt)
		if err != nil {
			return out, err
		}
		if kind != want {
			return out, fmt.Errorf("round %d: want a %s hit, got X-Aiforge-Cache %q", i, want, kind)
		}
		out[k] = d
	}
	return out, nil
}

func (c cacheCaller) waitHit(ctx context.Context, stream bool, prompt string) error {
	for range 1000 {
		_, kind, err := c.call(stream, prompt)
		if err != nil {
			return err
		}
		if kind == "exact" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return fmt.Errorf("the answer to %q was never stored in the cache", prompt)
}

// call sends one deterministic chat request (temperature 0), reads the
// whole answer and returns its latency and X-Aiforge-Cache.
func (c cacheCaller) call(stream bool, prompt string) (time.Duration, string, error) {
	body := fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":%d,"temperature":0,"stream":%t}`,
		c.t.model, prompt, c.tokens, stream)
	req, _ := http.NewRequest("POST", c.t.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.t.key)
	start := time.Now()
	resp, err := c.t.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("%s: HTTP %d", c.t.url, resp.StatusCode)
	}
	return d, resp.Header.Get("X-Aiforge-Cache"), nil
}
