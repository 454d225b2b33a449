package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/telemetry"
	"github.com/aiforge/aiforge/services/edge"
)

func TestConfigValidate(t *testing.T) {
	good := edge.Config{AdminKey: adminKey}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, c := range map[string]edge.Config{
		"no admin key":       {},
		"short admin key":    {AdminKey: "0123456789abcde"},
		"negative body":      {AdminKey: adminKey, MaxBodyBytes: -1},
		"negative wait":      {AdminKey: adminKey, NoWorkerWait: -time.Second},
		"negative heartbeat": {AdminKey: adminKey, HeartbeatTimeout: -time.Second},
		"negative grace":     {AdminKey: adminKey, ShutdownGrace: -time.Second},
		"negative failover":  {AdminKey: adminKey, FailoverWait: -time.Second},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
	// Validate reports every problem at once.
	err := edge.Config{AdminKey: "short", MaxBodyBytes: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "AdminKey") || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("Validate = %v, want both problems", err)
	}
}

func TestNewRejectsMissingDeps(t *testing.T) {
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	full := func() edge.Deps {
		reg := prometheus.NewRegistry()
		return edge.Deps{NC: nc, JS: js, Registerer: reg, Gatherer: reg, Listener: ln}
	}
	cfg := edge.Config{AdminKey: adminKey}
	cases := map[string]func(*edge.Deps, *edge.Config){
		"no NC":                    func(d *edge.Deps, _ *edge.Config) { d.NC = nil },
		"no JS":                    func(d *edge.Deps, _ *edge.Config) { d.JS = nil },
		"no Registerer":            func(d *edge.Deps, _ *edge.Config) { d.Registerer = nil },
		"no Gatherer":              func(d *edge.Deps, _ *edge.Config) { d.Gatherer = nil },
		"no Listener nor Listen":   func(d *edge.Deps, _ *edge.Config) { d.Listener = nil },
		"invalid config as well":   func(d *edge.Deps, c *edge.Config) { c.AdminKey = "x" },
		"short admin key, deps ok": func(_ *edge.Deps, c *edge.Config) { c.AdminKey = "short" },
	}
	for name, mut := range cases {
		d, c := full(), cfg
		mut(&d, &c)
		if s, err := edge.New(c, d); err == nil || s != nil {
			t.Errorf("%s: New = %v, %v; want an error", name, s, err)
		}
	}
	d := full()
	if _, err := edge.New(cfg, d); err != nil {
		t.Fatalf("complete deps: %v", err)
	}
	// The same registry twice: the metrics collide.
	if _, err := edge.New(cfg, d); err == nil {
		t.Fatal("New registered its metrics twice in one registry")
	}
	// Listen instead of a Listener is enough.
	d = full()
	d.Listener = nil
	if _, err := edge.New(edge.Config{AdminKey: adminKey, Listen: "127.0.0.1:0"}, d); err != nil {
		t.Fatalf("Listen without Listener: %v", err)
	}
}

func TestHealthAndReady(t *testing.T) {
	h := startEdge(t, nil)
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := h.do("GET", p, "", nil, nil); r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", p, r.status, r.body)
		}
	}
}

func TestAdminAuth(t *testing.T) {
	h := startEdge(t, nil)
	secret, _ := h.tenantKey("acme")
	for name, hdr := range map[string]map[string]string{
		"no header":         nil,
		"wrong key":         {"Authorization": "Bearer 0123456789abcdef-wrong"},
		"prefix of the key": {"Authorization": "Bearer " + adminKey[:len(adminKey)-1]},
		"key plus a suffix": {"Authorization": "Bearer " + adminKey + "x"},
		"basic scheme":      {"Authorization": "Basic " + adminKey},
		"bare key":          {"Authorization": adminKey},
		"an API key":        {"Authorization": "Bearer " + secret},
		"empty bearer":      {"Authorization": "Bearer "},
	} {
		for _, ep := range []struct{ method, path string }{
			{"GET", "/admin/v1/tenants"}, {"POST", "/admin/v1/tenants"}, {"GET", "/admin/v1/keys"},
			{"DELETE", "/admin/v1/keys/key_0000000000000000"}, {"POST", "/admin/v1/models"}, {"GET", "/admin/v1/models/a/b"},
		} {
			r := h.do(ep.method, ep.path, "", `{"id":"evil"}`, hdr)
			if r.status != http.StatusUnauthorized {
				t.Fatalf("%s %s %s: %d %s", name, ep.method, ep.path, r.status, r.body)
			}
			apiError(t, r, http.StatusUnauthorized, "invalid_api_key")
		}
	}
	// The scheme is case-insensitive.
	if r := h.do("GET", "/admin/v1/tenants", "", nil, map[string]string{"Authorization": "bearer " + adminKey}); r.status != http.StatusOK {
		t.Fatalf("lower-case bearer: %d %s", r.status, r.body)
	}
	// Nothing was created by the refused calls.
	if r := h.admin("GET", "/admin/v1/tenants/evil", nil); r.status != http.StatusNotFound {
		t.Fatalf("refused call created a tenant: %d %s", r.status, r.body)
	}
}

func TestTenants(t *testing.T) {
	h := startEdge(t, nil)
	r := h.admin("POST", "/admin/v1/tenants", map[string]string{"id": "zeta"})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if m := r.json(t); m["id"] != "zeta" || m["created_at"] == nil {
		t.Fatalf("create answer %s", r.body)
	}
	apiError(t, h.admin("POST", "/admin/v1/tenants", map[string]string{"id": "zeta"}), http.StatusConflict, "conflict")
	for _, id := range []string{"", "Zeta", "a.b", "-x", "has space", strings.Repeat("a", 64)} {
		e := apiError(t, h.admin("POST", "/admin/v1/tenants", map[string]string{"id": id}), http.StatusBadRequest, "invalid_request")
		if e["param"] != "id" {
			t.Fatalf("invalid id %q: param %v", id, e["param"])
		}
	}
	apiError(t, h.admin("POST", "/admin/v1/tenants", `{"id":"ok","extra":1}`), http.StatusBadRequest, "invalid_json")
	apiError(t, h.admin("POST", "/admin/v1/tenants", `{"id":`), http.StatusBadRequest, "invalid_json")
	apiError(t, h.admin("POST", "/admin/v1/tenants", ""), http.StatusBadRequest, "invalid_json")
	apiError(t, h.admin("POST", "/admin/v1/tenants", `{"id":7}`), http.StatusBadRequest, "invalid_type")
	if r := h.admin("POST", "/admin/v1/tenants", map[string]string{"id": "alpha"}); r.status != http.StatusCreated {
		t.Fatalf("create alpha: %d", r.status)
	}

	r = h.admin("GET", "/admin/v1/tenants", nil)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil || list.Object != "list" {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var ids []string
	for _, d := range list.Data {
		ids = append(ids, d.ID)
	}
	if !slices.Equal(ids, []string{"alpha", "zeta"}) {
		t.Fatalf("list = %v", ids)
	}
	if r := h.admin("GET", "/admin/v1/tenants/alpha", nil); r.status != http.StatusOK || r.json(t)["id"] != "alpha" {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	apiError(t, h.admin("GET", "/admin/v1/tenants/nobody", nil), http.StatusNotFound, "not_found")
}

func TestKeys(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("m")
	if r := h.admin("POST", "/admin/v1/tenants", map[string]string{"id": "acme"}); r.status != http.StatusCreated {
		t.Fatal(r.status)
	}
	apiError(t, h.admin("POST", "/admin/v1/keys", map[string]any{"tenant": "ghost"}), http.StatusBadRequest, "invalid_request")
	e := apiError(t, h.admin("POST", "/admin/v1/keys", map[string]any{"name": "x"}), http.StatusBadRequest, "missing_required_parameter")
	if e["param"] != "tenant" {
		t.Fatalf("missing tenant: param %v", e["param"])
	}
	apiError(t, h.admin("POST", "/admin/v1/keys", map[string]any{"tenant": "acme", "models": []string{""}}), http.StatusBadRequest, "invalid_request")
	apiError(t, h.admin("POST", "/admin/v1/keys", map[string]any{"tenant": "acme", "secret": "mine"}), http.StatusBadRequest, "invalid_json")

	r := h.admin("POST", "/admin/v1/keys", map[string]any{"tenant": "acme", "name": "ci", "models": []string{"m"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create key: %d %s", r.status, r.body)
	}
	created := r.json(t)
	secret, _ := created["key"].(string)
	id, _ := created["id"].(string)
	if !strings.HasPrefix(secret, "sk-af-") || !strings.HasPrefix(id, "key_") || created["tenant"] != "acme" || created["name"] != "ci" {
		t.Fatalf("create answer %s", r.body)
	}
	if _, ok := created["hash"]; ok {
		t.Fatalf("create answer shows the hash: %s", r.body)
	}

	noSecret := func(what string, r response, wantIDs ...string) {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", what, r.status, r.body)
		}
		if strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), `"key"`) || strings.Contains(string(r.body), `"hash"`) {
			t.Fatalf("%s shows a secret or hash: %s", what, r.body)
		}
		for _, id := range wantIDs {
			if !strings.Contains(string(r.body), id) {
				t.Fatalf("%s lacks %s: %s", what, id, r.body)
			}
		}
	}
	noSecret("get", h.admin("GET", "/admin/v1/keys/"+id, nil), id)
	noSecret("list", h.admin("GET", "/admin/v1/keys", nil), id)
	noSecret("list by tenant", h.admin("GET", "/admin/v1/keys?tenant=acme", nil), id)
	if r := h.admin("GET", "/admin/v1/keys?tenant=other", nil); strings.Contains(string(r.body), id) {
		t.Fatalf("other tenant's list shows the key: %s", r.body)
	}

	// The key works...
	if r := h.do("GET", "/v1/models", secret, nil, nil); r.status != http.StatusOK {
		t.Fatalf("fresh key refused: %d %s", r.status, r.body)
	}
	// ...until it is revoked.
	r = h.admin("DELETE", "/admin/v1/keys/"+id, nil)
	if r.status != http.StatusOK || r.json(t)["deleted"] != true {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	apiError(t, h.do("GET", "/v1/models", secret, nil, nil), http.StatusUnauthorized, "invalid_api_key")
	apiError(t, h.do("POST", "/v1/chat/completions", secret, chatBody("m", false), nil), http.StatusUnauthorized, "invalid_api_key")
	apiError(t, h.admin("GET", "/admin/v1/keys/"+id, nil), http.StatusNotFound, "not_found")
	apiError(t, h.admin("DELETE", "/admin/v1/keys/"+id, nil), http.StatusNotFound, "not_found")
}

func TestRevokeEndsOpenStream(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("slow")
	started := make(chan struct{}, 1)
	h.worker("slow", "w1", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		for i := 0; ; i++ {
			if err := w.Data(ctx, []byte(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
				return
			}
			if i == 0 {
				started <- struct{}{}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	secret, id := h.tenantKey("acme")
	s := h.openStream(context.Background(), secret, chatBody("slow", true), nil)
	if s.resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(s.resp.Body)
		t.Fatalf("stream: %d %s", s.resp.StatusCode, b)
	}
	if first, ok := s.next(t); !ok || first != `{"i":0}` {
		t.Fatalf("first event %q, %v", first, ok)
	}
	<-started

	if r := h.admin("DELETE", "/admin/v1/keys/"+id, nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	var last string
	for {
		data, ok := s.next(t)
		if !ok {
			break
		}
		if data == "[DONE]" {
			t.Fatal("the stream of a revoked key ended with [DONE]")
		}
		last = data
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(last), &e); err != nil || e.Error.Code != "api_key_revoked" {
		t.Fatalf("stream ended with %q, want an api_key_revoked error event", last)
	}
	apiError(t, h.do("POST", "/v1/chat/completions", secret, chatBody("slow", true), nil), http.StatusUnauthorized, "invalid_api_key")
}

func TestModels(t *testing.T) {
	h := startEdge(t, nil)
	const engineSecret = "engine-secret-do-not-show"
	reg := func(name string) response {
		return h.admin("POST", "/admin/v1/models", map[string]any{
			"name": name, "owned_by": "team",
			"engine": map[string]any{"base_url": "http://127.0.0.1:8000/v1", "model": "up", "api_key": engineSecret},
		})
	}
	slash := "meta-llama/Llama-3.1-8B:q4"
	r := reg(slash)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	checkRedacted := func(what string, r response) {
		t.Helper()
		if strings.Contains(string(r.body), engineSecret) || !strings.Contains(string(r.body), `"redacted"`) {
			t.Fatalf("%s does not redact the engine key: %s", what, r.body)
		}
	}
	checkRedacted("register", r)
	created := r.json(t)["created_at"]
	r = reg(slash)
	if r.status != http.StatusOK {
		t.Fatalf("re-register: %d %s", r.status, r.body)
	}
	checkRedacted("re-register", r)
	if r.json(t)["created_at"] != created {
		t.Fatalf("re-register changed created_at: %v -> %v", created, r.json(t)["created_at"])
	}
	for _, n := range []string{"llama-3", "mistral"} {
		if r := reg(n); r.status != http.StatusCreated {
			t.Fatalf("register %s: %d", n, r.status)
		}
	}
	r = h.admin("GET", "/admin/v1/models/"+slash, nil)
	if r.status != http.StatusOK || r.json(t)["name"] != slash {
		t.Fatalf("admin get %s: %d %s", slash, r.status, r.body)
	}
	checkRedacted("admin get", r)
	checkRedacted("admin list", h.admin("GET", "/admin/v1/models", nil))
	apiError(t, h.admin("POST", "/admin/v1/models", map[string]any{"name": "bad name", "engine": map[string]any{"base_url": "ftp://x", "model": ""}}), http.StatusBadRequest, "invalid_request")
	apiError(t, h.admin("GET", "/admin/v1/models/nope/nope", nil), http.StatusNotFound, "not_found")

	all, _ := h.tenantKey("acme")
	some, _ := h.tenantKey("acme", "llama-*", "meta-llama/*")
	one, _ := h.tenantKey("acme", "mistral")
	listIDs := func(key string) []string {
		t.Helper()
		r := h.do("GET", "/v1/models", key, nil, nil)
		var l struct {
			Object string `json:"object"`
			Data   []struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				OwnedBy string `json:"owned_by"`
				Created int64  `json:"created"`
			} `json:"data"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &l) != nil || l.Object != "list" {
			t.Fatalf("/v1/models: %d %s", r.status, r.body)
		}
		var ids []string
		for _, d := range l.Data {
			if d.Object != "model" || d.OwnedBy != "team" || d.Created == 0 {
				t.Fatalf("model object %+v", d)
			}
			ids = append(ids, d.ID)
		}
		if strings.Contains(string(r.body), engineSecret) || strings.Contains(string(r.body), "127.0.0.1:8000") {
			t.Fatalf("/v1/models shows engine details: %s", r.body)
		}
		return ids
	}
	if ids := listIDs(all); !slices.Equal(ids, []string{"llama-3", slash, "mistral"}) {
		t.Fatalf("all models: %v", ids)
	}
	if ids := listIDs(some); !slices.Equal(ids, []string{"llama-3", slash}) {
		t.Fatalf("llama models: %v", ids)
	}
	if ids := listIDs(one); !slices.Equal(ids, []string{"mistral"}) {
		t.Fatalf("one model: %v", ids)
	}

	r = h.do("GET", "/v1/models/"+slash, some, nil, nil)
	if r.status != http.StatusOK || r.json(t)["id"] != slash || r.json(t)["object"] != "model" {
		t.Fatalf("/v1/models/%s: %d %s", slash, r.status, r.body)
	}
	apiError(t, h.do("GET", "/v1/models/"+slash, one, nil, nil), http.StatusForbidden, "model_not_allowed")
	apiError(t, h.do("GET", "/v1/models/unknown/model", all, nil, nil), http.StatusNotFound, "model_not_found")
	apiError(t, h.do("POST", "/v1/chat/completions", one, chatBody(slash, false), nil), http.StatusForbidden, "model_not_allowed")
	apiError(t, h.do("POST", "/v1/chat/completions", all, chatBody("unknown", false), nil), http.StatusNotFound, "model_not_found")
	apiError(t, h.do("GET", "/v1/models", "", nil, nil), http.StatusUnauthorized, "invalid_api_key")

	// Delete, also by a name with a slash.
	if r := h.admin("DELETE", "/admin/v1/models/"+slash, nil); r.status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	apiError(t, h.do("GET", "/v1/models/"+slash, all, nil, nil), http.StatusNotFound, "model_not_found")
	apiError(t, h.admin("DELETE", "/admin/v1/models/"+slash, nil), http.StatusNotFound, "not_found")
	if ids := listIDs(all); !slices.Equal(ids, []string{"llama-3", "mistral"}) {
		t.Fatalf("after delete: %v", ids)
	}
}

func TestUnknownPathAndMethod(t *testing.T) {
	h := startEdge(t, nil)
	apiError(t, h.do("GET", "/nope", "", nil, nil), http.StatusNotFound, "not_found")
	apiError(t, h.do("POST", "/v1/unknown", "", "{}", nil), http.StatusNotFound, "not_found")
	apiError(t, h.do("GET", "/v1/chat/completions", "", nil, nil), http.StatusMethodNotAllowed, "method_not_allowed")
	apiError(t, h.do("PUT", "/v1/models", "", nil, nil), http.StatusMethodNotAllowed, "method_not_allowed")
	apiError(t, h.do("PATCH", "/admin/v1/tenants", adminKey, "{}", nil), http.StatusMethodNotAllowed, "method_not_allowed")
}

func TestNoWorker(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("orphan")
	secret, _ := h.tenantKey("acme")
	apiError(t, h.do("POST", "/v1/chat/completions", secret, chatBody("orphan", false), nil), http.StatusServiceUnavailable, "model_unavailable")
	apiError(t, h.do("POST", "/v1/chat/completions", secret, chatBody("orphan", true), nil), http.StatusServiceUnavailable, "model_unavailable")
}

func TestBadInferenceRequests(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("m")
	secret, _ := h.tenantKey("acme")
	for _, c := range []struct{ body, code, param string }{
		{`not json`, "invalid_json", ""},
		{`[]`, "invalid_type", ""},
		{`{"messages":[{"role":"user","content":"x"}]}`, "missing_required_parameter", "model"},
		{`{"model":3,"messages":[]}`, "invalid_type", "model"},
		{`{"model":"m"}`, "missing_required_parameter", "messages"},
		{`{"model":"m","messages":[]}`, "invalid_request", "messages"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}`, "invalid_type", "stream"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`, "invalid_request", "stream_options"},
	} {
		e := apiError(t, h.do("POST", "/v1/chat/completions", secret, c.body, nil), http.StatusBadRequest, c.code)
		if c.param != "" && e["param"] != c.param {
			t.Fatalf("%s: param %v, want %s", c.body, e["param"], c.param)
		}
	}
}

func TestNonStreamPassthrough(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("chat")
	const answer = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"extra":{"kept":true}}`
	got := make(chan *bridge.Request, 1)
	h.worker("chat", "w1", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		got <- req
		_ = w.Body(ctx, http.StatusAccepted, "application/json; charset=utf-8", []byte(answer))
	})
	secret, keyID := h.tenantKey("acme")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	body := `{"model":"chat","messages":[{"role":"user","content":"hi"}],"tools":[],"unknown_field":{"x":1}}`
	r := h.do("POST", "/v1/chat/completions", secret, body, map[string]string{
		"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01",
	})
	if r.status != http.StatusAccepted || string(r.body) != answer {
		t.Fatalf("passthrough: %d %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	reqID := r.header.Get("X-Request-Id")
	if reqID == "" {
		t.Fatal("no X-Request-Id")
	}

	req := <-got
	if req.ID != reqID {
		t.Fatalf("worker saw request id %q, client got %q", req.ID, reqID)
	}
	if req.Tenant != "acme" || req.KeyID != keyID || req.Endpoint != "chat.completions" || req.Stream || string(req.Body) != body {
		t.Fatalf("worker request %+v body %s", req, req.Body)
	}
	tp := telemetry.NATSCarrier(req.Header).Get("traceparent")
	if parts := strings.Split(tp, "-"); len(parts) != 4 || parts[1] != traceID {
		t.Fatalf("traceparent at the worker = %q, want trace id %s", tp, traceID)
	}
	if strings.Contains(fmt.Sprint(req.Header), secret) {
		t.Fatal("the API key travelled to the worker")
	}

	// Metrics.
	m := h.do("GET", "/metrics", "", nil, nil)
	if m.status != http.StatusOK || !strings.Contains(string(m.body), "aiforge_edge_requests_total") ||
		!strings.Contains(string(m.body), `model="chat"`) {
		t.Fatalf("/metrics: %d\n%s", m.status, m.body)
	}
}

func TestEngineErrorPassthrough(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("chat")
	const engineErr = `{"error":{"message":"temperature must be <= 2","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`
	h.worker("chat", "w1", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Fail(&bridge.Error{Status: http.StatusBadRequest, Code: "engine_error", Body: []byte(engineErr)})
	})
	secret, _ := h.tenantKey("acme")
	r := h.do("POST", "/v1/chat/completions", secret, chatBody("chat", false), nil)
	if r.status != http.StatusBadRequest || string(r.body) != engineErr {
		t.Fatalf("engine error: %d %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
}

func TestStream(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("chat")
	got := make(chan *bridge.Request, 1)
	h.worker("chat", "w1", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		got <- req
		for i := range 5 {
			if err := w.Data(ctx, []byte(fmt.Sprintf(`{"choices":[{"delta":{"content":"t%d"}}]}`, i))); err != nil {
				return
			}
		}
		_ = w.End(http.StatusOK, "text/event-stream")
	})
	secret, _ := h.tenantKey("acme")
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	s := h.openStream(context.Background(), secret, `{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`,
		map[string]string{"traceparent": "00-" + traceID + "-b7ad6b7169203331-01"})
	if s.resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", s.resp.StatusCode)
	}
	if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	reqID := s.resp.Header.Get("X-Request-Id")
	var events []string
	for {
		d, ok := s.next(t)
		if !ok {
			break
		}
		events = append(events, d)
	}
	if len(events) != 6 || events[5] != "[DONE]" {
		t.Fatalf("events %q, want 5 chunks then [DONE]", events)
	}
	for i := range 5 {
		if want := fmt.Sprintf(`{"choices":[{"delta":{"content":"t%d"}}]}`, i); events[i] != want {
			t.Fatalf("event %d = %q, want %q", i, events[i], want)
		}
	}
	req := <-got
	if reqID == "" || req.ID != reqID || !req.Stream || !req.IncludeUsage {
		t.Fatalf("worker request %+v, X-Request-Id %q", req, reqID)
	}
	if tp := telemetry.NATSCarrier(req.Header).Get("traceparent"); !strings.Contains(tp, traceID) {
		t.Fatalf("traceparent at the worker = %q", tp)
	}
}

func TestSecretsNeverLogged(t *testing.T) {
	h := startEdge(t, nil)
	const engineSecret = "engine-secret-never-logged"
	if r := h.admin("POST", "/admin/v1/models", map[string]any{
		"name": "chat", "engine": map[string]any{"base_url": "http://127.0.0.1:1/v1", "model": "up", "api_key": engineSecret},
	}); r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	var calls atomic.Int32
	h.worker("chat", "w1", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		calls.Add(1)
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte(`{"ok":true}`))
	})
	secret, id := h.tenantKey("acme")
	if r := h.do("POST", "/v1/chat/completions", secret, chatBody("chat", false), nil); r.status != http.StatusOK {
		t.Fatalf("use: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/v1/chat/completions", secret+"x", chatBody("chat", false), nil); r.status != http.StatusUnauthorized {
		t.Fatalf("wrong secret: %d", r.status)
	}
	if r := h.admin("DELETE", "/admin/v1/keys/"+id, nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d", r.status)
	}
	if r := h.do("POST", "/v1/chat/completions", secret, chatBody("chat", false), nil); r.status != http.StatusUnauthorized {
		t.Fatalf("revoked: %d", r.status)
	}
	if calls.Load() != 1 {
		t.Fatalf("worker called %d times", calls.Load())
	}
	// The edge logged something about this key, so the check is not vacuous.
	eventually(t, 5*time.Second, func() bool { return strings.Contains(h.logs.String(), id) }, "a log line about the key")
	logs := h.logs.String()
	_, tail, _ := strings.Cut(strings.TrimPrefix(secret, "sk-af-"), "-")
	for what, s := range map[string]string{
		"API key": secret, "API key tail": tail, "admin key": adminKey, "engine key": engineSecret,
		"URL-escaped API key": url.QueryEscape(secret),
	} {
		if strings.Contains(logs, s) {
			t.Fatalf("the %s appears in the logs:\n%s", what, logs)
		}
	}
	// Logs are JSON lines.
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if !json.Valid([]byte(line)) {
			t.Fatalf("log line is not JSON: %s", line)
		}
	}
}

// A request body the edge accepts (below MaxBodyBytes) must either reach a
// worker or be refused as too large; the bus has its own payload limit
// (8 MiB embedded, 1 MiB by default on a NATS server).
func TestBodyAboveBusPayloadLimit(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("chat")
	h.worker("chat", "w1", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte(`{"ok":true}`))
	})
	secret, _ := h.tenantKey("acme")
	big := strings.Repeat("x", int(h.nc.MaxPayload())+1024)
	body := `{"model":"chat","messages":[{"role":"user","content":"` + big + `"}]}`
	r := h.do("POST", "/v1/chat/completions", secret, body, nil)
	if r.status != http.StatusOK && r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("body of %d bytes (bus limit %d): %d %s", len(body), h.nc.MaxPayload(), r.status, r.body)
	}
}

// aiforge_edge_requests_total counts "requests answered by the edge, by
// model, endpoint and HTTP status": refusals after authentication (403, 404,
// 413) are answers too, as 400 and 401 already are.
func TestRequestsTotalCountsRefusals(t *testing.T) {
	h := startEdge(t, func(c *edge.Config) { c.MaxBodyBytes = 1 << 10 })
	h.registerModel("chat")
	one, _ := h.tenantKey("acme", "other")
	apiError(t, h.do("POST", "/v1/chat/completions", one, chatBody("missing", false), nil), http.StatusNotFound, "model_not_found")
	apiError(t, h.do("POST", "/v1/chat/completions", one, chatBody("chat", false), nil), http.StatusForbidden, "model_not_allowed")
	apiError(t, h.do("POST", "/v1/chat/completions", one, strings.Repeat(" ", 2<<10)+chatBody("chat", false), nil), http.StatusRequestEntityTooLarge, "request_too_large")
	m := string(h.do("GET", "/metrics", "", nil, nil).body)
	for _, st := range []string{`status="404"`, `status="403"`, `status="413"`} {
		if !strings.Contains(m, st) {
			t.Errorf("aiforge_edge_requests_total has no %s series:\n%s", st, grepLines(m, "aiforge_edge_requests_total"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
