package engine

import (
	"io"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/registry"
)

func readAll(t *testing.T, in string) ([]sseEvent, error) {
	t.Helper()
	rd := newSSEReader(strings.NewReader(in))
	var out []sseEvent
	for {
		ev, err := rd.Next()
		if err != nil {
			return out, err
		}
		out = append(out, sseEvent{data: []byte(string(ev.data)), error: ev.error})
	}
}

func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string // "E:" marks an error event
		end  error
	}{
		{"data", "data: a\n\ndata:b\n\ndata: [DONE]\n\n", []string{"a", "b", "[DONE]"}, io.EOF},
		{"crlf and multi-line", "data: a\r\ndata: b\r\n\r\n", []string{"a\nb"}, io.EOF},
		{"comments, id, retry, event names", ": ping\n\nid: 7\nretry: 10\nevent: message\ndata: x\n\n: bye\n\n", []string{"x"}, io.EOF},
		{"llama error line then done", "data: a\n\nerror: {\"code\":400}\n\ndata: [DONE]\n\n", []string{"a", "E:{\"code\":400}", "[DONE]"}, io.EOF},
		{"event error", "event: error\ndata: {\"error\":{}}\n\ndata: b\n\n", []string{"E:{\"error\":{}}", "b"}, io.EOF},
		{"event name resets", "event: error\ndata: 1\n\ndata: 2\n\n", []string{"E:1", "2"}, io.EOF},
		{"event error without data", "event: error\n\n", []string{"E:"}, io.EOF},
		{"error line cut at EOF", "error: {\"code\":500}", []string{"E:{\"code\":500}"}, io.EOF},
		{"error line without blank line", "error: boom\n", []string{"E:boom"}, io.EOF},
		{"data cut at EOF", "data: a\n\ndata: {\"x\"", []string{"a"}, io.ErrUnexpectedEOF},
		{"data without blank line", "data: a\n", nil, io.ErrUnexpectedEOF},
		{"empty", "", nil, io.EOF},
		{"long line", "data: " + strings.Repeat("x", 100<<10) + "\n\n", []string{strings.Repeat("x", 100<<10)}, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := readAll(t, tc.in)
			if err != tc.end {
				t.Fatalf("end %v, want %v", err, tc.end)
			}
			var got []string
			for _, ev := range evs {
				s := string(ev.data)
				if ev.error {
					s = "E:" + s
				}
				got = append(got, s)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Fatalf("events %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseEngineError(t *testing.T) {
	for _, tc := range []struct {
		body string
		want engineError
		ctx  bool
	}{
		{`{"error":{"message":"m","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			engineError{Message: "m", Type: "invalid_request_error", Param: "messages", Code: "context_length_exceeded"}, true},
		{`{"error":{"code":400,"message":"request (9 tokens) exceeds the available context size (8 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9,"n_ctx":8}}`,
			engineError{Message: "request (9 tokens) exceeds the available context size (8 tokens), try increasing it", Type: "exceed_context_size_error", Status: 400}, true},
		{`{"code":500,"message":"boom","type":"server_error"}`, engineError{Message: "boom", Type: "server_error", Status: 500}, false},
		{`{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400}`,
			engineError{Message: "This model's maximum context length is 4096 tokens.", Type: "BadRequestError", Status: 400}, true},
		{`{"error":"the input length exceeds the context length"}`, engineError{Message: "the input length exceeds the context length"}, true},
		{`{"error":"Input validation error","error_type":"validation"}`, engineError{Message: "Input validation error", Type: "validation"}, false},
		{`{"error":{"message":"x","code":"429"}}`, engineError{Message: "x", Status: 429}, false},
		{`{"detail":"Not Found"}`, engineError{Message: "Not Found"}, false},
		{`{"error":{"object":"error","message":"The prompt (total length 6287) is too long to fit into the model (context length 4096).","type":"BadRequestError","param":null,"code":400}}`,
			engineError{Message: "The prompt (total length 6287) is too long to fit into the model (context length 4096).", Type: "BadRequestError", Status: 400}, true},
		{`{"object":"error","message":"The input (5000 tokens) is longer than the model's context length (4096 tokens).","type":"BadRequestError","param":null,"code":400}`,
			engineError{Message: "The input (5000 tokens) is longer than the model's context length (4096 tokens).", Type: "BadRequestError", Status: 400}, true},
	} {
		got, ok := parseEngineError([]byte(tc.body))
		if !ok || got != tc.want || got.contextOverflow() != tc.ctx {
			t.Errorf("%s: %+v (ok %v, context %v), want %+v (context %v)", tc.body, got, ok, got.contextOverflow(), tc.want, tc.ctx)
		}
	}
	for _, body := range []string{``, `not json`, `{"error":null}`, `{"choices":[]}`, `[1]`} {
		if e, ok := parseEngineError([]byte(body)); ok {
			t.Errorf("%q parsed as %+v", body, e)
		}
	}
}

func TestMapEngineError(t *testing.T) {
	ec := New(Config{Served: "s", RequestTimeout: 1, Engine: engineWithKey("sekret-key-9")})
	for _, tc := range []struct {
		status    int
		body      string
		code      string
		outStatus int
		retry     bool
	}{
		{400, `{"error":{"code":400,"message":"Cannot use tools with stream","type":"invalid_request_error"}}`, contracts.CodeInvalidRequest, 400, false},
		{401, `{"error":"Unauthorized"}`, contracts.CodeUpstreamAuth, 502, false},
		{404, `{"error":{"message":"model not found"}}`, contracts.CodeEngineError, 502, false},
		{429, ``, contracts.CodeOverloaded, 429, true},
		{500, `{"error":{"code":500,"message":"the request exceeds the available context size","type":"server_error"}}`, contracts.CodeContextLengthExceeded, 400, false},
		{501, ``, contracts.CodeEngineError, 502, false},
		{502, `<html>bad gateway</html>`, contracts.CodeEngineError, 502, true},
		{503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, contracts.CodeEngineError, 502, true},
		{504, ``, contracts.CodeEngineError, 502, true},
		{0, `{"code":400,"message":"bad","type":"invalid_request_error"}`, contracts.CodeInvalidRequest, 400, false},
		{0, `{"error":{"message":"boom"}}`, contracts.CodeEngineError, 502, true},
	} {
		e, retry := ec.mapEngineError(tc.status, []byte(tc.body), Chat)
		if e.Code != tc.code || e.Status != tc.outStatus || retry != tc.retry {
			t.Errorf("%d %s: %+v retry %v; want %s %d retry %v", tc.status, tc.body, e, retry, tc.code, tc.outStatus, tc.retry)
		}
	}
	e, _ := ec.mapEngineError(400, []byte(`{"error":"key sekret-key-9 via https://u:p@h/x, Authorization: Bearer abc.def"}`), Chat)
	if strings.Contains(e.Message, "sekret-key-9") || strings.Contains(e.Message, "u:p@") || strings.Contains(e.Message, "abc.def") {
		t.Fatalf("secrets left in %q", e.Message)
	}
}

func engineWithKey(k string) registry.Engine {
	return registry.Engine{BaseURL: "http://127.0.0.1:1/v1", Model: "up", APIKey: k}
}

// FuzzSSEReader: any input ends (EOF or an error) without a panic, and the
// events' payloads are within the input.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{"data: a\n\n", "error: {}\n\ndata: [DONE]\n\n", "event: error\ndata: x\n\n", ": c\nid: 1\nretry: 2\n\n", "data: a\r\n", "error: x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		rd := newSSEReader(strings.NewReader(in))
		for i := 0; ; i++ {
			ev, err := rd.Next()
			if err != nil {
				return
			}
			if len(ev.data) > len(in) || i > len(in) {
				t.Fatalf("event %q from %q", ev.data, in)
			}
		}
	})
}

func TestEngineCodesBounded(t *testing.T) {
	ec := New(Config{Served: "s", RequestTimeout: 1, Engine: engineWithKey("")})
	for body, want := range map[string]string{
		`{"error":{"message":"m","code":"invalid_value","param":"temperature"}}`: "invalid_value",
		`{"error":{"message":"m","code":"made_up_by_the_engine_42"}}`:            contracts.CodeInvalidRequest,
	} {
		if e, _ := ec.mapEngineError(400, []byte(body), Chat); e.Code != want {
			t.Errorf("%s: code %q, want %q", body, e.Code, want)
		}
	}
}

// endless is a stream that never ends its line.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// An event without end (one endless line, or data lines that never reach
// the blank line ending the event) is refused at maxEventBytes, not read
// into memory for ever.
func TestSSEEventBounded(t *testing.T) {
	rd := newSSEReader(io.MultiReader(strings.NewReader("data: "), endless{}))
	if _, err := rd.Next(); err != errEventTooLarge {
		t.Fatalf("endless line: %v", err)
	}
	line := "data: " + strings.Repeat("b", 4096) + "\n"
	lines := strings.NewReader(strings.Repeat(line, 2*maxEventBytes/len(line)))
	if _, err := newSSEReader(lines).Next(); err != errEventTooLarge {
		t.Fatalf("endless event: %v", err)
	}
	ok := "data: " + strings.Repeat("c", maxEventBytes/2) + "\n\n"
	if ev, err := newSSEReader(strings.NewReader(ok)).Next(); err != nil || len(ev.data) != maxEventBytes/2 {
		t.Fatalf("an event under the bound: %d bytes, %v", len(ev.data), err)
	}
}
