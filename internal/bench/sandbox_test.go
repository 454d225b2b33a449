package bench

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

// needSandboxBench fails under CI=true when runsc cannot run (.ci/run
// installs it and runs as root) and skips loudly elsewhere.
func needSandboxBench(t *testing.T) {
	t.Helper()
	if err := SandboxBenchAvailable(""); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPING: %v", err)
	}
}

// A small sandbox run measures every series on real gVisor sandboxes,
// counts every pool-off create as a cold start and none from the pool,
// and prints the ratios and the targets.
func TestRunSandbox(t *testing.T) {
	needSandboxBench(t)
	rep, err := RunSandbox(context.Background(), SandboxOptions{Execs: 5, Colds: 2})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]Series{
		"python direct": rep.Python.Direct, "python aiforge": rep.Python.Aiforge,
		"bash direct": rep.Bash.Direct, "bash aiforge": rep.Bash.Aiforge,
		"runsc do": rep.RunscDo, "runtime start": rep.RuntimeStart, "runtime first": rep.RuntimeFirst,
		"cold create": rep.ColdCreate, "cold first": rep.ColdFirst, "warm create": rep.WarmCreate, "warm first": rep.WarmFirst,
	} {
		if s.P50 <= 0 || s.P99 < s.P50 {
			t.Fatalf("%s: %+v", name, s)
		}
	}
	if rep.ColdStartsPoolOff != 2 || rep.ColdStartsPoolOn != 0 {
		t.Fatalf("cold starts %d pool off, %d pooled", rep.ColdStartsPoolOff, rep.ColdStartsPoolOn)
	}
	var b strings.Builder
	rep.Print(&b)
	for _, want := range []string{"python print(1+1), through aiforge", "bash echo 2, runtime directly", "runsc do /bin/true",
		"pool off: create + first exec", "target warm exec p50 < 10ms", "target cold < 1s"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("printed %q, lacks %q", b.String(), want)
		}
	}
}

// Without runsc the bench says so before starting anything.
func TestRunSandboxWithoutRunsc(t *testing.T) {
	_, err := RunSandbox(context.Background(), SandboxOptions{Runsc: "/nonexistent/runsc"})
	if !errors.Is(err, ErrSandboxBenchUnavailable) || !strings.Contains(err.Error(), "apt-get install runsc") {
		t.Fatalf("err %v", err)
	}
}
