package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/services/worker"
)

// EngineLlamaLike names the bench against the simulator's llama-like mode.
const EngineLlamaLike = "llama-like"

// LlamaReport holds the figures of a run against a llama-like engine (headers
// and body in separate writes, no TCP_NODELAY), non-streamed, concurrency 1,
// the paths taking turns in bursts.
type LlamaReport struct {
	Requests int
	Tokens   int
	// Direct is an ordinary Go client: on its kept-alive connection the
	// engine's body waits for the client's delayed ACK, as it does for any
	// real client that keeps connections alive.
	Direct Series
	// DirectQuickAck is a Go client with quick ACKs (worker.NewHTTPClient):
	// the fair baseline for what aiforge adds.
	DirectQuickAck Series
	// DirectStream asks the engine for a stream and reads it whole, the
	// other fix the issue named, with an ordinary client.
	DirectStream Series
	// DirectStreamQuickAck is DirectStream with quick ACKs.
	DirectStreamQuickAck Series
	// Aiforge is an ordinary client calling aiforge.
	Aiforge Series
}

// Print writes the report as a table.
func (r LlamaReport) Print(w io.Writer) {
	fmt.Fprintf(w, "llama-like engine (headers and body in separate writes, TCP_NODELAY off), non-streamed chat of %d tokens,\n", r.Tokens)
	fmt.Fprintf(w, "concurrency 1, %d requests per path, the paths taking turns in bursts of back-to-back calls\n\n", r.Requests)
	fmt.Fprintf(w, "%-46s %10s %10s\n", "path", "p50", "p99")
	row := func(name string, s Series) { fmt.Fprintf(w, "%-46s %10s %10s\n", name, us(s.P50), us(s.P99)) }
	row("direct, ordinary Go client", r.Direct)
	row("direct, quick-ack client", r.DirectQuickAck)
	row("direct, stream read whole, ordinary client", r.DirectStream)
	row("direct, stream read whole, quick-ack client", r.DirectStreamQuickAck)
	row("aiforge (ordinary client; worker quick-acks)", r.Aiforge)
	added := r.Aiforge.P50 - r.DirectQuickAck.P50
	verdict := "within 2 ms"
	if added > 2*time.Millisecond {
		verdict = "NOT within 2 ms"
	}
	fmt.Fprintf(w, "\naiforge p50 - direct quick-ack p50: %s (%s); ratio %.2fx\n", us(added), verdict,
		float64(r.Aiforge.P50)/float64(r.DirectQuickAck.P50))
	fmt.Fprintf(w, "aiforge p50 / direct ordinary-client p50: %.3fx\n", float64(r.Aiforge.P50)/float64(r.Direct.P50))
}

// RunLlama measures non-streamed calls against the simulator's llama-like
// mode: direct with an ordinary client, direct with quick ACKs, direct as a
// stream read whole (both clients), and through aiforge, taking turns.
func RunLlama(ctx context.Context, o Options) (LlamaReport, error) {
	if o.Requests == 0 {
		o.Requests = 200
	}
	if o.Tokens == 0 {
		o.Tokens = 16
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	rep := LlamaReport{Requests: o.Requests, Tokens: o.Tokens}
	env, err := SetupEngine(ctx, o.Progress, enginesim.LlamaLike(enginesim.Config{}), nil)
	if err != nil {
		return rep, err
	}
	defer env.Close()
	ordinary := func() *http.Client {
		return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Minute}}
	}
	direct := func(hc *http.Client) target { t := env.Direct; t.hc = hc; return t }
	paths := []struct {
		t      target
		stream bool
		out    *Series
	}{
		{direct(ordinary()), false, &rep.Direct},
		{direct(worker.NewHTTPClient()), false, &rep.DirectQuickAck},
		{direct(ordinary()), true, &rep.DirectStream},
		{direct(worker.NewHTTPClient()), true, &rep.DirectStreamQuickAck},
		{env.Gateway, false, &rep.Aiforge},
	}
	for _, p := range paths { // warm connections and pools
		for i := 0; i < 5; i++ {
			if _, err := p.t.Call(p.stream, o.Tokens); err != nil {
				return rep, err
			}
		}
	}
	// Bursts of back-to-back calls per path, the paths taking turns: a
	// connection idle for longer than the delayed-ACK timeout ACKs at once,
	// so interleaving single calls would hide the stall. The first call of
	// each burst (after the other paths' turns) is not counted.
	const burst = 10
	fmt.Fprintf(o.Progress, "llama-like engine: %d non-streamed requests per path, 5 paths taking turns in bursts of %d ...\n", o.Requests, burst)
	ds := make([][]time.Duration, len(paths))
	for len(ds[0]) < o.Requests {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		for j, p := range paths {
			for i := 0; i <= burst; i++ {
				d, err := p.t.Call(p.stream, o.Tokens)
				if err != nil {
					return rep, err
				}
				if i > 0 && len(ds[j]) < o.Requests {
					ds[j] = append(ds[j], d)
				}
			}
		}
	}
	for j, p := range paths {
		*p.out = stats(ds[j])
	}
	return rep, nil
}
