package enginesim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func TestParseNames(t *testing.T) {
	for m := FailNone; m <= FailErrorEvent; m++ {
		if got, err := ParseFailureMode(m.String()); err != nil || got != m {
			t.Fatalf("ParseFailureMode(%q) = %v, %v", m, got, err)
		}
	}
	for st := StyleOpenAI; st <= StyleOllama; st++ {
		if got, err := ParseErrorStyle(st.String()); err != nil || got != st {
			t.Fatalf("ParseErrorStyle(%q) = %v, %v", st, got, err)
		}
	}
	if _, err := ParseFailureMode("sometimes"); err == nil {
		t.Fatal("unknown mode parsed")
	}
	if _, err := ParseErrorStyle("tgi"); err == nil {
		t.Fatal("unknown style parsed")
	}
}

// rawEvents splits an SSE body into its events, each a list of lines.
func rawEvents(t testing.TB, body []byte) [][]string {
	t.Helper()
	var out [][]string
	for _, ev := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		out = append(out, strings.Split(ev, "\n"))
	}
	return out
}

type llamaErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Type    string `json:"type"`
	NPrompt int    `json:"n_prompt_tokens"`
	NCtx    int    `json:"n_ctx"`
}

func TestFailErrorLine(t *testing.T) {
	sim, base := startSim(t, LlamaLike(Config{Models: []string{"m"}}))
	for _, after := range []int{0, 2} {
		sim.SetFailure(Failure{Mode: FailErrorLine, AfterTokens: after, ContextOverflow: true, Count: 1})
		status, _, b := call(t, "POST", base+"/chat/completions", streamBody(5), nil)
		if status != 200 {
			t.Fatalf("status %d", status)
		}
		evs := rawEvents(t, b)
		if len(evs) != after+2 {
			t.Fatalf("after %d: events %q", after, evs)
		}
		for _, ev := range evs[:after] {
			if !strings.HasPrefix(ev[0], "data: {") {
				t.Fatalf("token event %q", ev)
			}
		}
		line, ok := strings.CutPrefix(evs[after][0], "error: ")
		if !ok || len(evs[after]) != 1 {
			t.Fatalf("error event %q", evs[after])
		}
		var e llamaErr
		mustJSON(t, []byte(line), &e)
		if e.Code != 400 || e.Type != "exceed_context_size_error" || !strings.Contains(e.Message, "exceeds the available context size") {
			t.Fatalf("error line %s", line)
		}
		if evs[after+1][0] != "data: [DONE]" {
			t.Fatalf("want [DONE] after the error line: %q", evs)
		}
	}
	// Not streamed: llama's HTTP error.
	sim.SetFailure(Failure{Mode: FailErrorLine, Status: 500, Count: 1})
	status, _, b := call(t, "POST", base+"/completions", `{"model":"m","prompt":"x"}`, nil)
	var e struct{ Error llamaErr }
	mustJSON(t, b, &e)
	if status != 500 || e.Error.Code != 500 || e.Error.Type != "server_error" {
		t.Fatalf("%d %s", status, b)
	}
	if st := sim.Stats(); st.Failed != 3 || st.Completed != 0 || st.TokensSent != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFailErrorEvent(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}})
	sim.SetFailure(Failure{Mode: FailErrorEvent, AfterTokens: 1, Count: 1})
	status, _, b := call(t, "POST", base+"/chat/completions", streamBody(5), nil)
	evs := rawEvents(t, b)
	if status != 200 || len(evs) != 2 || len(evs[1]) != 2 || evs[1][0] != "event: error" {
		t.Fatalf("%d %q", status, evs)
	}
	data, _ := strings.CutPrefix(evs[1][1], "data: ")
	checkError(t, 500, 500, []byte(data), "server_error", "simulated_failure")
	if strings.Contains(string(b), "[DONE]") {
		t.Fatalf("[DONE] after event: error: %s", b)
	}
}

func TestErrorStyles(t *testing.T) {
	for _, tc := range []struct {
		style  ErrorStyle
		status int
		want   string // a fragment of the body
	}{
		{StyleOpenAI, 400, `"code":null`},
		{StyleOpenAI, 404, `"code":"model_not_found"`},
		{StyleLlama, 400, `{"error":{"code":400,`},
		{StyleLlama, 401, `"type":"authentication_error"`},
		{StyleLlama, 503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`},
		{StyleVLLM, 400, `"type":"BadRequestError","param":null,"code":400}`},
		{StyleVLLM, 401, `{"error":"Unauthorized"}`},
		{StyleOllama, 500, `{"error":"enginesim: simulated engine failure"}`},
	} {
		sim, base := startSim(t, Config{Models: []string{"m"}, ErrorStyle: tc.style})
		sim.SetFailure(Failure{Mode: FailBeforeFirstToken, Status: tc.status})
		status, _, b := call(t, "POST", base+"/chat/completions", streamBody(2), nil)
		if status != tc.status || !bytes.Contains(b, []byte(tc.want)) || !json.Valid(b) {
			t.Fatalf("%s %d: %d %s, want %s", tc.style, tc.status, status, b, tc.want)
		}
	}
}

func TestContextSize(t *testing.T) {
	long := `{"model":"m","messages":[{"role":"user","content":"one two three four five six seven eight nine ten"}]`
	for _, tc := range []struct {
		style ErrorStyle
		want  string
	}{
		{StyleOpenAI, `"code":"context_length_exceeded"`},
		{StyleLlama, `"type":"exceed_context_size_error"`},
		{StyleVLLM, `maximum context length is 8 tokens`},
		{StyleOllama, `exceeds the context length`},
	} {
		sim, base := startSim(t, Config{Models: []string{"m"}, ContextSize: 8, ErrorStyle: tc.style})
		status, _, b := call(t, "POST", base+"/chat/completions", long+"}", nil)
		if status != 400 || !bytes.Contains(b, []byte(tc.want)) {
			t.Fatalf("%s: %d %s", tc.style, status, b)
		}
		status, _, b = call(t, "POST", base+"/chat/completions", long+`,"stream":true}`, nil)
		if tc.style == StyleLlama {
			if status != 200 || !strings.HasPrefix(string(b), `error: {"code":400,`) || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
				t.Fatalf("llama stream: %d %s", status, b)
			}
		} else if status != 400 {
			t.Fatalf("%s stream: %d %s", tc.style, status, b)
		}
		status, _, _ = call(t, "POST", base+"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"short"}]}`, nil)
		if status != 200 {
			t.Fatalf("a short prompt: %d", status)
		}
		if st := sim.Stats(); st.Rejected != 2 || st.Failed != 0 || st.Completed != 1 {
			t.Fatalf("stats %+v", st)
		}
	}
}

func TestOpenModels(t *testing.T) {
	_, base := startSim(t, Config{Models: []string{"m"}, APIKey: "k", OpenModels: true})
	if status, _, b := call(t, "GET", base+"/models", "", nil); status != 200 || !bytes.Contains(b, []byte(`"id":"m"`)) {
		t.Fatalf("models without a key: %d %s", status, b)
	}
	if status, _, _ := call(t, "GET", base+"/models/m", "", nil); status != 200 {
		t.Fatalf("model without a key: %d", status)
	}
	if status, _, _ := call(t, "POST", base+"/chat/completions", streamBody(1), nil); status != 401 {
		t.Fatalf("chat without a key: %d", status)
	}
	if status, _, _ := call(t, "POST", base+"/chat/completions", streamBody(1), map[string]string{"Authorization": "Bearer k"}); status != 200 {
		t.Fatalf("chat with the key: %d", status)
	}
	_, closed := startSim(t, Config{Models: []string{"m"}, APIKey: "k"})
	if status, _, _ := call(t, "GET", closed+"/models", "", nil); status != 401 {
		t.Fatalf("models without a key, OpenModels off: %d", status)
	}
}

func TestUsageOnLastChunk(t *testing.T) {
	_, base := startSim(t, Config{Models: []string{"m"}, UsageOnLastChunk: true})
	for _, body := range []string{streamBody(3), strings.Replace(streamBody(3), `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)} {
		_, _, b := call(t, "POST", base+"/chat/completions", body, nil)
		evs := sseEvents(t, b)
		if len(evs) != 5 || evs[4] != "[DONE]" {
			t.Fatalf("events %q", evs)
		}
		for _, ev := range evs[:3] {
			if strings.Contains(ev, `"usage"`) {
				t.Fatalf("usage on a token chunk: %s", ev)
			}
		}
		var last chunk
		mustJSON(t, []byte(evs[3]), &last)
		if len(last.Choices) != 1 || last.Choices[0].FinishReason == nil || last.Usage == nil ||
			last.Usage.CompletionTokens != 3 || !strings.Contains(evs[3], `"timings":{`) {
			t.Fatalf("last chunk %s", evs[3])
		}
	}
}

// recListener records what the server writes on each connection.
type recListener struct {
	net.Listener
	mu      sync.Mutex
	writes  [][]byte
	noDelay []bool
}

type recConn struct {
	*net.TCPConn
	l *recListener
}

func (l *recListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return recConn{c.(*net.TCPConn), l}, nil
}

func (c recConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.writes = append(c.l.writes, append([]byte(nil), p...))
	c.l.mu.Unlock()
	return c.TCPConn.Write(p)
}

func (c recConn) SetNoDelay(on bool) error {
	c.l.mu.Lock()
	c.l.noDelay = append(c.l.noDelay, on)
	c.l.mu.Unlock()
	return c.TCPConn.SetNoDelay(on)
}

func (l *recListener) take() (writes [][]byte, noDelay []bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	writes, noDelay = l.writes, l.noDelay
	l.writes, l.noDelay = nil, nil
	return writes, noDelay
}

func TestSplitWrites(t *testing.T) {
	for _, split := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rl := &recListener{Listener: ln}
		sim := New(Config{Models: []string{"m"}, SplitWrites: split})
		srv := sim.NewServer()
		go func() { _ = srv.Serve(rl) }()
		t.Cleanup(func() { _ = srv.Close() })
		url := "http://" + ln.Addr().String() + "/v1/chat/completions"
		for i := 0; i < 2; i++ { // the second on the kept-alive connection
			resp, err := http.Post(url, "application/json", strings.NewReader(`{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"x"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %d", err, resp.StatusCode)
			}
			writes, noDelay := rl.take()
			if split {
				if i == 0 && (len(noDelay) != 1 || noDelay[0]) {
					t.Fatalf("TCP_NODELAY calls %v, want it turned off once", noDelay)
				}
				if len(writes) != 2 || !bytes.HasSuffix(writes[0], []byte("\r\n\r\n")) || !bytes.Equal(writes[1], body) {
					t.Fatalf("request %d: writes %q, want the headers then the body", i, writes)
				}
				hr, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(writes[0])), nil)
				if err != nil || hr.StatusCode != 200 {
					t.Fatalf("first write is not the headers: %v", err)
				}
			} else if len(writes) != 1 || len(noDelay) != 0 {
				t.Fatalf("request %d: writes %q, TCP_NODELAY calls %v; want one write", i, writes, noDelay)
			}
		}
	}
}

func TestSplitWritesStream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &recListener{Listener: ln}
	srv := New(Config{Models: []string{"m"}, SplitWrites: true}).NewServer()
	go func() { _ = srv.Serve(rl) }()
	t.Cleanup(func() { _ = srv.Close() })
	resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(streamBody(2)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	writes, _ := rl.take()
	if len(writes) < 2 || !bytes.HasSuffix(writes[0], []byte("\r\n\r\n")) {
		t.Fatalf("writes %q: want the headers alone first", writes)
	}
}
