package inference

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"

	"github.com/aiforge/aiforge/pkg/events"
)

// Content recording: for a tenant with trace_content on
// (registry.Tenant.TraceContent), the edge's inference span carries the
// prompt and the completion as the OpenTelemetry GenAI semantic
// conventions' gen_ai.input.messages and gen_ai.output.messages
// attributes: JSON strings (the Go SDK has no structured attribute
// values) in the conventions' input and output message schemas, messages
// of {role, parts: [{type: "text", content}, {type: "tool_call", id,
// name, arguments}, {type: "tool_call_response", id, response}, ...]},
// output messages with their finish_reason. Non-text parts (images,
// audio, files) are recorded by their type only, never their data.
//
// The recording is bounded so a hostile prompt cannot blow up the
// exporter: each text (a part's content, a tool call's arguments or
// response) keeps at most MaxContentPartBytes, one attribute at most
// MaxContentBytes of text in all, at most MaxContentMessages messages
// (the latest of the prompt, the first choices of the answer) of at most
// MaxContentParts parts; what is cut ends with a marker saying how many
// bytes were left out, and dropped messages are counted in
// aiforge.content.input_messages_dropped. Only the request and response
// bodies are read: never headers, never the API key.
const (
	// MaxContentPartBytes bounds one recorded text.
	MaxContentPartBytes = 16 << 10
	// MaxContentBytes bounds all the text of one attribute.
	MaxContentBytes = 64 << 10
	// MaxContentMessages bounds the messages of one attribute.
	MaxContentMessages = 32
	// MaxContentParts bounds the parts of one message.
	MaxContentParts = 16
	// maxContentName bounds roles, names, ids and part types.
	maxContentName = 256
)

// Span attributes of the recorded content.
const (
	AttrInputMessages   = "gen_ai.input.messages"
	AttrOutputMessages  = "gen_ai.output.messages"
	AttrInputDropped    = "aiforge.content.input_messages_dropped"
	AttrOutputDropped   = "aiforge.content.output_messages_dropped"
	truncatedMarkerHead = "…[truncated "
)

// truncatedMarker ends a text cut after keeping some of it, dropped
// bytes left out.
func truncatedMarker(dropped int) string {
	return truncatedMarkerHead + strconv.Itoa(dropped) + " bytes]"
}

// part is one message part of the conventions' schemas.
type part struct {
	Type      string  `json:"type"`
	Content   *string `json:"content,omitempty"`
	ID        string  `json:"id,omitempty"`
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
	Response  *string `json:"response,omitempty"`
}

// message is an input message, or an output one with FinishReason.
type message struct {
	Role         string  `json:"role"`
	Name         string  `json:"name,omitempty"`
	Parts        []part  `json:"parts"`
	FinishReason *string `json:"finish_reason,omitempty"`
}

func strp(s string) *string { return &s }

// short bounds a role, name, id or type.
func short(s string) string {
	if len(s) <= maxContentName {
		return s
	}
	return cutUTF8(s, maxContentName)
}

// cutUTF8 is s cut to at most n bytes, not inside a UTF-8 sequence.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// texts are the recorded texts of messages, in order: the fields the
// byte bounds apply to.
func texts(ms []message) []*string {
	var out []*string
	for i := range ms {
		for j := range ms[i].Parts {
			p := &ms[i].Parts[j]
			for _, f := range []*string{p.Content, p.Arguments, p.Response} {
				if f != nil {
					out = append(out, f)
				}
			}
		}
	}
	return out
}

// bound cuts every text to MaxContentPartBytes and all of them to
// MaxContentBytes together, the budget going first to the latest texts
// (newestFirst: a prompt's last turn is the one asked) or the first ones
// (an answer's first choice). pre counts the bytes already left out of a
// text while it was assembled.
func bound(fields []*string, pre map[*string]int, newestFirst bool) {
	left := MaxContentBytes
	for i := range fields {
		f := fields[i]
		if newestFirst {
			f = fields[len(fields)-1-i]
		}
		keep := min(MaxContentPartBytes, left)
		d := pre[f]
		if len(*f) <= keep && d == 0 {
			left -= len(*f)
			continue
		}
		kept := cutUTF8(*f, keep)
		*f = kept + truncatedMarker(len(*f)-len(kept)+d)
		left -= len(kept)
	}
}

// encode is ms as the attribute's JSON string.
func encode(ms []message) string {
	if ms == nil {
		ms = []message{}
	}
	b, _ := json.Marshal(ms)
	return string(b)
}

// wireMessage is a chat message of a request.
type wireMessage struct {
	Role       string          `json:"role"`
	Name       string          `json:"name"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// contentParts reads an OpenAI content field (a string, an array of parts
// or null) as text parts, other parts by type only.
func contentParts(raw json.RawMessage) []part {
	if isNull(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []part{{Type: "text", Content: &s}}
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) != nil {
		return nil
	}
	var out []part
	for _, r := range arr {
		if len(out) == MaxContentParts {
			break
		}
		var p struct {
			Type    string `json:"type"`
			Text    string `json:"text"`
			Refusal string `json:"refusal"`
		}
		if json.Unmarshal(r, &p) != nil {
			continue
		}
		switch p.Type {
		case "text", "input_text", "output_text":
			out = append(out, part{Type: "text", Content: strp(p.Text)})
		case "refusal":
			out = append(out, part{Type: "text", Content: strp(p.Refusal)})
		default: // image_url, input_audio, file...: the type, never the data
			out = append(out, part{Type: short(p.Type)})
		}
	}
	return out
}

// InputMessages is the recorded prompt of an engine request body for
// endpoint (chat messages, a completion's prompt) and how many earlier
// messages were left out; ok is false for other endpoints or bodies.
func InputMessages(endpoint string, body []byte) (ms []message, dropped int, ok bool) {
	switch endpoint {
	case events.EndpointChatCompletions:
		var req struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if json.Unmarshal(body, &req) != nil {
			return nil, 0, false
		}
		raw := req.Messages
		if len(raw) > MaxContentMessages {
			dropped = len(raw) - MaxContentMessages
			raw = raw[dropped:]
		}
		for _, r := range raw {
			var w wireMessage
			if json.Unmarshal(r, &w) != nil {
				continue
			}
			m := message{Role: short(w.Role), Name: short(w.Name), Parts: contentParts(w.Content)}
			if w.Role == "tool" {
				var resp string
				for _, p := range m.Parts {
					if p.Content != nil {
						resp += *p.Content
					}
				}
				m.Parts = []part{{Type: "tool_call_response", ID: short(w.ToolCallID), Response: &resp}}
			}
			for _, tc := range w.ToolCalls {
				if len(m.Parts) >= MaxContentParts {
					break
				}
				m.Parts = append(m.Parts, part{Type: "tool_call", ID: short(tc.ID), Name: short(tc.Function.Name), Arguments: strp(tc.Function.Arguments)})
			}
			if m.Parts == nil {
				m.Parts = []part{}
			}
			ms = append(ms, m)
		}
	case events.EndpointCompletions:
		var req struct {
			Prompt json.RawMessage `json:"prompt"`
		}
		if json.Unmarshal(body, &req) != nil {
			return nil, 0, false
		}
		var one string
		var many []string
		switch {
		case json.Unmarshal(req.Prompt, &one) == nil:
			many = []string{one}
		case json.Unmarshal(req.Prompt, &many) == nil:
		default: // token arrays: no text to record
			return nil, 0, false
		}
		if len(many) > MaxContentParts {
			many = many[:MaxContentParts]
		}
		m := message{Role: "user", Parts: []part{}}
		for _, s := range many {
			m.Parts = append(m.Parts, part{Type: "text", Content: strp(s)})
		}
		ms = []message{m}
	default:
		return nil, 0, false
	}
	bound(texts(ms), nil, true)
	return ms, dropped, true
}

// inputAttributes are the span attributes of a request's prompt.
func inputAttributes(endpoint string, body []byte) []attribute.KeyValue {
	ms, dropped, ok := InputMessages(endpoint, body)
	if !ok {
		return nil
	}
	attrs := []attribute.KeyValue{attribute.String(AttrInputMessages, encode(ms))}
	if dropped > 0 {
		attrs = append(attrs, attribute.Int(AttrInputDropped, dropped))
	}
	return attrs
}

// choiceText is a choice's text as it is assembled, bounded: past
// MaxContentPartBytes only the dropped bytes are counted.
type choiceText struct {
	text    []byte
	dropped int
}

func (c *choiceText) add(s string) {
	if room := MaxContentPartBytes - len(c.text); room > 0 {
		kept := cutUTF8(s, room)
		c.text = append(c.text, kept...)
		s = s[len(kept):]
	}
	c.dropped += len(s)
}

// value is the text kept, noting in pre how much was dropped.
func (c *choiceText) value(pre map[*string]int) *string {
	v := strp(string(c.text))
	if c.dropped > 0 {
		pre[v] = c.dropped
	}
	return v
}

type toolCallAcc struct {
	id, name string
	args     choiceText
}

type choiceAcc struct {
	role, finish string
	text         choiceText
	calls        []*toolCallAcc
}

// OutputRecorder assembles the answer of a request, streamed or not, for
// gen_ai.output.messages, within the same bounds as the prompt.
type OutputRecorder struct {
	endpoint string
	choices  []*choiceAcc // by index, at most MaxContentMessages
	dropped  int          // choices with an index past MaxContentMessages
	seen     map[int]bool
}

// NewOutputRecorder records the answer of a request to endpoint; nil for
// an endpoint whose content is not recorded.
func NewOutputRecorder(endpoint string) *OutputRecorder {
	switch endpoint {
	case events.EndpointChatCompletions, events.EndpointCompletions:
		return &OutputRecorder{endpoint: endpoint}
	}
	return nil
}

func (o *OutputRecorder) choice(i int) *choiceAcc {
	if i < 0 {
		return nil
	}
	if i >= MaxContentMessages {
		if o.seen == nil {
			o.seen = map[int]bool{}
		}
		if !o.seen[i] && len(o.seen) < 1<<16 {
			o.seen[i] = true
			o.dropped++
		}
		return nil
	}
	for len(o.choices) <= i {
		o.choices = append(o.choices, nil)
	}
	if o.choices[i] == nil {
		o.choices[i] = &choiceAcc{}
	}
	return o.choices[i]
}

func (c *choiceAcc) call(i int, id, name, args string) {
	if i < 0 || i >= MaxContentParts {
		return
	}
	for len(c.calls) <= i {
		c.calls = append(c.calls, nil)
	}
	if c.calls[i] == nil {
		c.calls[i] = &toolCallAcc{}
	}
	tc := c.calls[i]
	if id != "" {
		tc.id = short(id)
	}
	if name != "" {
		tc.name = short(tc.name + name)
	}
	tc.args.add(args)
}

// wireChoice is a choice of a completion or of a stream chunk (message
// or delta; text for completions).
type wireChoice struct {
	Index   int      `json:"index"`
	Message *wireMsg `json:"message"`
	Delta   *wireMsg `json:"delta"`
	Text    *string  `json:"text"`
	Finish  *string  `json:"finish_reason"`
}

type wireMsg struct {
	Role      string  `json:"role"`
	Content   *string `json:"content"`
	Refusal   *string `json:"refusal"`
	ToolCalls []struct {
		Index    *int   `json:"index"`
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func (o *OutputRecorder) read(chs []wireChoice) {
	for _, ch := range chs {
		c := o.choice(ch.Index)
		if c == nil {
			continue
		}
		if ch.Finish != nil && *ch.Finish != "" {
			c.finish = short(*ch.Finish)
		}
		if ch.Text != nil {
			c.text.add(*ch.Text)
		}
		m := ch.Message
		if m == nil {
			m = ch.Delta
		}
		if m == nil {
			continue
		}
		if m.Role != "" {
			c.role = short(m.Role)
		}
		if m.Content != nil {
			c.text.add(*m.Content)
		}
		if m.Refusal != nil {
			c.text.add(*m.Refusal)
		}
		for j, tc := range m.ToolCalls {
			idx := j
			if tc.Index != nil {
				idx = *tc.Index
			}
			c.call(idx, tc.ID, tc.Function.Name, tc.Function.Arguments)
		}
	}
}

// Chunk reads one streamed payload.
func (o *OutputRecorder) Chunk(payload []byte) {
	var ch struct {
		Choices []wireChoice `json:"choices"`
	}
	if json.Unmarshal(payload, &ch) == nil {
		o.read(ch.Choices)
	}
}

// Body reads an answer that was not streamed.
func (o *OutputRecorder) Body(body []byte) {
	o.Chunk(body)
}

// Messages is the answer assembled so far; failed marks choices without a
// finish reason as ended by an error.
func (o *OutputRecorder) Messages(failed bool) (ms []message, dropped int) {
	pre := map[*string]int{}
	for _, c := range o.choices {
		if c == nil {
			continue
		}
		m := message{Role: orDefault(c.role, "assistant"), Parts: []part{}}
		if len(c.text.text) > 0 || c.text.dropped > 0 || len(c.calls) == 0 {
			m.Parts = append(m.Parts, part{Type: "text", Content: c.text.value(pre)})
		}
		for _, tc := range c.calls {
			if tc != nil {
				m.Parts = append(m.Parts, part{Type: "tool_call", ID: tc.id, Name: tc.name, Arguments: tc.args.value(pre)})
			}
		}
		finish := c.finish
		if finish == "" {
			finish = "stop"
			if failed {
				finish = "error"
			}
		}
		m.FinishReason = &finish
		ms = append(ms, m)
	}
	bound(texts(ms), pre, false)
	return ms, o.dropped
}

// Attributes are the span attributes of the answer.
func (o *OutputRecorder) Attributes(failed bool) []attribute.KeyValue {
	ms, dropped := o.Messages(failed)
	attrs := []attribute.KeyValue{attribute.String(AttrOutputMessages, encode(ms))}
	if dropped > 0 {
		attrs = append(attrs, attribute.Int(AttrOutputDropped, dropped))
	}
	return attrs
}
