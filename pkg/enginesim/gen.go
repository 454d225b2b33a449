package enginesim

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// words is the fixed vocabulary the simulator "generates" from. All entries
// are lowercase ASCII letters, so they never need JSON escaping.
var words = [...]string{
	"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog",
	"alpha", "beta", "gamma", "delta", "signal", "packet", "stream", "token",
	"river", "mountain", "forest", "ocean", "cloud", "stone", "light", "shadow",
	"engine", "gateway", "queue", "worker", "cache", "model", "vector", "tensor",
	"apple", "orange", "lemon", "cherry", "grape", "melon", "peach", "plum",
	"north", "south", "east", "west", "early", "late", "bright", "quiet",
	"red", "green", "blue", "yellow", "silver", "golden", "simple", "steady",
	"one", "two", "three", "four", "five", "six", "seven", "eight",
}

// wordsSp holds words with a trailing space (every token but the last).
var wordsSp = func() (ws [len(words)]string) {
	for i, w := range words {
		ws[i] = w + " "
	}
	return ws
}()

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

func fnvInts(h uint64, xs []int) uint64 {
	for _, x := range xs {
		u := uint64(x)
		for k := 0; k < 8; k++ {
			h ^= u & 0xff
			h *= fnvPrime64
			u >>= 8
		}
	}
	return h
}

// splitmix64 advances *x and returns the next pseudo-random value.
func splitmix64(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func nextWord(rng *uint64) int { return int(splitmix64(rng) % uint64(len(words))) }

var asciiSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// countWords counts whitespace-separated words, like len(strings.Fields(s))
// without allocating.
func countWords(s string) int {
	n := 0
	in := false
	for i := 0; i < len(s); {
		c := s[i]
		var space bool
		if c < utf8.RuneSelf {
			space = asciiSpace[c]
			i++
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			space = unicode.IsSpace(r)
			i += size
		}
		if space {
			in = false
		} else if !in {
			in = true
			n++
		}
	}
	return n
}

// maxTokensLimit bounds max_tokens so a typo cannot make the simulator build
// a gigantic response.
const maxTokensLimit = 1 << 20

// gen describes one text/chat generation.
type gen struct {
	ep           endpoint
	id           uint64
	created      int64
	model        string
	stream       bool
	includeUsage bool
	zeroUsage    bool // chunks carry zero usage instead of null (Ollama)
	maxTokens    int
	explicitMax  bool
	seed         uint64
	promptTokens int
	tool         string // non-empty: answer with a call to this function
	// toolCode, when set, is the code of a call to a code tool (see
	// parseChat): its arguments are {"code": toolCode}.
	toolCode *string
	// reply, when set, are the words of the fixed answer (Config.Reply).
	reply []string
}

// toolWord is the deterministic word used in tool-call arguments.
func (g *gen) toolWord() string {
	rng := g.seed
	return words[nextWord(&rng)]
}

// toolPieces splits the arguments {"q":"<word>"} (or a code tool's
// {"code":"..."}) into the streamed pieces.
func (g *gen) toolPieces() [3]string {
	if g.toolCode != nil {
		code, _ := json.Marshal(*g.toolCode)
		return [3]string{`{"code":`, string(code), `}`}
	}
	return [3]string{`{"q":"`, g.toolWord(), `"}`}
}

// toolArguments is the whole arguments string of the call.
func (g *gen) toolArguments() string {
	p := g.toolPieces()
	return p[0] + p[1] + p[2]
}

// fencedCode is the content of the last fenced code block (```...```) in
// text, without the fence line's language tag, or text itself when it has
// none.
func fencedCode(text string) string {
	end := strings.LastIndex(text, "```")
	if end < 0 {
		return text
	}
	start := strings.LastIndex(text[:end], "```")
	if start < 0 {
		return text
	}
	block := text[start+3 : end]
	if nl := strings.IndexByte(block, '\n'); nl >= 0 && !strings.ContainsAny(block[:nl], " \t=()") {
		block = block[nl+1:] // a language tag such as "python"
	}
	return block
}

// isCodeTool reports whether a function's parameters have a "code"
// property.
func isCodeTool(params json.RawMessage) bool {
	var p struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(params, &p) != nil {
		return false
	}
	_, ok := p.Properties["code"]
	return ok
}

func (g *gen) completionTokens() int {
	if g.tool != "" {
		return 3
	}
	return g.maxTokens
}

func (g *gen) finishReason() string {
	switch {
	case g.tool != "":
		return "tool_calls"
	case g.explicitMax:
		return "length"
	}
	return "stop"
}

// token returns token i of the text, advancing rng (tokens must be taken in
// order).
func (g *gen) token(i int, rng *uint64) string {
	if g.reply != nil {
		if i == g.maxTokens-1 {
			return g.reply[i]
		}
		return g.reply[i] + " "
	}
	w := nextWord(rng)
	if i == g.maxTokens-1 {
		return words[w]
	}
	return wordsSp[w]
}

func (s *Sim) resolveModel(m string) (string, *apiError) {
	if m == "" {
		return s.models[0], nil
	}
	if _, ok := s.modelSet[m]; !ok {
		if _, lora := s.loraPath(m); !lora {
			return "", modelNotFound(m)
		}
	}
	return m, nil
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// msgContent is a message's content: a string, null, or an array of parts of
// which the "text" ones count.
type msgContent struct {
	text  string
	parts []string
}

func (c *msgContent) UnmarshalJSON(data []byte) error {
	switch firstByte(data) {
	case '"':
		return json.Unmarshal(data, &c.text)
	case '[':
		var ps []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(data, &ps); err != nil {
			return err
		}
		for _, p := range ps {
			if p.Type == "text" || (p.Type == "" && p.Text != "") {
				c.parts = append(c.parts, p.Text)
			}
		}
	}
	// null or anything else (e.g. an object): no text.
	return nil
}

type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string     `json:"role"`
		Content msgContent `json:"content"`
	} `json:"messages"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Tools               []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	MaxTokens     *int            `json:"max_tokens"`
}

func firstByte(b []byte) byte {
	for _, c := range b {
		if !asciiSpace[c] {
			return c
		}
	}
	return 0
}

// elemByte returns the first significant byte of the first element of a JSON
// array (']' for an empty array).
func elemByte(b []byte) byte {
	for i, c := range b {
		if c == '[' {
			return firstByte(b[i+1:])
		}
	}
	return 0
}

func malformed(err error) *apiError {
	return badRequest("We could not parse the JSON body of your request: "+err.Error(), "")
}

func (s *Sim) setMaxTokens(g *gen, mt *int, param string) *apiError {
	g.maxTokens = s.defaultMaxTokens
	if len(s.reply) > 0 {
		// A fixed reply ends by itself after its last word.
		g.reply = s.reply
		g.maxTokens = len(s.reply)
		if mt != nil && *mt >= 1 && *mt < len(s.reply) {
			g.maxTokens, g.explicitMax = *mt, true
		}
		if mt != nil && *mt < 1 {
			return badRequest(param+" must be at least 1", param)
		}
		return nil
	}
	if mt == nil {
		return nil
	}
	if *mt < 1 {
		return badRequest(param+" must be at least 1", param)
	}
	if *mt > maxTokensLimit {
		return badRequest(param+" is too large for enginesim", param)
	}
	g.maxTokens = *mt
	g.explicitMax = true
	if s.answerTokens > 0 && *mt > s.answerTokens {
		g.maxTokens, g.explicitMax = s.answerTokens, false
	}
	return nil
}

func (s *Sim) parseChat(body []byte, g *gen) *apiError {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return malformed(err)
	}
	model, aerr := s.resolveModel(req.Model)
	if aerr != nil {
		return aerr
	}
	if len(req.Messages) == 0 {
		return badRequest("messages must be a non-empty array", "messages")
	}
	g.ep = epChat
	g.model = model
	g.stream = req.Stream
	g.includeUsage = req.Stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	mt, param := req.MaxCompletionTokens, "max_completion_tokens"
	if mt == nil {
		mt, param = req.MaxTokens, "max_tokens"
	}
	if aerr := s.setMaxTokens(g, mt, param); aerr != nil {
		return aerr
	}
	h := uint64(fnvOffset64)
	n := 0
	for i := range req.Messages {
		c := &req.Messages[i].Content
		h = fnvString(h, c.text)
		n += countWords(c.text)
		for _, p := range c.parts {
			h = fnvString(h, p)
			n += countWords(p)
		}
	}
	g.seed = h
	g.promptTokens = max(n+len(req.Messages), 1)

	if len(req.Tools) > 0 {
		name := req.Tools[0].Function.Name
		use := true
		switch firstByte(req.ToolChoice) {
		case '"':
			var choice string
			if err := json.Unmarshal(req.ToolChoice, &choice); err != nil {
				return malformed(err)
			}
			use = choice != "none"
		case '{':
			var choice struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(req.ToolChoice, &choice); err != nil {
				return malformed(err)
			}
			if choice.Function.Name != "" {
				name = choice.Function.Name
			}
		}
		if use {
			if name == "" {
				return badRequest("tools[0].function.name is required", "tools")
			}
			g.tool = name
			if name == req.Tools[0].Function.Name && isCodeTool(req.Tools[0].Function.Parameters) {
				s.codeToolCall(g, &req)
			}
		}
	}
	return nil
}

// codeToolCall makes a call to a code tool (a function whose parameters
// have a "code" property, like the code interpreter the gateway offers)
// deterministic for tests: the arguments are {"code": the last fenced code
// block of the last user message, or that whole message}; once the last
// message is a tool result, the answer is text (the code ran, the model
// answers).
func (s *Sim) codeToolCall(g *gen, req *chatRequest) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == "tool" {
		g.tool = ""
		return
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == "user" {
			code := fencedCode(m.Content.text + strings.Join(m.Content.parts, ""))
			g.toolCode = &code
			return
		}
	}
	code := ""
	g.toolCode = &code
}

func (s *Sim) parseCompletions(body []byte, g *gen) *apiError {
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return malformed(err)
	}
	model, aerr := s.resolveModel(req.Model)
	if aerr != nil {
		return aerr
	}
	g.ep = epCompletions
	g.model = model
	g.stream = req.Stream
	g.includeUsage = req.Stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if aerr := s.setMaxTokens(g, req.MaxTokens, "max_tokens"); aerr != nil {
		return aerr
	}
	var err error
	h := uint64(fnvOffset64)
	n := 0
	switch firstByte(req.Prompt) {
	case '"':
		var p string
		err = json.Unmarshal(req.Prompt, &p)
		h, n = fnvString(h, p), countWords(p)
	case '[':
		switch elemByte(req.Prompt) {
		case '"':
			var ps []string
			err = json.Unmarshal(req.Prompt, &ps)
			if err == nil {
				h, n = fnvString(h, ps[0]), countWords(ps[0])
			}
		case '[':
			var ps [][]int
			err = json.Unmarshal(req.Prompt, &ps)
			if err == nil {
				h, n = fnvInts(h, ps[0]), len(ps[0])
			}
		case ']':
			return badRequest("prompt must not be empty", "prompt")
		default:
			var ps []int
			err = json.Unmarshal(req.Prompt, &ps)
			h, n = fnvInts(h, ps), len(ps)
		}
	default:
		return badRequest("prompt is required (a string, an array of strings or of token ids)", "prompt")
	}
	if err != nil {
		return malformed(err)
	}
	g.seed = h
	g.promptTokens = max(n, 1)
	return nil
}
