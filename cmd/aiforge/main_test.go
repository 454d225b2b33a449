package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/app"
)

// Every subcommand of a client group takes --url.
func TestEveryClientCommandTakesURL(t *testing.T) {
	root := newRoot()
	groups := map[string]bool{"tenants": true, "keys": true, "models": true, "usage": true}
	seen := 0
	for _, g := range root.Commands() {
		if !groups[g.Name()] {
			continue
		}
		if !strings.Contains(g.Long, "AIFORGE_URL") {
			t.Errorf("%s --help does not mention AIFORGE_URL", g.Name())
		}
		for _, c := range g.Commands() {
			seen++
			if c.InheritedFlags().Lookup("url") == nil {
				t.Errorf("%s %s takes no --url", g.Name(), c.Name())
			}
		}
	}
	if seen < 20 {
		t.Fatalf("only %d client subcommands found", seen)
	}
}

// --url wins over AIFORGE_URL, and AIFORGE_URL over the default.
func TestURLFlagAndEnvironment(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	serve := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[name]++
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"data":[]}`))
		}))
	}
	flagSrv, envSrv := serve("flag"), serve("env")
	defer flagSrv.Close()
	defer envSrv.Close()
	t.Setenv("AIFORGE_ADMIN_KEY", "ak-test")
	t.Setenv("AIFORGE_URL", envSrv.URL)
	run := func(args ...string) {
		t.Helper()
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v (%s)", args, err, out.String())
		}
	}
	run("tenants", "list")
	run("models", "catalog", "--url", flagSrv.URL)
	run("usage", "report", "--from", "1d", "--url", flagSrv.URL)
	mu.Lock()
	defer mu.Unlock()
	if hits["env"] != 1 || hits["flag"] < 2 {
		t.Fatalf("requests by server: %v (want tenants list on AIFORGE_URL, the others on --url)", hits)
	}
}

// Flag help shows each flag's type as its placeholder: pflag turns a
// `quoted` word of the usage into the placeholder ("--nats-listen aiforge
// run").
func TestHelpHasNoQuotedPlaceholders(t *testing.T) {
	line := regexp.MustCompile(`^\s+(?:-\w, )?--[\w-]+(?: (\S.*?))?\s{2,}\S`)
	types := map[string]bool{"": true, "string": true, "strings": true, "int": true, "int64": true, "float": true, "duration": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, l := range strings.Split(c.Flags().FlagUsages(), "\n") {
			if m := line.FindStringSubmatch(l); m != nil && !types[m[1]] {
				t.Errorf("%s: placeholder %q in %q", c.CommandPath(), m[1], strings.TrimSpace(l))
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot())
}

// `aiforge run --help` names every target (cobra shows Long there, not
// Short) and says which targets need an object store.
func TestRunHelpNamesTargetsAndObjectStore(t *testing.T) {
	root := newRoot()
	run, _, err := root.Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range app.Targets() {
		if !strings.Contains(run.Long, target) {
			t.Errorf("run --help does not name the target %q", target)
		}
	}
	if !strings.Contains(run.Long, "object store") || !strings.Contains(run.Flags().Lookup("data-dir").Usage, "object store") {
		t.Errorf("run --help does not say where the object store lives")
	}
}

// `aiforge keys list` shows each key's limits and its spend: budget and
// period, spent, reserved for requests in flight, remaining.
func TestKeysListShowsSpend(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"key_1","tenant":"acme","models":["*"],"created_at":"2026-12-01T10:00:00Z","tpm":2000,
			"budget":{"period":"total","period_id":"total","limit_usd":0.05,"spent_usd":0.034,"reserved_usd":0.002,"requests_in_flight":1,"remaining_usd":0.014}},
			{"id":"key_2","tenant":"acme","models":["*"],"created_at":"2026-12-01T10:00:00Z","budget":{"period":"total","period_id":"total","spent_usd":1.5,"reserved_usd":0}}]}`))
	}))
	defer srv.Close()
	t.Setenv("AIFORGE_ADMIN_KEY", "ak-test")
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"keys", "list", "--url", srv.URL})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s", out.String())
	}
	for _, want := range [][]string{{"BUDGET", "SPENT", "RESERVED", "REMAINING", "TPM"},
		{"key_1", "$0.05 total", "$0.034", "$0.002", "$0.014", "2000"}, {"key_2", "$1.5", "$0"}} {
		line := lines[0]
		if want[0] == "key_1" {
			line = lines[1]
		} else if want[0] == "key_2" {
			line = lines[2]
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("%q lacks %q", line, w)
			}
		}
	}
}

// A number or duration in the environment that does not parse stops the
// command with its name, instead of silently meaning the default.
func TestBadEnvironmentValuesAreErrors(t *testing.T) {
	t.Setenv("AIFORGE_RESERVATION_TTL", "15 minutes")
	t.Setenv("AIFORGE_STREAM_REPLICAS", "three")
	root := newRoot()
	root.SetArgs([]string{"tenants", "list"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "AIFORGE_RESERVATION_TTL") || !strings.Contains(err.Error(), "AIFORGE_STREAM_REPLICAS") {
		t.Fatalf("err = %v, want both bad variables named", err)
	}
}

// models list shows every engine of a model, and its fallbacks.
func TestModelRows(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	plain := modelOut{Name: "small", Engine: engineOut{BaseURL: "http://a/v1", Model: "up"}, CreatedAt: at}
	header, rows := modelRows([]modelOut{plain})
	if strings.Join(header, " ") != "MODEL ENGINE UPSTREAM CREATED" || len(rows) != 1 {
		t.Fatalf("plain: %v %v", header, rows)
	}
	multi := modelOut{Name: "chat", Engine: engineOut{BaseURL: "http://a/v1", Model: "q"},
		Engines: []engineOut{{ID: "b", BaseURL: "http://b/v1", Model: "q"}}, Fallbacks: []string{"x", "y"}, CreatedAt: at}
	header, rows = modelRows([]modelOut{multi, plain})
	want := [][]string{
		{"chat", "http://a/v1", "q", "2026-12-01T00:00:00Z", "x, y"},
		{"chat", "http://b/v1 (b)", "q", "2026-12-01T00:00:00Z", "-"},
		{"small", "http://a/v1", "up", "2026-12-01T00:00:00Z", "-"},
	}
	if header[len(header)-1] != "FALLBACKS" || fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("multi: %v %v", header, rows)
	}
}
