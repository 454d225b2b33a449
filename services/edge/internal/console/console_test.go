package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
)

const testAdminKey = "console-test-admin-key-0123456789"

// hostileName is a name a tenant could choose.
const hostileName = `<script>alert("pwned")</script><img src=x onerror=alert(1)>`

// fakeAPI answers the admin API calls the console makes, refusing any
// without the admin key, and records the writes.
type fakeAPI struct {
	mu     sync.Mutex
	writes []string
	bodies []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testAdminKey {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"admin key missing"}}`)
		return
	}
	if r.Method != http.MethodGet {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.writes = append(f.writes, r.Method+" "+r.URL.Path)
		f.bodies = append(f.bodies, string(b))
		f.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.Method + " " + r.URL.Path {
	case "GET /admin/v1/tenants":
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"acme","created_at":"2026-01-02T03:04:05Z","max_budget_usd":10,
			"budget":{"period":"total","spent_usd":1.25,"reserved_usd":0,"requests_in_flight":0,"limit_usd":10,"remaining_usd":8.75}}]}`)
	case "GET /admin/v1/keys":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"key_0123456789abcdef","object":"api_key","tenant":"acme","name":%q,"models":["*"],
			"created_at":"2026-01-02T03:04:05Z","rpm":60,"budget":{"period":"total","spent_usd":0.5,"reserved_usd":0,"requests_in_flight":0}}]}`, hostileName)
	case "POST /admin/v1/keys":
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"key_fedcba9876543210","key":"sk-aiforge-fedcba9876543210-SECRETSECRET","tenant":"acme"}`)
	case "DELETE /admin/v1/keys/key_0123456789abcdef":
		_, _ = io.WriteString(w, `{"id":"key_0123456789abcdef","object":"api_key","deleted":true}`)
	case "PATCH /admin/v1/keys/key_0123456789abcdef":
		_, _ = io.WriteString(w, `{"id":"key_0123456789abcdef"}`)
	case "GET /admin/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"name":%q,"engine":{"base_url":"http://127.0.0.1:1/v1","model":"up"},
			"status":{"state":"serving","servable_replicas":1,"replicas":[{"worker_id":"w1","model":"chat","state":"serving","max_concurrency":4}]}}]}`, "chat")
	case "GET /admin/v1/usage/ledger":
		_, _ = io.WriteString(w, `{"object":"list","data":[
			{"start":1772625600,"tenant":"acme","key_id":"key_0123456789abcdef","model":"chat","endpoint":"chat","requests":2,"cost_nano":1500000000},
			{"start":1772625660,"tenant":"acme","key_id":"key_0123456789abcdef","model":"chat","endpoint":"chat","requests":1,"cost_nano":250000000},
			{"start":1772625660,"tenant":"acme","key_id":"","model":"chat","endpoint":"sandbox","requests":1,"cost_nano":10000000}]}`)
	case "GET /admin/v1/catalog":
		fmt.Fprintf(w, `{"object":"list","data":[{"name":"m1","kind":"base","versions":[{"version":1,"status":"rejected","reasons":[{"code":"pickle","message":%q}],"files":[],"source":{"type":"upload"}}]}]}`, hostileName)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"message":"unknown"}}`)
	}
}

func (f *fakeAPI) written() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.writes...)
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type harness struct {
	t     *testing.T
	srv   *httptest.Server
	api   *fakeAPI
	clock *clock
	c     *http.Client
}

func newHarness(t *testing.T, mut func(*Deps)) *harness {
	t.Helper()
	api := &fakeAPI{}
	clk := &clock{t: time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)}
	d := Deps{API: api, AdminKey: testAdminKey, Now: clk.now}
	if mut != nil {
		mut(&d)
	}
	s, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &harness{t: t, srv: srv, api: api, clock: clk, c: c}
}

func (h *harness) do(method, path string, form url.Values, cookie *http.Cookie, hdr map[string]string) (*http.Response, string) {
	h.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, h.srv.URL+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.c.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// login signs in and returns the session cookie.
func (h *harness) login(hdr map[string]string) *http.Cookie {
	h.t.Helper()
	resp, body := h.do("POST", "/console/login", url.Values{"key": {testAdminKey}}, nil, hdr)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/models" {
		h.t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			return c
		}
	}
	h.t.Fatal("login set no session cookie")
	return nil
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

func TestSignInRefusesAWrongKeyAndIssuesAStrictCookie(t *testing.T) {
	h := newHarness(t, nil)
	resp, _ := h.do("GET", "/console/models", nil, nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
		t.Fatalf("signed out: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := h.do("POST", "/console/login", url.Values{"key": {"not-the-admin-key-at-all"}}, nil, nil)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || !strings.Contains(body, "not the admin key") {
		t.Fatalf("wrong key: %d %v %s", resp.StatusCode, resp.Cookies(), body)
	}
	c := h.login(nil)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/console" || c.Secure {
		t.Fatalf("cookie over plain HTTP: %+v", c)
	}
	if strings.Contains(c.Value, testAdminKey) {
		t.Fatal("the cookie carries the admin key")
	}
	if c := h.login(map[string]string{"X-Forwarded-Proto": "https"}); !c.Secure {
		t.Fatalf("cookie behind a TLS proxy is not Secure: %+v", c)
	}
	for _, page := range []string{"models", "tenants"} {
		resp, body = h.do("GET", "/console/"+page, nil, c, nil)
		if resp.StatusCode != http.StatusOK || strings.Contains(body, testAdminKey) {
			t.Fatalf("%s: %d, admin key in page: %v", page, resp.StatusCode, strings.Contains(body, testAdminKey))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s headers: %v", page, resp.Header)
		}
	}
	// A forged cookie is refused.
	forged := *c
	forged.Value = c.Value[:len(c.Value)-2] + "AA"
	if resp, _ := h.do("GET", "/console/models", nil, &forged, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("forged cookie: %d", resp.StatusCode)
	}
}

func TestSessionsExpireAndEndAtSignOut(t *testing.T) {
	h := newHarness(t, func(d *Deps) { d.SessionTTL = time.Hour })
	c := h.login(nil)
	if resp, _ := h.do("GET", "/console/models", nil, c, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("models: %d", resp.StatusCode)
	}
	h.clock.add(61 * time.Minute)
	if resp, _ := h.do("GET", "/console/models", nil, c, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("expired session: %d", resp.StatusCode)
	}

	c = h.login(nil)
	_, body := h.do("GET", "/console/models", nil, c, nil)
	token := csrfOf(t, body)
	if resp, _ := h.do("POST", "/console/logout", url.Values{}, c, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-out without the token: %d", resp.StatusCode)
	}
	resp, _ := h.do("POST", "/console/logout", url.Values{"csrf": {token}}, c, nil)
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("sign-out: %d %v", resp.StatusCode, resp.Cookies())
	}
	if resp, _ := h.do("GET", "/console/models", nil, c, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the cookie still works after sign-out: %d", resp.StatusCode)
	}
}

func TestFormsNeedTheSessionsCSRFTokenAndTheSameOrigin(t *testing.T) {
	h := newHarness(t, nil)
	c := h.login(nil)
	_, page := h.do("GET", "/console/tenants", nil, c, nil)
	token := csrfOf(t, page)
	revoke := "/console/keys/key_0123456789abcdef/revoke"

	other := h.login(nil)
	_, otherPage := h.do("GET", "/console/tenants", nil, other, nil)
	if csrfOf(t, otherPage) == token {
		t.Fatal("two sessions have the same CSRF token")
	}
	for name, try := range map[string]struct {
		form   url.Values
		cookie *http.Cookie
		hdr    map[string]string
		want   int
	}{
		"no token":               {url.Values{}, c, nil, http.StatusForbidden},
		"another session's":      {url.Values{"csrf": {csrfOf(t, otherPage)}}, c, nil, http.StatusForbidden},
		"another origin":         {url.Values{"csrf": {token}}, c, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		"another site's referer": {url.Values{"csrf": {token}}, c, map[string]string{"Referer": "https://evil.example/x"}, http.StatusForbidden},
		"no session":             {url.Values{"csrf": {token}}, nil, nil, http.StatusSeeOther},
	} {
		resp, _ := h.do("POST", revoke, try.form, try.cookie, try.hdr)
		if resp.StatusCode != try.want {
			t.Fatalf("%s: %d, want %d", name, resp.StatusCode, try.want)
		}
	}
	if w := h.api.written(); len(w) != 0 {
		t.Fatalf("refused forms reached the API: %v", w)
	}
	resp, _ := h.do("POST", revoke, url.Values{"csrf": {token}}, c, map[string]string{"Origin": h.srv.URL})
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "notice=") {
		t.Fatalf("revoke: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if w := h.api.written(); len(w) != 1 || w[0] != "DELETE /admin/v1/keys/key_0123456789abcdef" {
		t.Fatalf("writes: %v", w)
	}

	// Limits: empty fields are left alone, numbers are checked first.
	limits := "/console/keys/key_0123456789abcdef/limits"
	resp, _ = h.do("POST", limits, url.Values{"csrf": {token}, "rpm": {"many"}}, c, nil)
	if loc := resp.Header.Get("Location"); !strings.Contains(loc, "error=") {
		t.Fatalf("bad rpm: %s", loc)
	}
	h.do("POST", limits, url.Values{"csrf": {token}, "rpm": {"120"}, "max_budget_usd": {"2.5"}, "tpm": {""}}, c, nil)
	h.api.mu.Lock()
	last := h.api.bodies[len(h.api.bodies)-1]
	h.api.mu.Unlock()
	var patch map[string]any
	if err := json.Unmarshal([]byte(last), &patch); err != nil || len(patch) != 2 || patch["rpm"] != 120.0 || patch["max_budget_usd"] != 2.5 {
		t.Fatalf("limits patch %s: %v", last, err)
	}
}

func TestHostileNamesAreEscaped(t *testing.T) {
	h := newHarness(t, nil)
	c := h.login(nil)
	for _, page := range []string{"tenants", "models"} {
		_, body := h.do("GET", "/console/"+page, nil, c, nil)
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("%s renders a hostile name unescaped:\n%s", page, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;") {
			t.Fatalf("%s does not show the hostile name escaped:\n%s", page, body)
		}
	}
}

func TestANewKeysSecretIsShownOnceAndNeverInAURL(t *testing.T) {
	h := newHarness(t, nil)
	c := h.login(nil)
	_, page := h.do("GET", "/console/tenants", nil, c, nil)
	resp, body := h.do("POST", "/console/keys", url.Values{"csrf": {csrfOf(t, page)}, "tenant": {"acme"}, "name": {"ci"}, "models": {"chat, embed"}}, c, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != "" || !strings.Contains(body, `<code id="new-secret">sk-aiforge-fedcba9876543210-SECRETSECRET</code>`) {
		t.Fatalf("create: %d %q\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	h.api.mu.Lock()
	sent := h.api.bodies[0]
	h.api.mu.Unlock()
	if sent != `{"models":["chat","embed"],"name":"ci","tenant":"acme"}` {
		t.Fatalf("create body %s", sent)
	}
	if _, body := h.do("GET", "/console/tenants", nil, c, nil); strings.Contains(body, "SECRETSECRET") {
		t.Fatal("the secret is shown again")
	}
}

func TestFailedSignInsAreBounded(t *testing.T) {
	h := newHarness(t, nil)
	for range loginBurst {
		if resp, _ := h.do("POST", "/console/login", url.Values{"key": {"guess-guess-guess-guess"}}, nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess: %d", resp.StatusCode)
		}
	}
	resp, _ := h.do("POST", "/console/login", url.Values{"key": {testAdminKey}}, nil, nil)
	if resp.StatusCode != http.StatusTooManyRequests || len(resp.Cookies()) != 0 {
		t.Fatalf("after %d failures: %d", loginBurst, resp.StatusCode)
	}
	h.clock.add(loginInterval)
	h.login(nil)
}

func TestDeadLettersNewestFirstAndBounded(t *testing.T) {
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		m := nats.NewMsg(events.DeadLetter(events.StreamDocs, "ingest-docs"))
		m.Header.Set(events.HeaderDLQReason, fmt.Sprintf("parse failed %d", i))
		m.Header.Set(events.HeaderDLQStream, events.StreamDocs)
		m.Header.Set(events.HeaderDLQSequence, fmt.Sprint(100+i))
		m.Header.Set(events.HeaderTenant, "acme")
		m.Data = []byte(hostileName + strings.Repeat("x", 600*i))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readDeadLetters(ctx, js, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.Total != 5 || len(got.Letters) != 3 || got.Letters[0].Reason != "parse failed 4" || got.Letters[2].Reason != "parse failed 2" ||
		got.Letters[0].OrigSeq != "104" || got.Letters[0].Tenant != "acme" || len(got.Letters[0].Data) > maxDeadLetterData+64 {
		t.Fatalf("dead letters: %+v", got)
	}

	h := newHarness(t, func(d *Deps) { d.JS = js })
	_, body := h.do("GET", "/console/deadletters", nil, h.login(nil), nil)
	if !strings.Contains(body, "parse failed 4") || !strings.Contains(body, "5 messages in the dead-letter stream") || strings.Contains(body, "<script>alert") {
		t.Fatalf("dead letters page:\n%s", body)
	}
}

func TestStaticFilesAndPagesWithoutTheirBucket(t *testing.T) {
	h := newHarness(t, nil)
	resp, body := h.do("GET", "/console/static/console.js", nil, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "drawCharts") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("console.js: %d", resp.StatusCode)
	}
	c := h.login(nil)
	for _, page := range []string{"batches", "vectorstores", "sandboxes", "deadletters"} {
		resp, body := h.do("GET", "/console/"+page, nil, c, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "without the bucket") {
			t.Fatalf("%s without its bucket: %d\n%s", page, resp.StatusCode, body)
		}
	}
}

func TestTenantsPageShowsTheLedgersSpend(t *testing.T) {
	h := newHarness(t, nil)
	_, body := h.do("GET", "/console/tenants", nil, h.login(nil), nil)
	if !strings.Contains(body, `<td class="key-spend">$1.75</td>`) || !strings.Contains(body, `<strong class="tenant-spent">$1.76</strong>`) {
		t.Fatalf("spend:\n%s", body)
	}
	// The tenant's hard budget is shown with what is left.
	if !strings.Contains(body, "Budget: $1.25 spent this total period of $10.00 ($8.75 left)") {
		t.Fatalf("budget:\n%s", body)
	}
}
