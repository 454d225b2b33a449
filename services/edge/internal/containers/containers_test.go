package containers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sandbox"
)

const (
	secretA = "sk-af-0123456789abcdef-secretA"
	secretB = "sk-af-fedcba9876543210-secretB"
)

type keys map[string]registry.Key

func (k keys) Key(id string) *registry.Key {
	if v, ok := k[id]; ok {
		return &v
	}
	return nil
}

func keyOf(t *testing.T, secret, tenant string, rpm int64) registry.Key {
	t.Helper()
	id, ok := registry.KeyIDOf(secret)
	if !ok {
		t.Fatalf("no key id in %q", secret)
	}
	k := registry.Key{ID: id, Tenant: tenant, Hash: registry.HashSecret(secret), Models: []string{"*"}}
	k.RPM = rpm
	return k
}

// fakeSandbox stands in for the sandbox service on the bus subjects of the
// contract: it keeps containers per tenant and records what it was sent.
type fakeSandbox struct {
	t       *testing.T
	nc      *nats.Conn
	objects objstore.Store

	mu         sync.Mutex
	containers map[string]sandbox.Container // by tenant+"/"+id
	tenants    []string                     // the tenant header of each request
	uploads    map[string][]byte            // upload bytes read, by name
	// handle, when set, answers an op before the default does; it returns
	// false to fall through.
	handle func(op string, m *nats.Msg) bool
}

func startFake(t *testing.T, srvURL string, objects objstore.Store) *fakeSandbox {
	t.Helper()
	nc, err := nats.Connect(srvURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f := &fakeSandbox{t: t, nc: nc, objects: objects, containers: map[string]sandbox.Container{}, uploads: map[string][]byte{}}
	if _, err := nc.QueueSubscribe(events.SandboxAll, events.SandboxQueue, f.serve); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

func reply(m *nats.Msg, status int, v any) {
	b, _ := json.Marshal(v)
	out := nats.NewMsg(m.Reply)
	out.Header.Set(sandbox.HdrStatus, strconv.Itoa(status))
	out.Data = b
	_ = m.RespondMsg(out)
}

func replyErr(m *nats.Msg, status int, code, param, msg string) {
	reply(m, status, sandbox.ErrorBody{Status: status, Code: code, Param: param, Message: msg})
}

func (f *fakeSandbox) serve(m *nats.Msg) {
	parts := strings.Split(m.Subject, ".")
	op := parts[len(parts)-1]
	tenant := m.Header.Get(bridge.HdrTenant)
	f.mu.Lock()
	f.tenants = append(f.tenants, tenant+"/"+m.Header.Get(bridge.HdrKeyID))
	h := f.handle
	f.mu.Unlock()
	if h != nil && h(op, m) {
		return
	}
	id := ""
	if len(parts) == 6 && parts[3] == "c" {
		id = parts[4]
	}
	f.mu.Lock()
	c, found := f.containers[tenant+"/"+id]
	f.mu.Unlock()
	if id != "" && !found {
		replyErr(m, 404, sandbox.CodeContainerNotFound, "", "No such container: "+id)
		return
	}
	switch op {
	case sandbox.OpCreate:
		var req sandbox.CreateRequest
		_ = json.Unmarshal(m.Data, &req)
		c := sandbox.Container{ID: "cntr_" + events.NewID()[:12], Object: sandbox.ObjectContainer, CreatedAt: time.Now().Unix(), Status: sandbox.StatusRunning,
			ExpiresAfter: *req.ExpiresAfter, Name: req.Name, MemoryLimit: req.MemoryLimit, NetworkPolicy: req.NetworkPolicy}
		f.mu.Lock()
		f.containers[tenant+"/"+c.ID] = c
		f.mu.Unlock()
		reply(m, 200, c)
	case sandbox.OpList:
		var req sandbox.ListRequest
		_ = json.Unmarshal(m.Data, &req)
		out := sandbox.List[sandbox.Container]{Object: "list"}
		f.mu.Lock()
		for k, c := range f.containers {
			if strings.HasPrefix(k, tenant+"/") && (req.Name == "" || c.Name == req.Name) {
				out.Data = append(out.Data, c)
			}
		}
		f.mu.Unlock()
		reply(m, 200, out)
	case sandbox.OpGet:
		reply(m, 200, c)
	case sandbox.OpDelete:
		f.mu.Lock()
		delete(f.containers, tenant+"/"+id)
		f.mu.Unlock()
		reply(m, 200, sandbox.Deleted{ID: id, Object: sandbox.ObjectContainerDeleted, Deleted: true})
	case sandbox.OpFileCreate:
		var req sandbox.FileRequest
		_ = json.Unmarshal(m.Data, &req)
		if req.ObjectKey != "" {
			if !strings.HasPrefix(req.ObjectKey, "containers/"+tenant+"/"+id+"/in/") {
				replyErr(m, 400, sandbox.CodeInvalidRequest, "object_key", "not this container's upload")
				return
			}
			rc, _, err := f.objects.Get(context.Background(), req.ObjectKey)
			if err != nil {
				replyErr(m, 500, sandbox.CodeSandboxCrashed, "", err.Error())
				return
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			f.mu.Lock()
			f.uploads[req.Name] = b
			f.mu.Unlock()
		}
		p, _ := sandbox.CleanPath(req.Name)
		if req.FileID != "" {
			p = sandbox.DataDir + "/" + req.FileID
		}
		reply(m, 200, sandbox.File{ID: "cfile_1", Object: sandbox.ObjectContainerFile, ContainerID: id, Path: p, Bytes: req.Bytes, Source: sandbox.SourceUser})
	case sandbox.OpFileContent:
		var req sandbox.FileRequest
		_ = json.Unmarshal(m.Data, &req)
		key := sandbox.ContentKey(tenant, id, "tok1")
		if _, err := f.objects.Put(context.Background(), key, strings.NewReader("a,b\n1,2\n"), -1, ""); err != nil {
			replyErr(m, 500, sandbox.CodeSandboxCrashed, "", err.Error())
			return
		}
		reply(m, 200, sandbox.ContentReply{File: sandbox.File{ID: req.ID, Object: sandbox.ObjectContainerFile, ContainerID: id, Path: "/mnt/data/out.csv", Bytes: 8}, ObjectKey: key})
	case sandbox.OpExec:
		var req sandbox.ExecRequest
		_ = json.Unmarshal(m.Data, &req)
		res := sandbox.ExecResult{ID: "exec_1", Object: sandbox.ObjectExec, ContainerID: id, Stdout: "2\n", ExitCode: 0, Files: []sandbox.File{}}
		if stream := m.Header.Get(sandbox.HdrStream); stream != "" {
			for _, ch := range []sandbox.ExecChunk{{Type: sandbox.EventStdout, Data: "1\n"}, {Type: sandbox.EventStderr, Data: "warn\n"}, {Type: sandbox.EventStdout, Data: "2\n"}} {
				out := nats.NewMsg(stream)
				out.Header.Set(sandbox.HdrEvent, ch.Type)
				out.Data, _ = json.Marshal(ch)
				_ = f.nc.PublishMsg(out)
			}
			out := nats.NewMsg(stream)
			out.Header.Set(sandbox.HdrEvent, sandbox.EventDone)
			out.Header.Set(sandbox.HdrStatus, "200")
			res.Stdout, res.Stderr = "1\n2\n", "warn\n"
			out.Data, _ = json.Marshal(res)
			_ = f.nc.PublishMsg(out)
			return
		}
		reply(m, 200, res)
	default:
		replyErr(m, 400, sandbox.CodeInvalidRequest, "", "unknown op "+op)
	}
}

type env struct {
	t       *testing.T
	url     string
	objects objstore.Store
	fake    *fakeSandbox
	srvURL  string
}

func setup(t *testing.T, withFake bool, mutate func(*Deps, *ClientConfig)) *env {
	t.Helper()
	srv, nc := natstest.JetStream(t)
	objs, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rates, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: events.BucketRateLimits})
	if err != nil {
		t.Fatal(err)
	}
	ka, kb := keyOf(t, secretA, "acme", 0), keyOf(t, secretB, "beta", 2)
	cc := ClientConfig{}
	d := Deps{Keys: keys{ka.ID: ka, kb.ID: kb}, Objects: objs, Rates: rates}
	if mutate != nil {
		mutate(&d, &cc)
	}
	d.Client = NewClient(nc, cc)
	mux := http.NewServeMux()
	New(d).Routes(mux)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	e := &env{t: t, url: hs.URL, objects: objs, srvURL: srv.ClientURL()}
	if withFake {
		e.fake = startFake(t, srv.ClientURL(), objs)
	}
	return e
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return m
}

func (e *env) do(method, path, secret string, body any) resp {
	e.t.Helper()
	var rd io.Reader
	ct := ""
	switch b := body.(type) {
	case nil:
	case *multipartBody:
		rd, ct = &b.buf, b.ct
	default:
		raw, _ := json.Marshal(b)
		rd, ct = bytes.NewReader(raw), "application/json"
	}
	req, _ := http.NewRequest(method, e.url+path, rd)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

func wantError(t *testing.T, r resp, status int, code, param string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	var body struct {
		Error struct {
			Code    *string `json:"code"`
			Param   *string `json:"param"`
			Type    string  `json:"type"`
			Message string  `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || body.Error.Code == nil || body.Error.Message == "" {
		t.Fatalf("not an OpenAI error: %s", r.body)
	}
	if *body.Error.Code != code {
		t.Fatalf("code %q, want %q: %s", *body.Error.Code, code, r.body)
	}
	got := ""
	if body.Error.Param != nil {
		got = *body.Error.Param
	}
	if got != param {
		t.Fatalf("param %q, want %q: %s", got, param, r.body)
	}
}

type multipartBody struct {
	buf bytes.Buffer
	ct  string
}

func fileBody(name string, content []byte) *multipartBody {
	b := &multipartBody{}
	mw := multipart.NewWriter(&b.buf)
	w, _ := mw.CreateFormFile("file", name)
	_, _ = w.Write(content)
	_ = mw.Close()
	b.ct = mw.FormDataContentType()
	return b
}

func TestContainerLifecycle(t *testing.T) {
	e := setup(t, true, nil)
	r := e.do("POST", "/v1/containers", secretA, map[string]any{"name": "work", "memory_limit": "4g"})
	if r.status != 200 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	c := r.json(t)
	id := c["id"].(string)
	if c["object"] != "container" || c["memory_limit"] != "4g" || c["expires_after"].(map[string]any)["minutes"].(float64) != sandbox.DefaultExpiresMinutes {
		t.Fatalf("create: defaults not filled before the bus: %s", r.body)
	}
	if r := e.do("GET", "/v1/containers/"+id, secretA, nil); r.status != 200 || r.json(t)["id"] != id {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/v1/containers?name=work&limit=5", secretA, nil)
	if r.status != 200 || len(r.json(t)["data"].([]any)) != 1 || r.json(t)["object"] != "list" {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	// Another tenant sees neither the container nor it in a list.
	wantError(t, e.do("GET", "/v1/containers/"+id, secretB, nil), 404, sandbox.CodeContainerNotFound, "")
	if r := e.do("GET", "/v1/containers", secretB, nil); r.status != 200 || len(r.json(t)["data"].([]any)) != 0 {
		t.Fatalf("other tenant's list: %d %s", r.status, r.body)
	}
	r = e.do("DELETE", "/v1/containers/"+id, secretA, nil)
	if r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if d := r.json(t); d["id"] != id || d["object"] != "container.deleted" || d["deleted"] != true {
		t.Fatalf("delete: %s", r.body)
	}
	wantError(t, e.do("GET", "/v1/containers/"+id, secretA, nil), 404, sandbox.CodeContainerNotFound, "")

	// The tenant and key of each caller went in the headers.
	ka, _ := registry.KeyIDOf(secretA)
	kb, _ := registry.KeyIDOf(secretB)
	e.fake.mu.Lock()
	defer e.fake.mu.Unlock()
	want := []string{"acme/" + ka, "acme/" + ka, "acme/" + ka, "beta/" + kb, "beta/" + kb, "acme/" + ka, "acme/" + ka}
	if strings.Join(e.fake.tenants, ",") != strings.Join(want, ",") {
		t.Fatalf("tenant headers %v, want %v", e.fake.tenants, want)
	}
}

func TestValidationBeforeTheBus(t *testing.T) {
	e := setup(t, true, nil)
	wantError(t, e.do("POST", "/v1/containers", secretA, map[string]any{"memory_limit": "2g"}), 400, sandbox.CodeInvalidRequest, "memory_limit")
	wantError(t, e.do("POST", "/v1/containers", secretA, map[string]any{"expires_after": map[string]any{"anchor": "last_active_at", "minutes": 0}}), 400, sandbox.CodeInvalidRequest, "expires_after.minutes")
	wantError(t, e.do("POST", "/v1/containers", secretA, map[string]any{"network_policy": map[string]any{"type": "allowlist", "allowed_domains": []string{"169.254.169.254"}}}), 400, sandbox.CodeDomainNotAllowed, "network_policy.allowed_domains[0]")
	wantError(t, e.do("POST", "/v1/containers/cntr_x/exec", secretA, map[string]any{"code": "print(1)"}), 400, "missing_required_parameter", "language")
	wantError(t, e.do("POST", "/v1/containers/cntr_x/exec", secretA, map[string]any{"language": "ruby", "code": "1"}), 400, sandbox.CodeInvalidRequest, "language")
	wantError(t, e.do("POST", "/v1/containers/cntr_x/exec", secretA, map[string]any{"language": "python", "code": "1", "timeout_ms": 11 * 60 * 1000}), 400, sandbox.CodeInvalidRequest, "timeout_ms")
	wantError(t, e.do("GET", "/v1/containers?limit=101", secretA, nil), 400, "invalid_request", "limit")
	wantError(t, e.do("GET", "/v1/containers/cntr_x", "sk-nope", nil), 401, "invalid_api_key", "")
	// A path id that cannot be a container's is not found, without a call.
	wantError(t, e.do("GET", "/v1/containers/a.b*", secretA, nil), 404, sandbox.CodeContainerNotFound, "")
	e.fake.mu.Lock()
	defer e.fake.mu.Unlock()
	if len(e.fake.tenants) != 0 {
		t.Fatalf("refused requests reached the bus: %v", e.fake.tenants)
	}
}

// The service's ErrorBody comes back with its status, code and param; a
// reply that is not the contract is a 502.
func TestErrorBodyMapping(t *testing.T) {
	e := setup(t, true, nil)
	c := e.do("POST", "/v1/containers", secretA, map[string]any{}).json(t)
	id := c["id"].(string)
	e.fake.handle = func(op string, m *nats.Msg) bool {
		switch op {
		case sandbox.OpExec:
			replyErr(m, 409, sandbox.CodeSandboxBusy, "", "Another exec is running in this container.")
		case sandbox.OpFileGet:
			replyErr(m, 400, sandbox.CodeInvalidPath, "path", "climbs with ..")
		case sandbox.OpFileList:
			_ = m.Respond([]byte("not json"))
		case sandbox.OpCreate:
			replyErr(m, 429, sandbox.CodeSandboxCapacity, "", "full")
		default:
			return false
		}
		return true
	}
	wantError(t, e.do("POST", "/v1/containers/"+id+"/exec", secretA, map[string]any{"language": "python", "code": "1"}), 409, sandbox.CodeSandboxBusy, "")
	wantError(t, e.do("GET", "/v1/containers/"+id+"/files/cfile_1", secretA, nil), 400, sandbox.CodeInvalidPath, "path")
	wantError(t, e.do("GET", "/v1/containers/"+id+"/files", secretA, nil), 502, CodeSandboxBadReply, "")
	r := e.do("POST", "/v1/containers", secretA, map[string]any{})
	wantError(t, r, 429, sandbox.CodeSandboxCapacity, "")
	if r.json(t)["error"].(map[string]any)["type"] != "rate_limit_error" {
		t.Fatalf("429 type: %s", r.body)
	}
}

// With no sandbox service on the bus, create and list are 503
// sandbox_unavailable and a container's calls 404 container_not_found.
func TestNoResponders(t *testing.T) {
	e := setup(t, false, nil)
	wantError(t, e.do("POST", "/v1/containers", secretA, map[string]any{}), 503, sandbox.CodeSandboxUnavailable, "")
	wantError(t, e.do("GET", "/v1/containers", secretA, nil), 503, sandbox.CodeSandboxUnavailable, "")
	wantError(t, e.do("GET", "/v1/containers/cntr_gone", secretA, nil), 404, sandbox.CodeContainerNotFound, "")
	wantError(t, e.do("POST", "/v1/containers/cntr_gone/exec", secretA, map[string]any{"language": "bash", "code": "echo"}), 404, sandbox.CodeContainerNotFound, "")
	wantError(t, e.do("POST", "/v1/containers/cntr_gone/exec", secretA, map[string]any{"language": "bash", "code": "echo", "stream": true}), 404, sandbox.CodeContainerNotFound, "")
	wantError(t, e.do("POST", "/v1/containers/cntr_gone/files", secretA, fileBody("a.txt", []byte("x"))), 404, sandbox.CodeContainerNotFound, "")
}

func TestExec(t *testing.T) {
	e := setup(t, true, nil)
	id := e.do("POST", "/v1/containers", secretA, map[string]any{}).json(t)["id"].(string)
	r := e.do("POST", "/v1/containers/"+id+"/exec", secretA, map[string]any{"language": "python", "code": "print(1+1)"})
	if r.status != 200 || r.json(t)["stdout"] != "2\n" || r.json(t)["object"] != sandbox.ObjectExec {
		t.Fatalf("exec: %d %s", r.status, r.body)
	}
}

type sseEvent struct {
	event string
	data  map[string]any
}

func readEvents(t *testing.T, body []byte) ([]sseEvent, bool) {
	t.Helper()
	var out []sseEvent
	done := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	ev := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev = strings.TrimPrefix(line, "event: ")
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: "):
			var m map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
			out = append(out, sseEvent{ev, m})
		}
	}
	return out, done
}

// A streamed exec relays the chunks in order as SSE events, then the
// result, then [DONE].
func TestExecStream(t *testing.T) {
	e := setup(t, true, nil)
	id := e.do("POST", "/v1/containers", secretA, map[string]any{}).json(t)["id"].(string)
	r := e.do("POST", "/v1/containers/"+id+"/exec", secretA, map[string]any{"language": "python", "code": "print(1)", "stream": true})
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %v %s", r.status, r.header, r.body)
	}
	evs, done := readEvents(t, r.body)
	if !done || len(evs) != 4 {
		t.Fatalf("events %v done %v: %s", evs, done, r.body)
	}
	want := [][2]string{{"exec.stdout", "1\n"}, {"exec.stderr", "warn\n"}, {"exec.stdout", "2\n"}}
	for i, w := range want {
		if evs[i].event != w[0] || evs[i].data["type"] != w[0] || evs[i].data["data"] != w[1] {
			t.Fatalf("event %d = %v, want %v", i, evs[i], w)
		}
	}
	last := evs[3]
	if last.event != "exec.completed" || last.data["type"] != "exec.completed" || last.data["stdout"] != "1\n2\n" || last.data["exit_code"].(float64) != 0 {
		t.Fatalf("last event %v", last)
	}

	// A refusal answered to the request before any output is a plain
	// HTTP error; one after output is an error event.
	e.fake.handle = func(op string, m *nats.Msg) bool {
		if op != sandbox.OpExec {
			return false
		}
		replyErr(m, 409, sandbox.CodeSandboxBusy, "", "busy")
		return true
	}
	wantError(t, e.do("POST", "/v1/containers/"+id+"/exec", secretA, map[string]any{"language": "python", "code": "1", "stream": true}), 409, sandbox.CodeSandboxBusy, "")
	e.fake.handle = func(op string, m *nats.Msg) bool {
		if op != sandbox.OpExec {
			return false
		}
		stream := m.Header.Get(sandbox.HdrStream)
		ack := nats.NewMsg(m.Reply)
		ack.Header.Set(sandbox.HdrStatus, "200")
		_ = m.RespondMsg(ack)
		out := nats.NewMsg(stream)
		out.Header.Set(sandbox.HdrEvent, sandbox.EventStdout)
		out.Data = []byte(`{"type":"exec.stdout","data":"x"}`)
		_ = e.fake.nc.PublishMsg(out)
		out = nats.NewMsg(stream)
		out.Header.Set(sandbox.HdrEvent, sandbox.EventError)
		out.Header.Set(sandbox.HdrStatus, "500")
		out.Data, _ = json.Marshal(sandbox.ErrorBody{Status: 500, Code: sandbox.CodeMemoryLimit, Message: "killed"})
		_ = e.fake.nc.PublishMsg(out)
		return true
	}
	r = e.do("POST", "/v1/containers/"+id+"/exec", secretA, map[string]any{"language": "python", "code": "1", "stream": true})
	evs, done = readEvents(t, r.body)
	if r.status != 200 || !done || len(evs) != 2 || evs[1].event != "error" || evs[1].data["code"] != sandbox.CodeMemoryLimit {
		t.Fatalf("error mid-stream: %d %v %s", r.status, evs, r.body)
	}
}

// An exec the service never answers ends at its timeout plus the margin
// with 504.
func TestExecTimeout(t *testing.T) {
	e := setup(t, true, func(_ *Deps, cc *ClientConfig) { cc.ExecMargin = 50 * time.Millisecond })
	id := e.do("POST", "/v1/containers", secretA, map[string]any{}).json(t)["id"].(string)
	e.fake.handle = func(op string, m *nats.Msg) bool { return op == sandbox.OpExec }
	wantError(t, e.do("POST", "/v1/containers/"+id+"/exec", secretA, map[string]any{"language": "python", "code": "1", "timeout_ms": 1}), 504, CodeSandboxTimeout, "")
	wantError(t, e.do("POST", "/v1/containers/"+id+"/exec", secretA, map[string]any{"language": "python", "code": "1", "timeout_ms": 1, "stream": true}), 504, CodeSandboxTimeout, "")
}

func objectKeys(t *testing.T, s objstore.Store) []string {
	t.Helper()
	var out []string
	for info, err := range s.List(context.Background(), "containers/") {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, info.Key)
	}
	return out
}

// An upload streams into the object store under the container's upload
// key, the service reads it there, and the edge deletes it once answered;
// one over the bound is 413 and leaves nothing.
func TestUpload(t *testing.T) {
	e := setup(t, true, func(d *Deps, _ *ClientConfig) { d.MaxFileBytes = 1000 })
	id := e.do("POST", "/v1/containers", secretA, map[string]any{}).json(t)["id"].(string)
	content := bytes.Repeat([]byte("x"), 1000)
	r := e.do("POST", "/v1/containers/"+id+"/files", secretA, fileBody("data/in.txt", content))
	if r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if f := r.json(t); f["path"] != "/mnt/data/data/in.txt" || f["bytes"].(float64) != 1000 || f["object"] != "container.file" {
		t.Fatalf("upload answer %s", r.body)
	}
	e.fake.mu.Lock()
	got := e.fake.uploads["data/in.txt"]
	e.fake.mu.Unlock()
	if !bytes.Equal(got, content) {
		t.Fatalf("service read %d bytes", len(got))
	}
	if k := objectKeys(t, e.objects); len(k) != 0 {
		t.Fatalf("upload objects left: %v", k)
	}
	wantError(t, e.do("POST", "/v1/containers/"+id+"/files", secretA, fileBody("big.bin", append(content, 'y'))), 413, sandbox.CodeFileTooLarge, "file")
	wantError(t, e.do("POST", "/v1/containers/"+id+"/files", secretA, fileBody("../etc/passwd", []byte("x"))), 400, sandbox.CodeInvalidPath, "file")
	if k := objectKeys(t, e.objects); len(k) != 0 {
		t.Fatalf("refused uploads left objects: %v", k)
	}
	// By file id: passed to the service as is.
	r = e.do("POST", "/v1/containers/"+id+"/files", secretA, map[string]any{"file_id": "file-abc"})
	if r.status != 200 || r.json(t)["path"] != "/mnt/data/file-abc" {
		t.Fatalf("file_id: %d %s", r.status, r.body)
	}
	wantError(t, e.do("POST", "/v1/containers/"+id+"/files", secretA, map[string]any{}), 400, "missing_required_parameter", "file_id")
}

// A download streams the object the service copied out, with the type its
// name says, and the object is deleted after.
func TestFileContent(t *testing.T) {
	e := setup(t, true, nil)
	id := e.do("POST", "/v1/containers", secretA, map[string]any{}).json(t)["id"].(string)
	r := e.do("GET", "/v1/containers/"+id+"/files/cfile_1/content", secretA, nil)
	if r.status != 200 || string(r.body) != "a,b\n1,2\n" {
		t.Fatalf("content: %d %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
		t.Fatalf("content type %q", ct)
	}
	if cd := r.header.Get("Content-Disposition"); !strings.Contains(cd, "out.csv") {
		t.Fatalf("content disposition %q", cd)
	}
	if k := objectKeys(t, e.objects); len(k) != 0 {
		t.Fatalf("content object left: %v", k)
	}
	// A service that names another tenant's key is not followed.
	e.fake.handle = func(op string, m *nats.Msg) bool {
		if op != sandbox.OpFileContent {
			return false
		}
		reply(m, 200, sandbox.ContentReply{ObjectKey: sandbox.ContentKey("beta", id, "x")})
		return true
	}
	wantError(t, e.do("GET", "/v1/containers/"+id+"/files/cfile_1/content", secretA, nil), 502, CodeSandboxBadReply, "")
}

func TestNoObjectStore(t *testing.T) {
	e := setup(t, true, func(d *Deps, _ *ClientConfig) { d.Objects = nil })
	id := e.do("POST", "/v1/containers", secretA, map[string]any{}).json(t)["id"].(string)
	wantError(t, e.do("POST", "/v1/containers/"+id+"/files", secretA, fileBody("a.txt", []byte("x"))), 503, "storage_unavailable", "")
	wantError(t, e.do("GET", "/v1/containers/"+id+"/files/cfile_1/content", secretA, nil), 503, "storage_unavailable", "")
}

// Container calls count against the key's requests per minute.
func TestRateLimit(t *testing.T) {
	e := setup(t, true, nil)
	for i := range 2 {
		if r := e.do("GET", "/v1/containers", secretB, nil); r.status != 200 {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
	}
	r := e.do("GET", "/v1/containers", secretB, nil)
	wantError(t, r, 429, "rate_limit_exceeded", "")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
}
