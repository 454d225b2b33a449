package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/guard"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sandbox"
	"github.com/aiforge/aiforge/services/edge/internal/containers"
	"github.com/aiforge/aiforge/services/edge/internal/inference"
)

// The code_interpreter tool. The model is offered one function, python
// {"code": string}; when it calls it, the edge runs the code in the
// request's container through the sandbox service, appends the result as
// the tool's message and asks the model again, for at most MaxCodeRounds
// calls (the last request forbids tools, so the model must answer). Every
// model call is its own trip through the inference path: admitted,
// limited, metered. The code's output reaches the model as a tool message,
// and admission judges it as tool output (guard.SourceTool).
//
// Rounds are not streamed from the engine: with stream true the events of
// each code_interpreter_call are sent as its code runs, and the final
// answer as one output_text delta.

// MaxCodeRounds bounds the model calls of one response that may run code;
// MaxCodeRuns bounds the code runs (a model may ask for several at once).
const (
	MaxCodeRounds = 4
	MaxCodeRuns   = 8
)

// pythonTool is the function name the model calls.
const pythonTool = "python"

// maxToolText bounds each of stdout and stderr in what the model reads.
const maxToolText = 16 << 10

var pythonToolDef = map[string]any{
	"type": "function",
	"function": map[string]any{
		"name": pythonTool,
		"description": "Runs Python 3 code in a sandbox with no network access and returns its stdout, stderr and exit code. " +
			"Files of the conversation and files the code writes are under " + sandbox.DataDir + ". State does not persist between calls except files.",
		"parameters": map[string]any{
			"type":                 "object",
			"properties":           map[string]any{"code": map[string]any{"type": "string", "description": "The Python code to run."}},
			"required":             []string{"code"},
			"additionalProperties": false,
		},
	},
}

// codeTool is a request's code_interpreter tool: a container id, or an
// auto container created on first use.
type codeTool struct {
	param       string
	containerID string
	auto        sandbox.CreateRequest
}

// parseCodeTool reads tools[i].container: "cntr_..." or {"type": "auto",
// "memory_limit", "file_ids"}.
func parseCodeTool(i int, raw json.RawMessage) (*codeTool, *contracts.Error) {
	param := fmt.Sprintf("tools[%d].container", i)
	ct := &codeTool{param: param}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, contracts.ErrBadRequest(param, contracts.CodeMissingParam, "code_interpreter needs 'container': a container id or {\"type\": \"auto\"}.")
	}
	var id string
	if json.Unmarshal(raw, &id) == nil {
		if !containers.ValidID(id) {
			return nil, containers.ErrContainerNotFound(id)
		}
		ct.containerID = id
		return ct, nil
	}
	var auto struct {
		Type        string   `json:"type"`
		MemoryLimit string   `json:"memory_limit"`
		FileIDs     []string `json:"file_ids"`
	}
	if err := json.Unmarshal(raw, &auto); err != nil {
		return nil, contracts.ErrBadRequest(param, contracts.CodeInvalidType, "Invalid 'container': a container id or {\"type\": \"auto\"}.")
	}
	if auto.Type != "auto" {
		return nil, contracts.ErrBadRequest(param+".type", contracts.CodeInvalidValue, "Invalid 'container.type': expected 'auto'.")
	}
	ct.auto = sandbox.CreateRequest{Name: "code_interpreter", MemoryLimit: auto.MemoryLimit, FileIDs: auto.FileIDs}
	if err := ct.auto.Normalize(); err != nil {
		var fe *sandbox.FieldError
		if errors.As(err, &fe) {
			return nil, contracts.ErrBadRequest(param+"."+fe.Param, fe.Code, fe.Message+".")
		}
		return nil, contracts.ErrBadRequest(param, contracts.CodeInvalidRequest, err.Error())
	}
	return ct, nil
}

// container is the tool's container, created for an auto tool on first
// use. It lives on after the response, until it expires, as OpenAI's do.
func (s *Service) container(r *http.Request, key *registry.Key, ct *codeTool) (string, *contracts.Error) {
	if ct.containerID != "" {
		return ct.containerID, nil
	}
	c, e := s.d.Sandbox.Create(r.Context(), containers.Caller{Tenant: key.Tenant, KeyID: key.ID}, ct.auto)
	if e != nil {
		return "", e
	}
	ct.containerID = c.ID
	return c.ID, nil
}

// completion is one model round's answer.
type completion struct {
	Choices []struct {
		Message struct {
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// capture is the renderer of one round: it keeps the answer instead of
// writing it.
type capture struct {
	completed bool
	status    int
	ct        string
	body      []byte
	apiErr    *contracts.Error
	err       error
}

func (c *capture) Chunk(http.ResponseWriter, []byte, bool) error {
	return errors.New("responses: a code interpreter round is not streamed")
}
func (c *capture) Done(http.ResponseWriter) {}
func (c *capture) Complete(_ http.ResponseWriter, status int, ct string, body []byte) {
	c.completed, c.status, c.ct, c.body = true, status, ct, bytes.Clone(body)
}
func (c *capture) Fail(_ http.ResponseWriter, apiErr *contracts.Error, err error, _ bool) {
	c.apiErr, c.err = apiErr, err
}

// roundWriter takes what the inference path writes itself in a round (a
// refusal, and headers), so that it can be answered as the response's
// state allows.
type roundWriter struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (rw *roundWriter) Header() http.Header { return rw.h }
func (rw *roundWriter) WriteHeader(code int) {
	if rw.status == 0 {
		rw.status = code
	}
}
func (rw *roundWriter) Write(b []byte) (int, error) {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	if rw.body.Len() < 1<<20 {
		rw.body.Write(b)
	}
	return len(b), nil
}

// copyHeaders moves a round's headers (request id, rate limits, routing)
// to the response.
func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		if k == "Content-Type" || k == "Content-Length" {
			continue
		}
		dst[k] = vs
	}
}

// codeLoop serves a request with a code_interpreter tool.
type codeLoop struct {
	s     *Service
	w     http.ResponseWriter
	r     *http.Request
	key   *registry.Key
	rw    *renderer
	tool  *codeTool
	start time.Time

	stream  bool
	started bool
	runs    int
	items   []map[string]any
	usage   chatUsage
}

// runCode is the code interpreter's path through the handler.
func (s *Service) runCode(w http.ResponseWriter, r *http.Request, base inference.Call, req *responsesRequest, chat []chatMessage,
	rw *renderer, tool *codeTool) {
	key, segs, start := base.Key, base.Segments, base.Start
	if s.d.Sandbox == nil {
		contracts.Write(w, containers.ErrSandboxUnavailable())
		return
	}
	who := containers.Caller{Tenant: key.Tenant, KeyID: key.ID}
	if tool.containerID != "" {
		// A container that does not exist is refused before the model
		// runs.
		if _, e := s.d.Sandbox.Get(r.Context(), who, tool.containerID); e != nil {
			if containers.IsClientGone(e) {
				return
			}
			e.Param = tool.param
			contracts.Write(w, e)
			return
		}
	}
	l := &codeLoop{s: s, w: w, r: r, key: key, rw: rw, tool: tool, start: start, stream: req.Stream}
	messages := make([]any, 0, len(chat)+2*MaxCodeRounds)
	for _, m := range chat {
		messages = append(messages, m)
	}
	for round := 0; ; round++ {
		body := map[string]any{"model": req.Model, "messages": messages, "stream": false, "tools": []any{pythonToolDef}}
		if round == MaxCodeRounds {
			body["tool_choice"] = "none"
		}
		if req.MaxOutputTokens != nil {
			body["max_tokens"] = *req.MaxOutputTokens
		}
		if req.Temperature != nil {
			body["temperature"] = *req.Temperature
		}
		if req.TopP != nil {
			body["top_p"] = *req.TopP
		}
		chatBody, _ := json.Marshal(body)
		p := inference.Request{Model: req.Model, InputBytes: int64(len(chatBody)), MaxTokensParam: "max_output_tokens"}
		if req.MaxOutputTokens != nil {
			p.MaxTokens = *req.MaxOutputTokens
		}
		call := base
		call.Request, call.Body, call.Segments, call.Bridge = p, chatBody, segs, maps.Clone(base.Bridge)
		cc, ok := l.generate(call)
		if !ok {
			return
		}
		if cc.Usage != nil {
			l.usage.PromptTokens += cc.Usage.PromptTokens
			l.usage.CompletionTokens += cc.Usage.CompletionTokens
		}
		var msg struct {
			Content   *string
			ToolCalls []toolCall
		}
		if len(cc.Choices) > 0 {
			msg.Content, msg.ToolCalls = cc.Choices[0].Message.Content, cc.Choices[0].Message.ToolCalls
			rw.cut(cc.Choices[0].FinishReason)
		}
		// A round cut at max_output_tokens (or by a content filter) ends
		// the response incomplete with the text it has: its tool calls,
		// if any, may be cut too and are not run.
		if len(msg.ToolCalls) == 0 || round == MaxCodeRounds || rw.incomplete != "" {
			text := ""
			if msg.Content != nil {
				text = *msg.Content
			}
			l.finish(text)
			return
		}
		messages = append(messages, map[string]any{"role": "assistant", "content": msg.Content, "tool_calls": msg.ToolCalls})
		for _, call := range msg.ToolCalls {
			content, ok := l.runCall(call)
			if !ok {
				return
			}
			messages = append(messages, map[string]any{"role": "tool", "tool_call_id": call.ID, "content": content})
			segs = append(segs, guard.Segment{Role: "tool", Source: guard.SourceTool, Text: content})
		}
	}
}

// generate runs one round through the inference path and returns the
// chat completion, or answers the failure and returns false.
func (l *codeLoop) generate(c inference.Call) (*completion, bool) {
	out := &capture{}
	rw := &roundWriter{h: http.Header{}}
	l.s.d.Inference.Generate(rw, l.r, c, out)
	if l.r.Context().Err() != nil {
		return nil, false
	}
	if !l.started {
		copyHeaders(l.w.Header(), rw.h)
	}
	switch {
	case out.apiErr != nil:
		if !l.started {
			inference.WriteError(l.w, out.apiErr, out.err)
			return nil, false
		}
		l.failEvent(out.apiErr)
		return nil, false
	case !out.completed:
		// Refused before a worker took it: the inference path wrote the
		// refusal.
		if !l.started {
			status := rw.status
			if status == 0 {
				status = http.StatusInternalServerError
			}
			l.w.Header().Set("Content-Type", "application/json")
			l.w.WriteHeader(status)
			_, _ = l.w.Write(rw.body.Bytes())
			return nil, false
		}
		e, ok := contracts.ParseError(rw.status, rw.body.Bytes())
		if !ok {
			e = contracts.ErrInternal("The model call was refused.")
		}
		l.failEvent(e)
		return nil, false
	case out.status != http.StatusOK:
		if !l.started {
			l.rw.Complete(l.w, out.status, out.ct, out.body)
			return nil, false
		}
		e, ok := contracts.ParseError(out.status, out.body)
		if !ok {
			e = contracts.ErrEngine("The engine failed to answer.")
		}
		l.failEvent(e)
		return nil, false
	}
	var cc completion
	if err := json.Unmarshal(out.body, &cc); err != nil {
		e := contracts.ErrEngine("The engine's answer is not a chat completion.")
		if !l.started {
			contracts.Write(l.w, e)
		} else {
			l.failEvent(e)
		}
		return nil, false
	}
	return &cc, true
}

// open starts the event stream: the response's preamble and the file
// search call, if any.
func (l *codeLoop) open() {
	if !l.stream || l.started {
		return
	}
	l.started = true
	l.rw.openPreamble(l.w)
}

func (l *codeLoop) failEvent(e *contracts.Error) {
	l.rw.Fail(l.w, e, nil, true)
	_ = http.NewResponseController(l.w).Flush()
}

// fail answers e as the response's state allows.
func (l *codeLoop) fail(e *contracts.Error) {
	if containers.IsClientGone(e) {
		return
	}
	if l.started {
		l.failEvent(e)
		return
	}
	contracts.Write(l.w, e)
}

// runCall runs one call of the model: the code in the container, as a
// code_interpreter_call item. It returns the tool message's content, or
// false when the response ended (the sandbox is gone, the client left).
func (l *codeLoop) runCall(call toolCall) (string, bool) {
	if call.Function.Name != pythonTool {
		return fmt.Sprintf("error: there is no tool %q; call %q with {\"code\": \"...\"}", bounded(call.Function.Name, 64), pythonTool), true
	}
	var args struct {
		Code *string `json:"code"`
	}
	if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil || args.Code == nil {
		return "error: the arguments must be a JSON object with a string 'code'", true
	}
	if l.runs >= MaxCodeRuns {
		return fmt.Sprintf("error: this response already ran code %d times, its limit; answer with what you have", MaxCodeRuns), true
	}
	l.runs++
	cid, e := l.s.container(l.r, l.key, l.tool)
	if e != nil {
		l.fail(e)
		return "", false
	}
	item := map[string]any{"id": "ci_" + events.NewID()[:24], "type": "code_interpreter_call", "status": "in_progress",
		"code": *args.Code, "container_id": cid, "outputs": nil}
	l.open()
	idx := l.rw.idx
	if l.stream {
		id := item["id"]
		l.rw.emit(l.w, "response.output_item.added", map[string]any{"output_index": idx, "item": cloneItem(item, "", "in_progress")})
		l.rw.emit(l.w, "response.code_interpreter_call.in_progress", map[string]any{"output_index": idx, "item_id": id})
		l.rw.emit(l.w, "response.code_interpreter_call_code.delta", map[string]any{"output_index": idx, "item_id": id, "delta": *args.Code})
		l.rw.emit(l.w, "response.code_interpreter_call_code.done", map[string]any{"output_index": idx, "item_id": id, "code": *args.Code})
		l.rw.emit(l.w, "response.code_interpreter_call.interpreting", map[string]any{"output_index": idx, "item_id": id})
	}
	content, status, logs, ok := l.exec(cid, *args.Code)
	if !ok {
		return "", false
	}
	item["status"] = status
	item["outputs"] = []map[string]any{}
	if logs != "" {
		item["outputs"] = []map[string]any{{"type": "logs", "logs": logs}}
	}
	if l.stream {
		l.rw.emit(l.w, "response.code_interpreter_call.completed", map[string]any{"output_index": idx, "item_id": item["id"]})
		l.rw.emit(l.w, "response.output_item.done", map[string]any{"output_index": idx, "item": item})
	}
	l.items = append(l.items, item)
	l.rw.output = append(l.rw.output, item)
	l.rw.idx++
	return content, true
}

func cloneItem(item map[string]any, code, status string) map[string]any {
	c := make(map[string]any, len(item))
	for k, v := range item {
		c[k] = v
	}
	c["code"], c["status"] = code, status
	return c
}

// exec runs code and returns what the model reads, the item's status and
// logs; false when the client left.
func (l *codeLoop) exec(cid, code string) (content, status, logs string, ok bool) {
	req := sandbox.ExecRequest{Language: sandbox.LanguagePython, Code: code}
	if err := req.Normalize(); err != nil {
		return "error: " + err.Error(), "failed", "", true
	}
	res, e := l.s.d.Sandbox.Exec(l.r.Context(), containers.Caller{Tenant: l.key.Tenant, KeyID: l.key.ID}, cid, req)
	if e != nil {
		if containers.IsClientGone(e) {
			return "", "", "", false
		}
		msg := fmt.Sprintf("error: the code could not run (%s): %s", e.Code, e.Message)
		return msg, "failed", msg, true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "exit_code: %d\n", res.ExitCode)
	if res.Stdout != "" {
		b.WriteString("stdout:\n" + bounded(res.Stdout, maxToolText) + "\n")
	}
	if res.Stderr != "" {
		b.WriteString("stderr:\n" + bounded(res.Stderr, maxToolText) + "\n")
	}
	status = "completed"
	logs = res.Stdout + res.Stderr
	if res.Error != nil {
		status = "failed"
		fmt.Fprintf(&b, "error: %s: %s\n", res.Error.Code, res.Error.Message)
		logs += res.Error.Message
	}
	return b.String(), status, logs, true
}

func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n[... cut at " + fmt.Sprint(n) + " bytes]"
}

// finish answers the model's final text after the code calls.
func (l *codeLoop) finish(text string) {
	usage := l.usage
	l.rw.usage = &usage
	if !l.stream {
		var output []map[string]any
		if l.rw.searched {
			output = append(output, l.rw.fileSearchCall("completed"))
		}
		output = append(output, l.items...)
		output = append(output, l.rw.message(text, l.rw.itemStatus()))
		l.rw.final(l.w, l.rw.finished(output, usage.asMap()))
		return
	}
	l.open()
	l.rw.openMessage(l.w)
	if text != "" {
		l.rw.text.WriteString(text)
		l.rw.emit(l.w, "response.output_text.delta", map[string]any{"output_index": l.rw.idx, "item_id": l.rw.msgID(), "content_index": 0, "delta": text, "logprobs": []any{}})
	}
	l.rw.Done(l.w)
}
