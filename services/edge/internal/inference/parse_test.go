package inference

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/spend"
)

// TestAdmissionInputsAreBounded: max_tokens past 2^31 (int64's largest
// included, and integers past int64) get a 400 naming the parameter; n
// and best_of are bounded and multiply the choices.
func TestAdmissionInputsAreBounded(t *testing.T) {
	chat := func(extra string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	for _, c := range []struct {
		endpoint, body, param string
	}{
		{events.EndpointChatCompletions, chat(`,"max_tokens":9223372036854775807`), "max_tokens"},
		{events.EndpointChatCompletions, chat(`,"max_completion_tokens":2147483649`), "max_completion_tokens"},
		{events.EndpointChatCompletions, chat(`,"max_tokens":99999999999999999999999`), "max_tokens"},
		{events.EndpointChatCompletions, chat(`,"max_tokens":-1`), "max_tokens"},
		{events.EndpointChatCompletions, chat(`,"n":0`), "n"},
		{events.EndpointChatCompletions, chat(`,"n":129`), "n"},
		{events.EndpointChatCompletions, chat(`,"n":9223372036854775807`), "n"},
		{events.EndpointCompletions, `{"model":"m","prompt":"hi","best_of":1000}`, "best_of"},
		{events.EndpointCompletions, `{"model":"m","prompt":"hi","n":4,"best_of":2}`, "best_of"},
	} {
		_, err := parseInference(c.endpoint, []byte(c.body))
		if err == nil || err.Status != 400 || err.Param != c.param {
			t.Errorf("%s %s: %+v", c.endpoint, c.body, err)
		}
	}
	p, err := parseInference(events.EndpointCompletions, []byte(`{"model":"m","prompt":"hi","n":2,"best_of":5,"max_tokens":2147483648}`))
	if err != nil || p.Choices != 5 || p.MaxTokens != MaxOutputTokens {
		t.Fatalf("completions: %+v %v", p, err)
	}
	p, err = parseInference(events.EndpointChatCompletions, []byte(chat(`,"n":3,"max_tokens":10,"max_completion_tokens":20`)))
	if err != nil || p.Choices != 3 || p.MaxTokens != 20 || p.MaxTokensParam != "max_completion_tokens" {
		t.Fatalf("chat: %+v %v", p, err)
	}
	// The chat prompt bound: string bytes plus template overheads, far
	// below the JSON size for short turns.
	if p.InputBytes != int64(requestOverheadTokens+messageOverheadTokens+len("user")+len("hi")) {
		t.Fatalf("InputBytes = %d", p.InputBytes)
	}
}

func TestWithMaxTokens(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"model":"m","messages":[]}`, `{"max_tokens":12,"messages":[],"model":"m"}`},
		{`{"max_completion_tokens":4096,"x":"<a>"}`, `{"max_completion_tokens":12,"x":"<a>"}`},
		{`{"max_tokens":100,"max_completion_tokens":4096}`, `{"max_completion_tokens":12,"max_tokens":12}`},
	} {
		got, err := withMaxTokens([]byte(c.in), 12)
		if err != nil || string(got) != c.want {
			t.Errorf("withMaxTokens(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	if _, err := withMaxTokens([]byte(`[1]`), 12); err == nil {
		t.Error("a body that is not an object was rewritten")
	}
}

// FuzzAdmissionInputs: whatever the body, parsing either refuses it or
// yields bounded admission inputs, and the token and cost arithmetic of
// admission built on them never goes negative or wraps.
func FuzzAdmissionInputs(f *testing.F) {
	f.Add(events.EndpointChatCompletions, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":9223372036854775807,"n":128}`, 1000.0, 1000.0, int64(50_000_000))
	f.Add(events.EndpointCompletions, `{"model":"m","prompt":"x","n":3,"best_of":128,"max_tokens":2147483648}`, 1e300, 0.0, int64(math.MaxInt64))
	f.Add(events.EndpointEmbeddings, `{"model":"m","input":["a","b"]}`, 0.02, 0.0, int64(0))
	f.Fuzz(func(t *testing.T, endpoint, body string, pin, pout float64, room int64) {
		switch endpoint {
		case events.EndpointChatCompletions, events.EndpointCompletions, events.EndpointEmbeddings:
		default:
			endpoint = events.EndpointChatCompletions
		}
		p, err := parseInference(endpoint, []byte(body))
		if err != nil {
			return
		}
		if p.MaxTokens < 0 || p.MaxTokens > MaxOutputTokens || p.Choices < 0 || p.Choices > MaxChoices || p.InputBytes < 0 {
			t.Fatalf("unbounded inputs %+v", p)
		}
		output := max(p.MaxTokens, DefaultOutputReserve)
		tokens := spend.AddSat(p.InputBytes, spend.MulSat(output, max(p.Choices, 1)))
		if tokens < p.InputBytes || tokens < output {
			t.Fatalf("token count %d wrapped", tokens)
		}
		want := spend.CostNano(p.InputBytes, spend.MulSat(output, max(p.Choices, 1)), pin, pout)
		if want < 0 {
			t.Fatalf("cost %d", want)
		}
		inCost := spend.CostNano(p.InputBytes, 0, pin, 0)
		per := spend.AffordableTokens(spend.SubFloor(min(room, want), inCost), spend.MulSat(output, max(p.Choices, 1)), pout) / max(p.Choices, 1)
		if per < 0 || per > output {
			t.Fatalf("cap %d for output %d", per, output)
		}
		if !strings.HasPrefix(strings.TrimSpace(body), "{") {
			return
		}
		if out, err := withMaxTokens([]byte(body), max(per, 1)); err == nil && !json.Valid(out) {
			t.Fatalf("rewritten body is not JSON: %s", out)
		}
	})
}
