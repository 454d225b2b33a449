package runtime

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

// needRunsc skips (loudly) without runsc, and fails under CI=true.
func needRunsc(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("runsc is required in CI: %v", err)
		}
		t.Skipf("SKIPPING: runsc is not installed (%v); these tests run real gVisor sandboxes", err)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the runsc tests need root in CI")
		}
		t.Skip("SKIPPING: the runsc tests need root")
	}
}

func newTestRuntime(t testing.TB, mod func(*Config)) *Runtime {
	t.Helper()
	needRunsc(t)
	dir, err := os.MkdirTemp("", "sbxrt-")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{StateDir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if testing.Verbose() {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if mod != nil {
		mod(&cfg)
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rt.Close()
		os.RemoveAll(dir)
	})
	return rt
}

func startSandbox(t testing.TB, rt *Runtime, spec Spec) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

func run(t testing.TB, sb *Sandbox, lang, code string) Result {
	t.Helper()
	return runT(t, sb, lang, code, 30*time.Second)
}

func runT(t testing.TB, sb *Sandbox, lang, code string, timeout time.Duration) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Language: lang, Code: code, TimeoutMS: timeout.Milliseconds()}, nil)
	if err != nil {
		t.Fatalf("exec %q: %v", code, err)
	}
	return res
}

func wantOut(t testing.TB, res Result, want string) {
	t.Helper()
	if strings.TrimSpace(res.Stdout) != want {
		t.Fatalf("stdout %q, want %q (stderr %q, exit %d, error %+v)", res.Stdout, want, res.Stderr, res.ExitCode, res.Error)
	}
}
