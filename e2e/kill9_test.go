package e2e

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/natsutil"
)

// TestBudgetReservationsOfAKilledEdgeExpire: a real `kill -9`. The bus,
// usage and workers run as in TestServicesAuthenticateWithTheirOwnCredentials;
// the edge is an `aiforge run edge --reservation-ttl 10s` process of the built
// binary. A streamed request on a key whose hard budget one request's
// reservation fills hangs at the engine; the edge is killed with SIGKILL
// while it holds the reservation, so no usage event ever settles it. A
// second edge process (same admin key, same bus) refuses the key while the
// hold is live and serves it again once the hold expired, with nothing
// reserved left behind.
func TestBudgetReservationsOfAKilledEdgeExpire(t *testing.T) {
	// Long enough that the checks made while the hold lives (a few requests
	// right after the kill) finish well inside it on a loaded machine.
	const ttl = 10 * time.Second
	bin := buildAiforge(t)

	var url, creds string
	startStack(t, stackOpts{targets: []string{"nats"}, mutate: func(o *app.Options) {
		o.NATSListen = "127.0.0.1:-1"
		o.OnNATSListen = func(u, dir string) { url, creds = u, dir }
	}})
	as := func(identity string) func(*app.Options) {
		return func(o *app.Options) {
			o.NATS = natsutil.ConnectOptions{NKeyFile: busauth.SeedFile(creds, identity)}
		}
	}
	engine, base := sim(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 16})
	externalStack(t, url, []string{"usage"}, as(busauth.Usage))
	externalStack(t, url, []string{"workers"}, as(busauth.Worker))
	start := time.Now()
	doomed := startEdgeProcess(t, bin, url, busauth.SeedFile(creds, busauth.Edge), ttl)
	t.Logf("edge process ready in %s", time.Since(start).Round(time.Millisecond))

	ctx := context.Background()
	doomed.tenantKey("acme")
	if err := doomed.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "chat", "engine": map[string]any{"base_url": base, "model": "up"},
		"price": map[string]any{"input_per_mtok_usd": 1000, "output_per_mtok_usd": 1000}}, nil); err != nil {
		t.Fatal(err)
	}
	// $0.05 at $1000/M tokens: a request without max_tokens reserves all the
	// budget has left, so one in flight leaves no room for a second.
	var k struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	if err := doomed.admin.Do(ctx, "POST", "/admin/v1/keys", map[string]any{"tenant": "acme", "max_budget_usd": 0.05}, &k); err != nil {
		t.Fatal(err)
	}
	free, _ := doomed.tenantKey("acme")
	doomed.waitServed(free, "chat")
	// The replacement edge starts now, so that its start-up does not race
	// the reservation's deadline; it takes over once the first is killed.
	start = time.Now()
	survivor := startEdgeProcess(t, bin, url, busauth.SeedFile(creds, busauth.Edge), ttl)
	t.Logf("second edge process ready in %s", time.Since(start).Round(time.Millisecond))

	// The engine accepts the request and never answers: the killed edge's
	// request cannot finish and record usage that would release the hold.
	engine.SetFailure(enginesim.Failure{Mode: enginesim.FailHang, Count: 1})
	body := `{"model":"chat","messages":[{"role":"user","content":"hi"}],"stream":true}`
	reqCtx, cancelReq := context.WithCancel(ctx)
	sent := time.Now()
	var streamDone sync.WaitGroup
	streamDone.Add(1)
	go func() {
		defer streamDone.Done()
		streamRaw(reqCtx, doomed.url, k.Key, body, nil)
	}()
	// Cancel before waiting: on a failure before the kill the request
	// hangs on the engine, and waiting first would never end.
	defer func() { cancelReq(); streamDone.Wait() }()
	eventually(t, 20*time.Second, func() bool {
		b := keyBudget(t, doomed.admin, k.ID)
		return b.ReservedUSD != nil && *b.ReservedUSD > 0
	}, "the in-flight request's reservation")
	held := time.Now()
	doomed.kill9()
	t.Logf("reservation seen %s after sending; edge killed (%s)", held.Sub(sent).Round(time.Millisecond), doomed.cmd.ProcessState)

	b := keyBudget(t, survivor.admin, k.ID)
	if b.ReservedUSD == nil || *b.ReservedUSD <= 0 {
		t.Fatalf("after the kill, before the deadline: budget %+v, want the killed edge's hold", b)
	}
	st, resp := survivor.post(k.Key, "/v1/chat/completions", body)
	if st != http.StatusTooManyRequests || errorCode(string(resp)) != "budget_exceeded" {
		if time.Since(sent) < ttl {
			t.Fatalf("with the killed edge's hold live: %d %s", st, resp)
		}
		t.Fatalf("the 429 check came %s after the request, past the %s deadline: %d %s", time.Since(sent), ttl, st, resp)
	}
	eventually(t, 30*time.Second, func() bool {
		st, _ = survivor.post(k.Key, "/v1/chat/completions", body)
		return st == http.StatusOK
	}, "the key served again after the hold expired")
	// Holds carry wall-clock deadlines in milliseconds: compare wall clocks
	// (Round(0) drops the monotonic reading, which a slewed clock departs
	// from), allowing the millisecond the deadline was truncated by.
	servedAfter := time.Now().Round(0).Sub(sent.Round(0))
	if servedAfter < ttl-time.Millisecond {
		t.Fatalf("served %s after the killed request, before its %s reservation expired", servedAfter, ttl)
	}
	eventually(t, 20*time.Second, func() bool {
		b = keyBudget(t, survivor.admin, k.ID)
		return b.ReservedUSD != nil && *b.ReservedUSD == 0 && b.SpentUSD > 0
	}, "nothing reserved, the new request settled")
	t.Logf("served again %s after the killed request (ttl %s); spent $%.3f of $%.2f, reserved $%v, remaining $%.3f",
		servedAfter.Round(time.Millisecond), ttl, b.SpentUSD, b.LimitUSD, *b.ReservedUSD, b.RemainingUSD)
	if b.SpentUSD > b.LimitUSD {
		t.Fatalf("spent %v past the budget %v", b.SpentUSD, b.LimitUSD)
	}
}

// budgetView is the budget of GET /admin/v1/keys/{id}.
type budgetView struct {
	Period       string   `json:"period"`
	LimitUSD     float64  `json:"limit_usd"`
	SpentUSD     float64  `json:"spent_usd"`
	ReservedUSD  *float64 `json:"reserved_usd"`
	RemainingUSD float64  `json:"remaining_usd"`
}

func keyBudget(t *testing.T, admin *cli.Client, id string) budgetView {
	t.Helper()
	var k struct {
		Budget budgetView `json:"budget"`
	}
	if err := admin.Do(context.Background(), "GET", "/admin/v1/keys/"+id, nil, &k); err != nil {
		t.Fatal(err)
	}
	return k.Budget
}

// edgeProcess is an `aiforge run edge` process of the built binary.
type edgeProcess struct {
	*stack
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process was waited for
}

// kill9 kills the process with SIGKILL and waits for it.
func (e *edgeProcess) kill9() {
	e.t.Helper()
	if err := e.cmd.Process.Kill(); err != nil {
		e.t.Fatal(err)
	}
	<-e.exited
}

// buildAiforge builds the aiforge binary into a temporary directory.
func buildAiforge(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test builds the aiforge binary with go build; run it without -short")
	}
	bin := filepath.Join(t.TempDir(), "aiforge")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/aiforge/aiforge/cmd/aiforge").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startEdgeProcess runs the edge of the built binary on the served bus with
// the edge's nkey and the test's admin key, and waits until it is ready.
func startEdgeProcess(t *testing.T, bin, natsURL, nkey string, ttl time.Duration) *edgeProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "run", "edge", "--nats-url", natsURL, "--nats-nkey", nkey, "--listen", addr,
		"--reservation-ttl", ttl.String(), "--log-level", "warn")
	cmd.Env = append(os.Environ(), "AIFORGE_ADMIN_KEY="+adminKey)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // an error when it already exited
		<-exited
		if t.Failed() {
			t.Logf("edge %s log:\n%s", addr, logs.String())
		}
	})
	go func() { _ = cmd.Wait(); close(exited) }()
	e := &edgeProcess{stack: &stack{t: t, url: "http://" + addr, admin: &cli.Client{BaseURL: "http://" + addr, Token: adminKey}}, cmd: cmd, exited: exited}
	eventually(t, 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("edge exited: %s\n%s", cmd.ProcessState, logs.String())
		default:
		}
		resp, err := http.Get(e.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "edge process ready")
	return e
}
