package enginesim

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Sim. The zero value is usable.
type Config struct {
	// Models are the model ids listed by GET /v1/models and accepted in
	// requests. Default ["sim-model"]. A request without "model" is served by
	// Models[0].
	Models []string
	// TimeToFirstToken is the delay before the first token of a streamed
	// response, and before a non-streamed response (which additionally waits
	// the time its tokens would have taken to stream).
	TimeToFirstToken time.Duration
	// TokensPerSecond paces tokens after the first; 0 = unlimited (no sleeping).
	TokensPerSecond float64
	// DefaultMaxTokens is the number of tokens generated when the request has
	// neither max_tokens nor max_completion_tokens. Default 16.
	DefaultMaxTokens int
	// AnswerTokens, when positive, is where an answer ends by itself (as a
	// model stops at its end-of-sequence token): a request whose max_tokens
	// allows more gets AnswerTokens tokens with finish_reason "stop"; one
	// whose max_tokens is lower is cut at it with "length". Zero: max_tokens
	// tokens are always generated.
	AnswerTokens int
	// Reply, when set, is the answer to every chat and completion request
	// (tool calls aside): one token per whitespace-separated word, ending
	// with finish_reason "stop" after the last, or "length" at a lower
	// max_tokens. Tests that need a known answer (citations) set it.
	Reply string
	// EmbeddingDims is the embedding size when the request has no
	// "dimensions". Default 8.
	EmbeddingDims int
	// APIKey, if set, must be presented as "Authorization: Bearer <APIKey>" on
	// every /v1/* request (health endpoints excepted), else 401.
	APIKey string
	// OpenModels leaves GET /v1/models and /v1/models/{id} open when APIKey
	// is set, as llama-server does (it checks the key on the inference
	// endpoints only): a wrong key is not caught by listing the models.
	OpenModels bool
	// SplitWrites makes the simulator write like llama-server's HTTP
	// library: TCP_NODELAY off on the connections it accepts (Start,
	// NewServer), and every inference answer's headers flushed in a write
	// of their own before its body (a stream's headers at once, before its
	// first token). On a kept-alive connection whose client delays its
	// ACKs, Nagle's algorithm then holds the body until the delayed ACK
	// (about 40 ms on Linux).
	SplitWrites bool
	// UsageOnLastChunk puts a stream's usage (and llama-server's timings)
	// on its last chunk with choices, the one with finish_reason, instead
	// of OpenAI's separate final chunk with "choices": []; like
	// llama-server it is sent whether or not the request asked for
	// include_usage, and other chunks carry no "usage" key.
	UsageOnLastChunk bool
	// ZeroUsageChunks, for a stream that asked for include_usage, puts
	// "usage" with every count zero (not null) on every chunk with choices,
	// as Ollama does on /v1/completions; the real counts still come in the
	// final chunk with "choices": [] (see zerousage.go).
	ZeroUsageChunks bool
	// ErrorStyle is the shape of every error body (OpenAI's by default).
	ErrorStyle ErrorStyle
	// ContextSize, when positive, is the context window in tokens: a chat
	// or completion request whose prompt has more tokens is refused with a
	// context overflow in ErrorStyle's words (400); in StyleLlama a
	// streamed one is answered 200 and then an `error:` line and
	// `data: [DONE]`, as llama-server does. Such refusals count as
	// Rejected.
	ContextSize int
}

// LlamaLike returns cfg set up to behave like llama.cpp's llama-server:
// split writes without TCP_NODELAY, usage on the last chunk, llama's error
// bodies (numeric codes, `error:` lines in streams) and /v1/models open
// while a key is required elsewhere.
func LlamaLike(cfg Config) Config {
	cfg.SplitWrites = true
	cfg.UsageOnLastChunk = true
	cfg.OpenModels = true
	cfg.ErrorStyle = StyleLlama
	return cfg
}

// FailureMode selects an injected failure.
type FailureMode int

const (
	// FailNone disables failure injection.
	FailNone FailureMode = iota
	// FailBeforeFirstToken answers HTTP Failure.Status (default 500) with
	// an error body in the simulator's ErrorStyle before any token.
	FailBeforeFirstToken
	// FailAfterFirstToken, when streaming, sends Failure.AfterTokens tokens
	// (default 1), then an SSE error event `data: {"error":{...}}` and ends the
	// stream without [DONE]. Non-streamed requests get HTTP 500.
	FailAfterFirstToken
	// FailHang accepts the request and never answers until the client goes
	// away (the request context is done); that is counted as Canceled.
	FailHang
	// FailDisconnect, when streaming, sends Failure.AfterTokens tokens
	// (default 1) then abruptly closes the connection (the client sees an
	// unexpected EOF). Non-streamed requests get the connection closed without
	// any response. The connection is hijacked; where that is not possible
	// (HTTP/2, httptest.ResponseRecorder) the handler panics with
	// http.ErrAbortHandler, which net/http servers turn into a reset.
	FailDisconnect
	// FailErrorLine, when streaming, answers 200, sends Failure.AfterTokens
	// tokens (0 = none), then llama-server's non-standard `error: {...}`
	// SSE line and `data: [DONE]`, as llama-server reports a prompt longer
	// than its context. Non-streamed requests get the error as an HTTP
	// answer.
	FailErrorLine
	// FailErrorEvent, when streaming, answers 200, sends
	// Failure.AfterTokens tokens (0 = none), then `event: error` with the
	// error body as its data, and ends without [DONE]. Non-streamed
	// requests get the error as an HTTP answer.
	FailErrorEvent
)

var failureNames = [...]string{"none", "before-first-token", "after-first-token", "hang", "disconnect", "error-line", "error-event"}

// ParseFailureMode returns the mode named s (as String writes it).
func ParseFailureMode(s string) (FailureMode, error) {
	for i, n := range failureNames {
		if n == s {
			return FailureMode(i), nil
		}
	}
	return 0, errors.New("enginesim: unknown failure mode " + strconv.Quote(s) + " (" + strings.Join(failureNames[:], ", ") + ")")
}

func (m FailureMode) String() string {
	if m >= 0 && int(m) < len(failureNames) {
		return failureNames[m]
	}
	return "FailureMode(" + strconv.Itoa(int(m)) + ")"
}

// Failure is a failure to inject into the POST endpoints
// (/v1/chat/completions, /v1/completions, /v1/embeddings).
type Failure struct {
	Mode FailureMode
	// AfterTokens is the number of tokens streamed before FailAfterFirstToken
	// or FailDisconnect strike; values < 1 mean 1. FailErrorLine and
	// FailErrorEvent take it as it is (0: the error comes first).
	AfterTokens int
	// Status is the HTTP status of the injected error (and the numeric
	// code in StyleLlama and StyleVLLM bodies); default 500, or 400 with
	// ContextOverflow. Its message and type follow it: 401 a wrong key,
	// 404 an unknown model, 429 overload, 503 a model still loading.
	Status int
	// ContextOverflow makes the injected error the engine's context
	// overflow (in the simulator's ErrorStyle).
	ContextOverflow bool
	// Count is the number of requests the failure applies to: 0 = every
	// request until cleared with SetFailure(Failure{}), N > 0 = only the next
	// N requests, after which it clears itself.
	Count int
}

// Stats is a snapshot of the simulator's counters. Requests, InFlight,
// Completed, Canceled, Failed and Rejected concern the inference endpoints
// (POST /v1/chat/completions, /v1/completions, /v1/embeddings) only.
type Stats struct {
	// Requests counts inference requests received (including rejected ones).
	Requests int64
	// InFlight is the number of inference requests being handled right now.
	InFlight int64
	// Completed counts inference requests answered fully and successfully.
	Completed int64
	// Canceled counts inference requests whose client went away (request
	// context done, or a write failed) before the request completed,
	// including requests hung by FailHang.
	Canceled int64
	// Failed counts requests an injected failure was applied to. A FailHang
	// request is counted here when it starts and in Canceled when the client
	// gives up.
	Failed int64
	// TokensSent counts tokens actually written to clients: one per streamed
	// chunk carrying content (or tool-call arguments), and the completion
	// tokens of non-streamed responses.
	TokensSent int64
	// Rejected counts inference requests answered with a 4xx error
	// (authentication, malformed request, unknown model).
	Rejected int64
}

// Sim is a simulated OpenAI-compatible engine. It is an http.Handler. All
// methods are safe for concurrent use.
type Sim struct {
	models           []string
	modelSet         map[string]struct{}
	modelsJSON       []byte
	defaultMaxTokens int
	answerTokens     int
	reply            []string
	embeddingDims    int
	authHeader       string // "Bearer <key>", empty = no auth
	openModels       bool
	splitWrites      bool
	usageLast        bool
	zeroUsage        bool
	style            ErrorStyle
	contextSize      int

	ttftNanos atomic.Int64
	tpsBits   atomic.Uint64

	failActive atomic.Bool
	failMu     sync.Mutex
	fail       Failure

	seq atomic.Uint64

	requests   atomic.Int64
	inFlight   atomic.Int64
	completed  atomic.Int64
	canceled   atomic.Int64
	failed     atomic.Int64
	tokensSent atomic.Int64
	rejected   atomic.Int64

	// Runtime LoRA adapters (lora.go): name -> path, in load order.
	loraMu      sync.RWMutex
	loras       map[string]string
	loraOrder   []string
	loraLoads   atomic.Int64
	loraUnloads atomic.Int64

	lastMu          sync.Mutex
	lastHeaders     http.Header
	lastPostHeaders http.Header
	lastBody        []byte
}

// modelsCreated is the fixed "created" timestamp reported for every model.
const modelsCreated = 1700000000

// New returns a simulator configured by cfg (defaults applied).
func New(cfg Config) *Sim {
	s := &Sim{
		defaultMaxTokens: cfg.DefaultMaxTokens,
		answerTokens:     cfg.AnswerTokens,
		reply:            strings.Fields(cfg.Reply),
		embeddingDims:    cfg.EmbeddingDims,
		modelSet:         make(map[string]struct{}),
		openModels:       cfg.OpenModels,
		splitWrites:      cfg.SplitWrites,
		usageLast:        cfg.UsageOnLastChunk,
		zeroUsage:        cfg.ZeroUsageChunks,
		style:            cfg.ErrorStyle,
		contextSize:      cfg.ContextSize,
	}
	if s.defaultMaxTokens <= 0 {
		s.defaultMaxTokens = 16
	}
	if s.embeddingDims <= 0 {
		s.embeddingDims = 8
	}
	if cfg.APIKey != "" {
		s.authHeader = "Bearer " + cfg.APIKey
	}
	for _, m := range cfg.Models {
		if _, dup := s.modelSet[m]; dup || m == "" {
			continue
		}
		s.modelSet[m] = struct{}{}
		s.models = append(s.models, m)
	}
	if len(s.models) == 0 {
		s.models = []string{"sim-model"}
		s.modelSet["sim-model"] = struct{}{}
	}
	b := []byte(`{"object":"list","data":[`)
	for i, m := range s.models {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendModel(b, m)
	}
	s.modelsJSON = append(b, "]}"...)
	s.SetTiming(cfg.TimeToFirstToken, cfg.TokensPerSecond)
	return s
}

func appendModel(b []byte, id string) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, modelsCreated, 10)
	return append(b, `,"owned_by":"enginesim"}`...)
}

// Start serves a new simulator on a loopback listener (127.0.0.1:0). It
// returns the base URL including the /v1 prefix (e.g.
// "http://127.0.0.1:PORT/v1") and a function that closes the server and all
// its connections (hung requests see their context canceled). closeFn is
// idempotent.
func Start(cfg Config) (sim *Sim, baseURL string, closeFn func(), err error) {
	sim = New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", func() {}, err
	}
	srv := sim.NewServer()
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	closeFn = func() { once.Do(func() { _ = srv.Close() }) }
	return sim, "http://" + ln.Addr().String() + "/v1", closeFn, nil
}

// Handler returns the simulator's HTTP handler (the Sim itself).
func (s *Sim) Handler() http.Handler { return s }

// Models returns the model ids served.
func (s *Sim) Models() []string { return append([]string(nil), s.models...) }

// SetFailure sets the failure injected into subsequent requests, replacing
// any previous one. SetFailure(Failure{}) clears it. Unknown modes clear it.
func (s *Sim) SetFailure(f Failure) {
	if f.Mode <= FailNone || f.Mode > FailErrorEvent {
		f = Failure{}
	}
	if f.Count < 0 {
		f.Count = 0
	}
	s.failMu.Lock()
	s.fail = f
	s.failActive.Store(f.Mode != FailNone)
	s.failMu.Unlock()
}

// PendingFailure returns the failure currently armed (Count shows how many
// requests it still applies to; 0 with a mode set means "every request").
func (s *Sim) PendingFailure() Failure {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.fail
}

// takeFailure returns the failure to apply to one request, decrementing its
// count.
func (s *Sim) takeFailure() (Failure, bool) {
	if !s.failActive.Load() {
		return Failure{}, false
	}
	s.failMu.Lock()
	f := s.fail
	if f.Mode == FailNone {
		s.failMu.Unlock()
		return f, false
	}
	if f.Count > 0 {
		s.fail.Count--
		if s.fail.Count == 0 {
			s.fail = Failure{}
			s.failActive.Store(false)
		}
	}
	s.failMu.Unlock()
	s.failed.Add(1)
	return f, true
}

// SetTiming changes the time to first token and the token rate
// (tokensPerSecond <= 0 = unlimited) for subsequent requests.
func (s *Sim) SetTiming(ttft time.Duration, tokensPerSecond float64) {
	if ttft < 0 {
		ttft = 0
	}
	if tokensPerSecond < 0 || math.IsNaN(tokensPerSecond) || math.IsInf(tokensPerSecond, 0) {
		tokensPerSecond = 0
	}
	s.ttftNanos.Store(int64(ttft))
	s.tpsBits.Store(math.Float64bits(tokensPerSecond))
}

// timing returns the current time to first token and inter-token interval
// (0 = no pacing).
func (s *Sim) timing() (ttft, interval time.Duration) {
	ttft = time.Duration(s.ttftNanos.Load())
	if tps := math.Float64frombits(s.tpsBits.Load()); tps > 0 {
		interval = time.Duration(float64(time.Second) / tps)
	}
	return ttft, interval
}

// Stats returns a snapshot of the counters.
func (s *Sim) Stats() Stats {
	return Stats{
		Requests:   s.requests.Load(),
		InFlight:   s.inFlight.Load(),
		Completed:  s.completed.Load(),
		Canceled:   s.canceled.Load(),
		Failed:     s.failed.Load(),
		TokensSent: s.tokensSent.Load(),
		Rejected:   s.rejected.Load(),
	}
}

// ResetStats zeroes every counter except InFlight.
func (s *Sim) ResetStats() {
	s.requests.Store(0)
	s.completed.Store(0)
	s.canceled.Store(0)
	s.failed.Store(0)
	s.tokensSent.Store(0)
	s.rejected.Store(0)
}

// LastHeaders returns a copy of the headers of the most recent /v1/* request
// (any method, health endpoint excepted), or nil if none was seen. Note that
// a component polling GET /v1/models in the background overwrites it; use
// LastPostHeaders to look at inference requests only.
func (s *Sim) LastHeaders() http.Header {
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	return s.lastHeaders.Clone()
}

// LastPostHeaders returns a copy of the headers of the most recent inference
// (POST) request, or nil if none was seen.
func (s *Sim) LastPostHeaders() http.Header {
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	return s.lastPostHeaders.Clone()
}

// LastBody returns a copy of the body of the most recent inference (POST)
// request that passed authentication, or nil if none was seen.
func (s *Sim) LastBody() []byte {
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	if s.lastBody == nil {
		return nil
	}
	return append([]byte{}, s.lastBody...)
}

func (s *Sim) recordHeaders(h http.Header, post bool) {
	c := h.Clone() // stored read-only; readers get their own clone
	s.lastMu.Lock()
	s.lastHeaders = c
	if post {
		s.lastPostHeaders = c
	}
	s.lastMu.Unlock()
}

func (s *Sim) recordBody(b []byte) {
	s.lastMu.Lock()
	s.lastBody = b // owned by the request that read it, never modified
	s.lastMu.Unlock()
}

func (s *Sim) authorized(r *http.Request) bool {
	if s.authHeader == "" {
		return true
	}
	got := r.Header.Get("Authorization")
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.authHeader)) == 1
}

type endpoint int

const (
	epNone endpoint = iota
	epChat
	epCompletions
	epEmbeddings
)

var (
	hdrJSON      = []string{"application/json"}
	hdrText      = []string{"text/plain; charset=utf-8"}
	hdrSSE       = []string{"text/event-stream"}
	hdrNoCache   = []string{"no-cache"}
	hdrAllowPost = []string{"POST"}
	hdrAllowGet  = []string{"GET, HEAD"}
)

// ServeHTTP implements http.Handler.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch path {
	case "/health", "/v1/health":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header()["Allow"] = hdrAllowGet
			s.writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
				msg: "Method " + r.Method + " not allowed on " + path})
			return
		}
		w.Header()["Content-Type"] = hdrText
		_, _ = io.WriteString(w, "ok")
		return
	}
	switch {
	case path == "/rerank" && r.Method == http.MethodPost:
		s.serveRerank(w, r, true)
		return
	case path == "/v1/rerank" && r.Method == http.MethodPost:
		s.serveRerank(w, r, false)
		return
	case path == "/info" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		s.serveInfo(w, r)
		return
	}
	if !strings.HasPrefix(path, "/v1/") {
		s.writeError(w, notFound(r))
		return
	}
	ep := epNone
	switch path {
	case "/v1/chat/completions":
		ep = epChat
	case "/v1/completions":
		ep = epCompletions
	case "/v1/embeddings":
		ep = epEmbeddings
	}
	if ep != epNone && r.Method == http.MethodPost {
		s.inference(w, r, ep)
		return
	}
	s.recordHeaders(r.Header, false)
	open := s.openModels && (path == "/v1/models" || strings.HasPrefix(path, "/v1/models/"))
	if !open && !s.authorized(r) {
		s.writeError(w, errUnauthorized)
		return
	}
	if s.serveLoRA(w, r, path) {
		return
	}
	switch {
	case ep != epNone:
		w.Header()["Allow"] = hdrAllowPost
		s.writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
			msg: "Method " + r.Method + " not allowed on " + path + "; use POST"})
	case path == "/v1/models" || strings.HasPrefix(path, "/v1/models/"):
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header()["Allow"] = hdrAllowGet
			s.writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
				msg: "Method " + r.Method + " not allowed on " + path})
			return
		}
		var body []byte
		if id, ok := strings.CutPrefix(path, "/v1/models/"); ok {
			var known bool
			if body, known = s.modelObject(id); !known {
				s.writeError(w, modelNotFound(id))
				return
			}
		} else {
			body = s.modelList()
		}
		s.writeJSON(w, http.StatusOK, body)
	default:
		s.writeError(w, notFound(r))
	}
}

// maxBodyBytes bounds request bodies.
const maxBodyBytes = 32 << 20

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if cl := r.ContentLength; cl >= 0 && cl <= maxBodyBytes {
		b := make([]byte, cl)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
}

func (s *Sim) inference(w http.ResponseWriter, r *http.Request, ep endpoint) {
	s.requests.Add(1)
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	s.recordHeaders(r.Header, true)
	if !s.authorized(r) {
		s.reject(w, errUnauthorized)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) || r.ContentLength > maxBodyBytes {
			s.reject(w, &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
				msg: "request body too large"})
			return
		}
		if r.Context().Err() != nil {
			s.canceled.Add(1)
			return
		}
		s.reject(w, badRequest("could not read request body: "+err.Error(), ""))
		return
	}
	s.recordBody(body)

	if ep == epEmbeddings {
		var e embReq
		if aerr := s.parseEmbeddings(body, &e); aerr != nil {
			s.reject(w, aerr)
			return
		}
		f, failing := s.takeFailure()
		if failing && s.failNonStream(w, r, f) {
			return
		}
		s.serveEmbeddings(w, r, &e)
		return
	}

	var g gen
	var aerr *apiError
	if ep == epChat {
		aerr = s.parseChat(body, &g)
	} else {
		aerr = s.parseCompletions(body, &g)
	}
	if aerr != nil {
		s.reject(w, aerr)
		return
	}
	g.id = s.seq.Add(1)
	g.created = time.Now().Unix()
	if s.contextSize > 0 && g.promptTokens > s.contextSize {
		s.rejected.Add(1)
		if g.stream && s.style == StyleLlama {
			s.serveStream(w, r, &g, Failure{Mode: FailErrorLine, ContextOverflow: true}, true)
			return
		}
		s.writeError(w, s.contextOverflow(&g))
		return
	}
	f, failing := s.takeFailure()
	if g.stream {
		s.serveStream(w, r, &g, f, failing)
		return
	}
	if failing && s.failNonStream(w, r, f) {
		return
	}
	s.serveNonStream(w, r, &g)
}

func (s *Sim) reject(w http.ResponseWriter, e *apiError) {
	s.rejected.Add(1)
	s.writeError(w, e)
}

// failNonStream applies f to a request that is answered in one piece (or to
// a streamed request before its first token). It reports whether the request
// has been dealt with.
func (s *Sim) failNonStream(w http.ResponseWriter, r *http.Request, f Failure) bool {
	switch f.Mode {
	case FailBeforeFirstToken, FailAfterFirstToken, FailErrorLine, FailErrorEvent:
		s.writeError(w, s.injected(f, nil))
		return true
	case FailHang:
		<-r.Context().Done()
		s.canceled.Add(1)
		return true
	case FailDisconnect:
		abortConn(w)
		return true
	}
	return false
}

// abortConn closes the client connection abruptly: by hijacking it where the
// server allows (HTTP/1.x), else by aborting the handler (HTTP/2 resets the
// stream).
func abortConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// sleepCtx waits d (reusing *tm) unless ctx is done first; it reports whether
// the request should go on. It never sleeps when d <= 0.
func sleepCtx(ctx context.Context, tm **time.Timer, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	if *tm == nil {
		*tm = time.NewTimer(d)
	} else {
		(*tm).Reset(d)
	}
	select {
	case <-ctx.Done():
		return false
	case <-(*tm).C:
		return true
	}
}
