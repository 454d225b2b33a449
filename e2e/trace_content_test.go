package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/internal/tracing"
	"github.com/aiforge/aiforge/internal/tracing/otlptest"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/natstest"
)

// genAIMessage is a message of gen_ai.input.messages or
// gen_ai.output.messages.
type genAIMessage struct {
	Role  string `json:"role"`
	Parts []struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	} `json:"parts"`
	FinishReason string `json:"finish_reason"`
}

func genAIMessages(t *testing.T, s *otlptest.Span, attr string) []genAIMessage {
	t.Helper()
	v, ok := s.Attrs[attr]
	if !ok {
		t.Fatalf("span %q has no %s: %v", s.Name, attr, s.Attrs)
	}
	var ms []genAIMessage
	if err := json.Unmarshal([]byte(v), &ms); err != nil {
		t.Fatalf("%s is not the conventions' JSON: %v: %.200s", attr, err, v)
	}
	return ms
}

// chatContent posts a chat request and returns its request id and the
// answer's text as the client saw it.
func chatContent(t *testing.T, url, key, body string) (reqID, text string) {
	t.Helper()
	if strings.Contains(body, `"stream":true`) {
		r := streamRaw(context.Background(), url, key, body, nil)
		if r.status != 200 || !r.done {
			t.Fatalf("stream: %d %v", r.status, r.events)
		}
		for _, e := range r.events {
			var c struct {
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(e), &c); err != nil {
				t.Fatal(err)
			}
			for _, ch := range c.Choices {
				text += ch.Delta.Content
			}
		}
		return r.header.Get("X-Request-Id"), text
	}
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var c struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 {
		t.Fatalf("answer %s: %v", b, err)
	}
	return resp.Header.Get("X-Request-Id"), c.Choices[0].Message.Content
}

// TestTraceContentOptIn: a tenant whose admin set trace_content gets its
// prompts and completions on the edge's inference span
// (gen_ai.input.messages, gen_ai.output.messages), streamed or not, a huge
// prompt cut at the bound with a marker; another tenant in the same run
// gets none of its text in any span, and no span anywhere holds a key.
func TestTraceContentOptIn(t *testing.T) {
	col := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.GRPCEndpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_SERVICE_NAME", "")

	ns := natstest.Server(t)
	_, base := sim(t, enginesim.Config{Models: []string{"up"}})
	var providers []*tracing.Provider
	start := func(target string) *stack {
		p, err := tracing.Setup(context.Background(), tracing.Config{ServiceName: "aiforge-" + target, Getenv: os.Getenv})
		if err != nil {
			t.Fatal(err)
		}
		providers = append(providers, p)
		s := startStack(t, stackOpts{natsURL: ns.ClientURL(), targets: []string{target}, mutate: func(o *app.Options) { o.Tracer = p }})
		t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
		return s
	}
	edge := start("edge")
	start("workers")

	ctx := context.Background()
	if err := edge.admin.Do(ctx, "POST", "/admin/v1/tenants", map[string]any{"id": "loud", "trace_content": true}, nil); err != nil {
		t.Fatal(err)
	}
	loudKey, _ := edge.tenantKey("loud")
	quietKey, _ := edge.tenantKey("quiet")
	edge.register("chat", base, "up")
	edge.waitServed(loudKey, "chat")

	const (
		system    = "You answer in the voice of a lighthouse."
		loudOne   = "the amber otter hums at dawn"
		loudTwo   = "the cobalt lynx naps at noon"
		quietOne  = "the scarlet newt whistles at dusk"
		quietTwo  = "the jade moth dances at midnight"
		hugeStart = "HUGE-START "
		hugeEnd   = " HUGE-END"
	)
	body := func(prompt string, stream bool) string {
		return fmt.Sprintf(`{"model":"chat","messages":[{"role":"system","content":%q},{"role":"user","content":%q}],"max_tokens":6,"stream":%t}`, system, prompt, stream)
	}
	type sent struct {
		key, prompt, answer string
		stream              bool
	}
	huge := hugeStart + strings.Repeat("the heron counts the waves ", 4000) + hugeEnd // ~108 KB
	reqs := map[string]*sent{}
	for _, s := range []sent{
		{key: loudKey, prompt: loudOne, stream: true},
		{key: loudKey, prompt: loudTwo},
		{key: quietKey, prompt: quietOne, stream: true},
		{key: quietKey, prompt: quietTwo},
		{key: loudKey, prompt: huge, stream: true},
	} {
		id, answer := chatContent(t, edge.url, s.key, body(s.prompt, s.stream))
		if answer == "" {
			t.Fatalf("empty answer to %.30q", s.prompt)
		}
		s.answer = answer
		reqs[id] = &s
	}

	edgeSpans := map[string]*otlptest.Span{} // request id -> its edge span
	eventually(t, 20*time.Second, func() bool {
		for _, p := range providers {
			if err := p.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		all := col.Spans()
		for i := range all {
			if id := all[i].Attrs["aiforge.request_id"]; all[i].Name == "edge chat.completions" && reqs[id] != nil {
				edgeSpans[id] = &all[i]
			}
		}
		return len(edgeSpans) == len(reqs)
	}, "the edge spans of every request")

	for id, s := range reqs {
		sp := edgeSpans[id]
		tenant := sp.Attrs["aiforge.tenant.id"]
		if s.key == quietKey {
			if tenant != "quiet" {
				t.Fatalf("request %s: tenant %q", id, tenant)
			}
			for _, attr := range []string{"gen_ai.input.messages", "gen_ai.output.messages"} {
				if _, ok := sp.Attrs[attr]; ok {
					t.Errorf("quiet tenant's span has %s", attr)
				}
			}
			continue
		}
		in := genAIMessages(t, sp, "gen_ai.input.messages")
		if len(in) != 2 || in[0].Role != "system" || in[1].Role != "user" || len(in[0].Parts) != 1 || len(in[1].Parts) != 1 ||
			in[0].Parts[0].Type != "text" || in[0].Parts[0].Content != system || in[1].Parts[0].Type != "text" {
			t.Fatalf("request %s: input messages %+v", id, in)
		}
		got := in[1].Parts[0].Content
		if s.prompt == huge {
			kept, marker, cut := strings.Cut(got, "…[truncated ")
			wantMarker := fmt.Sprintf("%d bytes]", len(huge)-len(kept))
			if !cut || marker != wantMarker || !strings.HasPrefix(kept, hugeStart) || len(kept) != 16<<10 || strings.Contains(got, "HUGE-END") {
				t.Errorf("huge prompt recorded as %d bytes ending %q; want 16 KiB of it and the marker %q", len(got), got[max(0, len(got)-40):], wantMarker)
			}
		} else if got != s.prompt {
			t.Errorf("request %s: prompt recorded %q, want %q", id, got, s.prompt)
		}
		out := genAIMessages(t, sp, "gen_ai.output.messages")
		if len(out) != 1 || out[0].Role != "assistant" || len(out[0].Parts) != 1 || out[0].Parts[0].Type != "text" ||
			out[0].Parts[0].Content != s.answer || out[0].FinishReason != "length" {
			t.Errorf("request %s (stream %v): output messages %+v, want the answer %q with finish_reason length", id, s.stream, out, s.answer)
		}
	}

	// No other span carries content; no span carries a key, the quiet
	// tenant's prompts, or the part of the huge prompt past the bound.
	for _, s := range col.Spans() {
		for k, v := range s.Attrs {
			for _, private := range []string{loudKey, quietKey, quietOne, quietTwo, hugeEnd} {
				if strings.Contains(v, private) {
					t.Errorf("span %q (%s) attribute %s holds %.40q", s.Name, s.Service, k, private)
				}
			}
			if s.Name != "edge chat.completions" && (strings.Contains(v, loudOne) || strings.Contains(v, system)) {
				t.Errorf("span %q (%s) attribute %s holds the prompt: content is recorded on the edge's span only", s.Name, s.Service, k)
			}
		}
	}
}
