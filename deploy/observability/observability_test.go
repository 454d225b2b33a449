package observability

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/aiforge/aiforge/internal/app"
)

// registered starts every aiforge service in one process (`aiforge up`'s
// preset, embedded bus) and returns the names of the metrics they
// registered: the source of truth the dashboards and rules are checked
// against.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := app.Options{Targets: []string{"all"}, DataDir: t.TempDir(), EdgeListener: ln, AdminKey: "observability-test-admin-key-0123"}
	opts.Sandbox.Pool = "none"
	a, err := app.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the app did not stop")
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !a.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the app was not ready within 60s")
		}
		select {
		case err := <-done:
			t.Fatalf("the app stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	names := map[string]bool{}
	for _, n := range a.MetricNames() {
		names[n] = true
	}
	// Series Prometheus itself adds to every scrape and rule evaluation.
	for _, n := range []string{"up", "scrape_duration_seconds", "scrape_samples_scraped", "ALERTS"} {
		names[n] = true
	}
	return names
}

// known reports whether a metric name in an expression is exported: a
// registered name, or a histogram's or summary's _bucket, _sum, _count.
func known(names map[string]bool, m string) bool {
	if names[m] {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(m, suf); ok && names[b] {
			return true
		}
	}
	return false
}

// metricsOf parses a PromQL expression and lists the metric names it
// selects; every selector must name its metric.
func metricsOf(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return nil
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("%s: a selector without a metric name in %q", where, expr)
		}
		out = append(out, name)
		return nil
	})
	return out
}

// promql parses with Prometheus's default options.
var promql = parser.NewParser(parser.Options{})

// grafanaVars replaces the dashboards' variables by values PromQL accepts.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
	`"$model"`, `".*"`, `"$tenant"`, `".*"`)

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func TestDashboardsAndRulesNameRegisteredMetrics(t *testing.T) {
	names := registered(t)
	for _, must := range []string{"aiforge_edge_requests_total", "aiforge_worker_time_to_first_token_seconds", "aiforge_consumer_lag_seconds",
		"aiforge_usage_cost_usd_total", "aiforge_edge_model_workers", "aiforge_batch_lines_completed_total"} {
		if !names[must] {
			t.Fatalf("the running app did not register %s (registered: %d names)", must, len(names))
		}
	}
	used := map[string]bool{}

	files, _ := filepath.Glob("grafana/dashboards/*.json")
	if len(files) == 0 {
		t.Fatal("no dashboards")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: no uid or title", f)
		}
		types := map[string][]string{} // panel type -> metrics
		var walk func([]panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				walk(p.Panels)
				if p.Type == "row" {
					continue
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: panel %q has no query", f, p.Title)
				}
				for _, tg := range p.Targets {
					for _, m := range metricsOf(t, f+": "+p.Title, grafanaVars.Replace(tg.Expr)) {
						used[m] = true
						types[p.Type] = append(types[p.Type], m)
						if !known(names, m) {
							t.Errorf("%s: panel %q names %s, which aiforge does not register", f, p.Title, m)
						}
					}
				}
			}
		}
		walk(d.Panels)
		for _, v := range d.Templating.List {
			if q, ok := strings.CutPrefix(v.Definition, "label_values("); ok {
				m, _, _ := strings.Cut(q, ",")
				if !known(names, strings.TrimSpace(m)) {
					t.Errorf("%s: variable %s reads %s, which aiforge does not register", f, v.Name, m)
				}
			}
		}
		// The heatmaps are of the latency histograms' buckets.
		for _, h := range []string{"aiforge_edge_time_to_first_token_seconds_bucket", "aiforge_edge_inter_token_latency_seconds_bucket"} {
			if !slices.Contains(types["heatmap"], h) {
				t.Errorf("%s: no heatmap of %s", f, h)
			}
		}
	}

	rulesFiles, _ := filepath.Glob("prometheus/*rules*.yml")
	alertFiles, _ := filepath.Glob("prometheus/alerts*.yml")
	rulesFiles = append(rulesFiles, alertFiles...)
	if len(rulesFiles) == 0 {
		t.Fatal("no rule files")
	}
	alerts := map[string]bool{}
	for _, f := range rulesFiles {
		groups, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
		for _, err := range errs {
			t.Errorf("%s: %v", f, err)
		}
		if groups == nil {
			continue
		}
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				alerts[r.Alert] = true
				for _, m := range metricsOf(t, f+": "+r.Alert+r.Record, r.Expr) {
					used[m] = true
					if !known(names, m) {
						t.Errorf("%s: rule %s names %s, which aiforge does not register", f, r.Alert+r.Record, m)
					}
				}
			}
		}
	}
	for _, a := range []string{"AIForgeModelWithoutWorker", "AIForgeConsumerLag", "AIForgeDeadLetters", "AIForgeBudgetExhausted"} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}
	t.Logf("%d metrics registered, %d named by the dashboards and rules", len(names), len(used))
}

// TestProvisioningFiles: Grafana's provisioning, Prometheus's scrape
// configuration and the collector's configuration are YAML that names what
// exists.
func TestProvisioningFiles(t *testing.T) {
	read := func(p string) map[string]any {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		return v
	}
	ds := read("grafana/provisioning/datasources/prometheus.yml")
	if list, _ := ds["datasources"].([]any); len(list) != 1 {
		t.Fatalf("datasources %v", ds)
	}
	dp := read("grafana/provisioning/dashboards/aiforge.yml")
	if list, _ := dp["providers"].([]any); len(list) != 1 {
		t.Fatalf("dashboard providers %v", dp)
	}
	prom := read("prometheus/prometheus.yml")
	rf, _ := prom["rule_files"].([]any)
	if len(rf) == 0 {
		t.Fatal("prometheus.yml loads no rule files")
	}
	for _, r := range rf {
		// Mounted at /etc/prometheus in the compose stack.
		if _, err := os.Stat(filepath.Join("prometheus", filepath.Base(r.(string)))); err != nil {
			t.Errorf("rule file %v: %v", r, err)
		}
	}
	col := read("otel-collector.yml")
	if _, ok := col["receivers"].(map[string]any)["otlp"]; !ok {
		t.Fatal("the collector has no otlp receiver")
	}
}

// TestComposeObservabilityProfile validates the compose file with the
// observability profile, where docker compose is installed.
func TestComposeObservabilityProfile(t *testing.T) {
	var cmd []string
	if p, err := exec.LookPath("docker-compose"); err == nil {
		cmd = []string{p}
	} else if p, err := exec.LookPath("docker"); err == nil && exec.Command(p, "compose", "version").Run() == nil {
		cmd = []string{p, "compose"}
	} else {
		if os.Getenv("CI") == "true" {
			t.Fatal("neither docker-compose nor docker compose is installed, and CI must validate the compose file")
		}
		t.Skip("SKIP: neither docker-compose nor docker compose is installed; the compose file is not validated here")
	}
	run := func(args ...string) *exec.Cmd {
		c := exec.Command(cmd[0], append(cmd[1:], args...)...)
		// The stack's one mandatory variable; creds.sh's files need not exist
		// for the model to validate.
		c.Env = append(os.Environ(), "AIFORGE_ADMIN_KEY=compose-config-check")
		return c
	}
	args := []string{"-f", "../compose/docker-compose.yml", "--profile", "observability", "config", "--quiet"}
	out, err := run(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", strings.Join(cmd, " "), strings.Join(args, " "), err, out)
	}
	out, err = run("-f", "../compose/docker-compose.yml", "--profile", "observability", "config", "--services").CombinedOutput()
	if err != nil {
		t.Fatalf("config --services: %v\n%s", err, out)
	}
	for _, s := range []string{"prometheus", "grafana", "otel-collector"} {
		if !slices.Contains(strings.Fields(string(out)), s) {
			t.Errorf("the observability profile has no service %s: %s", s, out)
		}
	}
}
