package enginesim

import (
	"strings"
	"testing"
)

// ZeroUsageChunks: zero usage on every chunk with choices of a stream that
// asked for include_usage, the real counts on the final usage chunk;
// nothing changes for a stream that did not ask.
func TestZeroUsageChunks(t *testing.T) {
	_, base := startSim(t, Config{Models: []string{"m"}, ZeroUsageChunks: true})
	const zero = `"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`
	for _, tc := range []struct{ path, body string }{
		{"/chat/completions", streamBody(3)},
		{"/completions", `{"model":"m","stream":true,"max_tokens":3,"prompt":"stream please"}`},
	} {
		with := strings.Replace(tc.body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
		_, _, b := call(t, "POST", base+tc.path, with, nil)
		evs := sseEvents(t, b)
		if len(evs) != 6 || evs[5] != "[DONE]" {
			t.Fatalf("%s: events %q", tc.path, evs)
		}
		for _, ev := range evs[:4] {
			if !strings.Contains(ev, zero) {
				t.Fatalf("%s: chunk without zero usage: %s", tc.path, ev)
			}
		}
		var last chunk
		mustJSON(t, []byte(evs[4]), &last)
		if len(last.Choices) != 0 || last.Usage == nil || last.Usage.CompletionTokens != 3 || last.Usage.PromptTokens == 0 {
			t.Fatalf("%s: usage chunk %s", tc.path, evs[4])
		}

		_, _, b = call(t, "POST", base+tc.path, tc.body, nil)
		evs = sseEvents(t, b)
		if len(evs) != 5 || strings.Contains(string(b), `"usage"`) {
			t.Fatalf("%s without include_usage: %q", tc.path, evs)
		}
	}
}
