package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/openai/openai-go/v3"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
)

// consoleHostile is a name a tenant could give its key or its vector
// store: the console must show it as text.
const consoleHostile = `<img src=x onerror=alert("pwned")><script>alert("pwned")</script>`

// needChromium returns the headless browser's path. It fails under CI=true
// when none is installed (.ci/run installs Debian's chromium) and skips
// loudly elsewhere.
func needChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed: .ci/run installs it with apt-get install chromium")
	}
	t.Skip("SKIPPING: chromium is not installed (apt-get install chromium); the console's browser suite needs it")
	return ""
}

// runscUsable reports whether this machine can run the sandbox service's
// containers.
func runscUsable() bool {
	_, err := exec.LookPath("runsc")
	return err == nil && os.Geteuid() == 0
}

// browser is one headless Chromium tab on the console.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string

	mu      sync.Mutex
	dialogs []string
}

func newBrowser(t *testing.T, path, base string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.DisableGPU,
		chromedp.WindowSize(1360, 1000), chromedp.UserDataDir(t.TempDir()))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	dir := os.Getenv("AIFORGE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, ctx: ctx, base: base, dir: dir}
	// The first action starts the browser; it lives as long as ctx.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// Every dialog is answered yes (the revoke confirmation) and kept: a
	// hostile name that ran would open one saying "pwned".
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, ev.Message)
			b.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return b
}

func (b *browser) step() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, 30*time.Second)
}

// open loads a console page and waits for its main element.
func (b *browser) open(path string) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS("main"))); err != nil {
		b.t.Fatalf("open %s: %v", path, err)
	}
}

// submit clicks sel and waits for the page it leads to.
func (b *browser) submit(sel string) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel)))); err != nil {
		b.t.Fatalf("submit %s: %v", sel, err)
	}
}

func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func eval[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

func (b *browser) html() string { return eval[string](b, `document.documentElement.outerHTML`) }

// until reloads path until cond holds on it.
func (b *browser) until(path string, within time.Duration, cond func() bool, what string) {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		b.open(path)
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting for %s on %s:\n%s", what, path, b.text("main"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shot saves a full-page PNG of what the tab shows as <name>.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes)", p, len(png))
}

func (b *browser) noScriptRan() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.dialogs {
		if strings.Contains(d, "pwned") {
			b.t.Fatalf("a hostile name ran as script: dialog %q", d)
		}
	}
}

// TestConsoleInHeadlessChromium signs in to the console with the admin key
// and reads every page against real data made here: a tenant, keys (one
// named with markup), a model on the engine simulator, chats so usage
// exists, a batch, a vector store with a file, a dead letter and, where
// runsc runs, a container. A key created and revoked from the console stops
// working at once. Screenshots of every page go to $AIFORGE_SCREENSHOTS.
func TestConsoleInHeadlessChromium(t *testing.T) {
	chromium := needChromium(t)
	sandboxes := runscUsable()
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 5})
	s := startStack(t, stackOpts{mutate: func(o *app.Options) {
		if sandboxes {
			o.Sandbox.Pool = "1g=1"
		}
	}})
	ctx := context.Background()
	key, keyID := s.tenantKey("acme")
	if err := s.admin.Do(ctx, "POST", "/admin/v1/keys", map[string]any{"tenant": "acme", "name": consoleHostile}, nil); err != nil {
		t.Fatal(err)
	}
	s.register("chat", base, "up")
	if err := s.admin.Do(ctx, "POST", "/admin/v1/prices", map[string]any{"model": "chat", "input_per_mtok_usd": 1000, "output_per_mtok_usd": 2000}, nil); err != nil {
		t.Fatal(err)
	}
	s.waitServed(key, "chat")
	const chats = 3
	for range chats {
		if st, b := s.post(key, "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hello console"}],"max_tokens":5}`); st != http.StatusOK {
			t.Fatalf("chat: %d %s", st, b)
		}
	}
	c := sdkClient(s, key)
	bt := submitBatch(t, c, batchLines("chat", "console", 4, 4), map[string]string{"from": "console-e2e"})
	waitBatch(t, c, bt.ID, time.Minute, final, "batch done")
	file, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("# Console\n\nThe console lists this file."), "console.md", "text/markdown"), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := c.VectorStores.New(ctx, openai.VectorStoreNewParams{Name: openai.String(consoleHostile)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.VectorStores.Files.New(ctx, vs.ID, openai.VectorStoreFileNewParams{FileID: file.ID}); err != nil {
		t.Fatal(err)
	}
	// A dead letter, as a consumer that gave up would leave it.
	js, err := jetstream.New(s.app.NATS())
	if err != nil {
		t.Fatal(err)
	}
	dl := nats.NewMsg(events.DeadLetter(events.StreamBatch, "console-e2e"))
	dl.Header.Set(events.HeaderDLQReason, "console e2e: handler gave up")
	dl.Header.Set(events.HeaderDLQStream, events.StreamBatch)
	dl.Header.Set(events.HeaderDLQSequence, "42")
	dl.Header.Set(events.HeaderDLQConsumer, "console-e2e")
	dl.Header.Set(events.HeaderDLQDeliveries, "5")
	dl.Header.Set(events.HeaderTenant, "acme")
	dl.Data = []byte(`{"note":"` + strings.ReplaceAll(consoleHostile, `"`, `'`) + `"}`)
	if _, err := js.PublishMsg(ctx, dl); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, chromium, s.url)

	// Sign in: a wrong key is refused, the admin key lets in.
	b.open("/console/models")
	if loc := eval[string](b, `location.pathname`); loc != "/console/login" {
		t.Fatalf("signed out, /console/models is %s", loc)
	}
	b.do(chromedp.SendKeys(chromedp.ID("key"), "not-the-admin-key-0123456789"))
	b.submit("#signin")
	if e := b.text(".error"); !strings.Contains(e, "not the admin key") || eval[string](b, `location.pathname`) != "/console/login" {
		t.Fatalf("wrong key: %q at %s", e, eval[string](b, `location.pathname`))
	}
	b.shot("01-login-refused")
	b.do(chromedp.SendKeys(chromedp.ID("key"), adminKey)) // the refused page has an empty field
	b.submit("#signin")
	if loc := eval[string](b, `location.pathname`); loc != "/console/models" {
		t.Fatalf("after sign-in: %s", loc)
	}
	if eval[bool](b, `document.cookie.includes("aiforge_console")`) {
		t.Fatal("the session cookie is readable from script (not HttpOnly)")
	}

	// Models: the simulator's model with its worker serving.
	b.until("/console/models", 20*time.Second, func() bool {
		return strings.Contains(b.text(`#models tr[data-model="chat"]`), "serving")
	}, "model chat serving")
	if row := b.text(`#models tr[data-model="chat"]`); !strings.Contains(row, base) {
		t.Fatalf("model row: %q", row)
	}
	if strings.Contains(b.html(), adminKey) {
		t.Fatal("the admin key is in the page")
	}
	b.shot("02-models")

	// Tenants and keys: the hostile name is text, not markup.
	b.open("/console/tenants")
	names := eval[[]string](b, `[...document.querySelectorAll(".key-name")].map(e => e.textContent)`)
	found := false
	for _, n := range names {
		found = found || n == consoleHostile
	}
	if !found || eval[int](b, `document.querySelectorAll("main img, main script").length`) != 0 {
		t.Fatalf("hostile key name: names %q, elements in main: %d", names, eval[int](b, `document.querySelectorAll("main img, main script").length`))
	}
	// Limits set from the console.
	b.do(chromedp.Click(chromedp.CSS(`tr[data-key="`+keyID+`"] details summary`)),
		chromedp.SendKeys(chromedp.CSS(`tr[data-key="`+keyID+`"] input[name="rpm"]`), "1234"))
	b.submit(`tr[data-key="` + keyID + `"] .key-limits-form button`)
	if n := b.text(".notice"); !strings.Contains(n, "saved") || !strings.Contains(b.text(`tr[data-key="`+keyID+`"] .key-limits`), "1234 rpm") {
		t.Fatalf("limits: notice %q, row %q", n, b.text(`tr[data-key="`+keyID+`"]`))
	}
	// A key created from the console works, and stops working once
	// revoked from the console.
	b.do(chromedp.SendKeys(chromedp.CSS(`#create-key input[name="name"]`), "made-in-the-console"))
	b.submit("#create-key button")
	secret := b.text("#new-secret")
	created := regexp.MustCompile(`key_[0-9a-f]+`).FindString(b.text(".notice"))
	if !strings.HasPrefix(secret, "sk-") || created == "" {
		t.Fatalf("created: secret %q, notice %q", secret, b.text(".notice"))
	}
	b.shot("03-tenants-key-created")
	if st, body := s.post(secret, "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); st != http.StatusOK {
		t.Fatalf("the console's key before revoking: %d %s", st, body)
	}
	if strings.Contains(eval[string](b, `location.href`), secret) {
		t.Fatal("the secret is in the URL")
	}
	b.submit(`tr[data-key="` + created + `"] form.revoke button`)
	if n := b.text(".notice"); !strings.Contains(n, "revoked") {
		t.Fatalf("revoke: %q", n)
	}
	if st, body := s.post(secret, "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); st != http.StatusUnauthorized {
		t.Fatalf("the revoked key: %d %s", st, body)
	}
	if eval[int](b, `document.querySelectorAll('tr[data-key="`+created+`"]').length`) != 0 {
		t.Fatal("the revoked key is still listed")
	}
	b.shot("04-tenants")

	// Usage: the chats, by model and key, with costs and drawn charts.
	b.until("/console/usage", 30*time.Second, func() bool {
		return strings.Contains(b.text("#usage-models"), "chat") && strings.Contains(b.text("#usage-keys"), keyID)
	}, "usage of model chat and key "+keyID)
	if n := eval[int](b, `document.querySelectorAll('.chart[data-drawn="true"] svg rect').length`); n == 0 {
		t.Fatal("no chart bars drawn")
	}
	if cost := b.text("#total-cost"); cost == "$0.00" {
		t.Fatalf("total cost %s", cost)
	}
	if row := b.text(`#usage-keys tr[data-key="` + keyID + `"]`); !strings.Contains(row, "$") {
		t.Fatalf("key usage row has no cost: %q", row)
	}
	b.shot("05-usage")
	// The key's and the tenant's spend on the tenants page.
	b.until("/console/tenants", 30*time.Second, func() bool {
		return b.text(`tr[data-key="`+keyID+`"] .key-spend`) != "$0.00" && b.text(`section[data-tenant="acme"] .tenant-spent`) != "$0.00"
	}, "spend of key "+keyID)

	// Batches: the batch with its progress.
	b.open("/console/batches")
	if row := b.text(`tr[data-batch="` + bt.ID + `"]`); !strings.Contains(row, "completed") || !strings.Contains(row, "4/4") || !strings.Contains(row, "console-e2e") {
		t.Fatalf("batch row: %q", row)
	}
	b.shot("06-batches")

	// Vector stores: the store (hostile name as text) and its file.
	b.open("/console/vectorstores")
	sec := `section[data-store="` + vs.ID + `"]`
	if h := eval[string](b, `document.querySelector('`+sec+` h2').firstChild.textContent`); strings.TrimSpace(h) != consoleHostile {
		t.Fatalf("store name shown as %q", h)
	}
	if row := b.text(sec + ` tr[data-file="` + file.ID + `"]`); !regexp.MustCompile(`in_progress|completed|failed`).MatchString(row) {
		t.Fatalf("file row: %q", row)
	}
	b.shot("07-vectorstores")

	// Dead letters: the one published above.
	b.open("/console/deadletters")
	if txt := b.text("#deadletters"); !strings.Contains(txt, "console e2e: handler gave up") || !strings.Contains(txt, "console-e2e") {
		t.Fatalf("dead letters: %q", txt)
	}
	b.shot("08-deadletters")

	t.Run("sandboxes", func(t *testing.T) {
		if !sandboxes {
			if os.Getenv("CI") == "true" {
				t.Fatal("runsc (gVisor) is not usable here: .ci/run installs it and runs as root")
			}
			t.Skip("SKIPPING the console's sandboxes page with a container: runsc (gVisor) is missing or not root")
		}
		ct := (&sbxClient{t: t, s: s, key: key}).create(map[string]any{"name": "console-box"})
		b.t = t
		b.open("/console/sandboxes")
		if row := b.text(`tr[data-container="` + ct.ID + `"]`); !strings.Contains(row, "console-box") || !strings.Contains(row, "acme") {
			t.Fatalf("container row: %q", row)
		}
		b.shot("09-sandboxes")
	})
	b.t = t
	b.noScriptRan()

	// Signing out ends the session.
	b.open("/console/models")
	b.submit("#logout")
	b.open("/console/tenants")
	if loc := eval[string](b, `location.pathname`); loc != "/console/login" {
		t.Fatalf("after sign-out: %s", loc)
	}
	fmt.Fprintln(os.Stderr, "console screenshots in", b.dir)
}
