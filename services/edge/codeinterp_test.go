package edge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/sandbox"
)

// busSandbox stands in for the sandbox service on the bus contract: it
// creates containers, answers get, and runs "print(1+1)" as printing 2.
type busSandbox struct {
	mu         sync.Mutex
	containers map[string]string // id -> tenant
	execs      []string          // code of each exec
	tenants    []string
}

func (h *harness) busSandbox() *busSandbox {
	h.t.Helper()
	sb := &busSandbox{containers: map[string]string{}}
	nc, err := nats.Connect(h.ns.ClientURL())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(nc.Close)
	answer := func(m *nats.Msg, status int, v any) {
		out := nats.NewMsg(m.Reply)
		out.Header.Set(sandbox.HdrStatus, map[int]string{200: "200", 404: "404"}[status])
		out.Data, _ = json.Marshal(v)
		_ = m.RespondMsg(out)
	}
	_, err = nc.QueueSubscribe(events.SandboxAll, events.SandboxQueue, func(m *nats.Msg) {
		parts := strings.Split(m.Subject, ".")
		op, tenant := parts[len(parts)-1], m.Header.Get(bridge.HdrTenant)
		sb.mu.Lock()
		defer sb.mu.Unlock()
		sb.tenants = append(sb.tenants, tenant)
		if op == sandbox.OpCreate {
			var req sandbox.CreateRequest
			_ = json.Unmarshal(m.Data, &req)
			id := "cntr_" + events.NewID()[:12]
			sb.containers[id] = tenant
			answer(m, 200, sandbox.Container{ID: id, Object: sandbox.ObjectContainer, Status: sandbox.StatusRunning, Name: req.Name, MemoryLimit: req.MemoryLimit})
			return
		}
		id := parts[4]
		if sb.containers[id] != tenant {
			answer(m, 404, sandbox.ErrorBody{Status: 404, Code: sandbox.CodeContainerNotFound, Message: "No such container: " + id})
			return
		}
		switch op {
		case sandbox.OpGet:
			answer(m, 200, sandbox.Container{ID: id, Object: sandbox.ObjectContainer, Status: sandbox.StatusRunning})
		case sandbox.OpExec:
			var req sandbox.ExecRequest
			_ = json.Unmarshal(m.Data, &req)
			sb.execs = append(sb.execs, req.Code)
			res := sandbox.ExecResult{ID: "exec_1", Object: sandbox.ObjectExec, ContainerID: id, Files: []sandbox.File{}}
			if strings.TrimSpace(req.Code) == "print(1+1)" {
				res.Stdout = "2\n"
			} else {
				res.Stderr, res.ExitCode = "SyntaxError\n", 1
			}
			answer(m, 200, res)
		}
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		h.t.Fatal(err)
	}
	return sb
}

const codePrompt = "What is 1+1? Compute it:\n```python\nprint(1+1)\n```"

func codeTool(container any) []map[string]any {
	return []map[string]any{{"type": "code_interpreter", "container": container}}
}

// The model (the engine simulator) calls the python tool with the user's
// code; the edge runs it in an auto container through the bus, gives the
// output back to the model, and answers with the code_interpreter_call and
// the model's message.
func TestResponsesCodeInterpreter(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("chat")
	sim := h.simWorker("chat")
	sb := h.busSandbox()
	secret, _ := h.tenantKey("acme")

	r := h.do("POST", "/v1/responses", secret, map[string]any{"model": "chat", "input": codePrompt,
		"tools": codeTool(map[string]any{"type": "auto", "memory_limit": "4g"})}, nil)
	if r.status != http.StatusOK {
		t.Fatalf("responses: %d %s", r.status, r.body)
	}
	var resp struct {
		Status string           `json:"status"`
		Output []map[string]any `json:"output"`
		Usage  struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Status != "completed" || len(resp.Output) != 2 {
		t.Fatalf("response: %s", r.body)
	}
	call, msg := resp.Output[0], resp.Output[1]
	sb.mu.Lock()
	var cid string
	for id := range sb.containers {
		cid = id
	}
	execs := append([]string(nil), sb.execs...)
	sb.mu.Unlock()
	if call["type"] != "code_interpreter_call" || call["status"] != "completed" || call["code"] != "print(1+1)\n" || call["container_id"] != cid ||
		!strings.HasPrefix(call["id"].(string), "ci_") {
		t.Fatalf("code_interpreter_call: %v", call)
	}
	outs, _ := call["outputs"].([]any)
	if len(outs) != 1 || outs[0].(map[string]any)["type"] != "logs" || outs[0].(map[string]any)["logs"] != "2\n" {
		t.Fatalf("outputs: %v", call["outputs"])
	}
	if msg["type"] != "message" || msg["role"] != "assistant" {
		t.Fatalf("message: %v", msg)
	}
	if len(execs) != 1 || execs[0] != "print(1+1)\n" {
		t.Fatalf("execs %q", execs)
	}
	// Two model calls, the second with the tool's result; usage is their
	// sum.
	if n := sim.requests.Load(); n != 2 {
		t.Fatalf("model calls %d, want 2", n)
	}
	var last struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(sim.last.Load().Body, &last)
	lm := last.Messages[len(last.Messages)-1]
	if lm.Role != "tool" || !strings.Contains(lm.Content.(string), "stdout:\n2\n") || !strings.Contains(lm.Content.(string), "exit_code: 0") {
		t.Fatalf("last model call's messages %+v", last.Messages)
	}
	if resp.Usage.InputTokens == 0 || resp.Usage.OutputTokens == 0 {
		t.Fatalf("usage %+v", resp.Usage)
	}

	// The same container by id: no new one.
	r = h.do("POST", "/v1/responses", secret, map[string]any{"model": "chat", "input": codePrompt, "tools": codeTool(cid)}, nil)
	if r.status != http.StatusOK || r.json(t)["output"].([]any)[0].(map[string]any)["container_id"] != cid {
		t.Fatalf("by id: %d %s", r.status, r.body)
	}
	sb.mu.Lock()
	n := len(sb.containers)
	sb.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d containers", n)
	}

	// An answer cut at max_output_tokens (the simulator answers 6 tokens
	// by itself; 4 cut it) after the code ran: the response is
	// incomplete, the code call completed, the message incomplete.
	before := sim.requests.Load()
	r = h.do("POST", "/v1/responses", secret, map[string]any{"model": "chat", "input": codePrompt, "tools": codeTool(cid), "max_output_tokens": 4}, nil)
	cut := r.json(t)
	out, _ := cut["output"].([]any)
	if r.status != http.StatusOK || cut["status"] != "incomplete" || !reflect.DeepEqual(cut["incomplete_details"], map[string]any{"reason": "max_output_tokens"}) ||
		len(out) != 2 || out[0].(map[string]any)["status"] != "completed" || out[1].(map[string]any)["status"] != "incomplete" || sim.requests.Load() != before+2 {
		t.Fatalf("cut: %d %s", r.status, r.body)
	}

	// Another tenant's container, or one that does not exist, is refused
	// before the model runs.
	other, _ := h.tenantKey("beta")
	before = sim.requests.Load()
	e := apiError(t, h.do("POST", "/v1/responses", other, map[string]any{"model": "chat", "input": codePrompt, "tools": codeTool(cid)}, nil), 404, sandbox.CodeContainerNotFound)
	if e["param"] != "tools[0].container" {
		t.Fatalf("param %v", e["param"])
	}
	apiError(t, h.do("POST", "/v1/responses", secret, map[string]any{"model": "chat", "input": codePrompt,
		"tools": codeTool(map[string]any{"type": "auto", "memory_limit": "3g"})}, nil), 400, sandbox.CodeInvalidRequest)
	apiError(t, h.do("POST", "/v1/responses", secret, map[string]any{"model": "chat", "input": codePrompt,
		"tools": codeTool(nil)}, nil), 400, "missing_required_parameter")
	if sim.requests.Load() != before {
		t.Fatal("a refused request reached the model")
	}
}

// Streamed, the code_interpreter_call's events come before the message's,
// in OpenAI's order.
func TestResponsesCodeInterpreterStream(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("chat")
	h.simWorker("chat")
	h.busSandbox()
	secret, _ := h.tenantKey("acme")
	body, _ := json.Marshal(map[string]any{"model": "chat", "input": codePrompt, "stream": true, "tools": codeTool(map[string]any{"type": "auto"})})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.url+"/v1/responses", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	evs := &responseEvents{br: bufio.NewReader(res.Body)}
	var types []string
	var completed map[string]any
	seq := -1.0
	for {
		typ, data, ok := evs.next(t)
		if !ok {
			break
		}
		if s := data["sequence_number"].(float64); s != seq+1 {
			t.Fatalf("sequence %v after %v", s, seq)
		} else {
			seq = s
		}
		types = append(types, typ)
		if typ == "response.code_interpreter_call_code.delta" && data["delta"] != "print(1+1)\n" {
			t.Fatalf("code delta %v", data)
		}
		if typ == "response.completed" {
			completed = data["response"].(map[string]any)
		}
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.code_interpreter_call.in_progress", "response.code_interpreter_call_code.delta",
		"response.code_interpreter_call_code.done", "response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed",
		"response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done",
		"response.content_part.done", "response.output_item.done", "response.completed"}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Fatalf("events\n%v\nwant\n%v", types, want)
	}
	out := completed["output"].([]any)
	if len(out) != 2 || out[0].(map[string]any)["type"] != "code_interpreter_call" || out[1].(map[string]any)["type"] != "message" {
		t.Fatalf("completed output %v", out)
	}
}

// With no sandbox service, an auto container cannot be made: 503
// sandbox_unavailable.
func TestResponsesCodeInterpreterNoSandbox(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("chat")
	h.simWorker("chat")
	secret, _ := h.tenantKey("acme")
	apiError(t, h.do("POST", "/v1/responses", secret, map[string]any{"model": "chat", "input": codePrompt,
		"tools": codeTool(map[string]any{"type": "auto"})}, nil), 503, sandbox.CodeSandboxUnavailable)
	apiError(t, h.do("POST", "/v1/responses", secret, map[string]any{"model": "chat", "input": codePrompt,
		"tools": codeTool("cntr_nothere")}, nil), 404, sandbox.CodeContainerNotFound)
}

// The Containers API is mounted with the edge's key check: 401 without a
// key, 503 sandbox_unavailable with no sandbox service, the service's
// answer with one.
func TestContainersAPIMounted(t *testing.T) {
	h := startEdge(t, nil)
	secret, _ := h.tenantKey("acme")
	apiError(t, h.do("POST", "/v1/containers", "", map[string]any{}, nil), 401, "invalid_api_key")
	apiError(t, h.do("POST", "/v1/containers", secret, map[string]any{}, nil), 503, sandbox.CodeSandboxUnavailable)
	apiError(t, h.do("GET", "/v1/containers/cntr_x/files", secret, nil, nil), 404, sandbox.CodeContainerNotFound)
	h.busSandbox()
	r := h.do("POST", "/v1/containers", secret, map[string]any{"name": "x"}, nil)
	if r.status != 200 || !strings.HasPrefix(r.json(t)["id"].(string), "cntr_") {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
}
