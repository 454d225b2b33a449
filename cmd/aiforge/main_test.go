package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

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
