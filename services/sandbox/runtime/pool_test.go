package runtime

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

// waitWarm waits, without sleeping, for the pool to report n warm of c
// (the pool's refill is what is tested; the poll is bounded by ctx).
func waitWarm(t *testing.T, p *Pool, c Class, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for p.Stats().Warm[c] < n {
		select {
		case <-ctx.Done():
			t.Fatalf("the pool did not warm %d of %+v: %+v", n, c, p.Stats())
		case <-tick.C:
		}
	}
}

func TestPool(t *testing.T) {
	rt := newTestRuntime(t, nil)
	small := Class{MemoryBytes: 256 << 20, Network: sandbox.NetworkDisabled}
	p, err := NewPool(rt, PoolConfig{Sizes: map[Class]int{small: 1}, MaxSandboxes: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	waitWarm(t, p, small, 1)

	a, warm, err := p.Get(ctx, Spec{MemoryBytes: 256 << 20, Labels: map[string]string{"tenant": "a"}})
	if err != nil || !warm {
		t.Fatalf("warm get: %v %v", warm, err)
	}
	wantOut(t, run(t, a, "python", "print('a')"), "a")
	// refilled in the background (1 warm + a = the cap of 2)
	waitWarm(t, p, small, 1)
	b, warm, err := p.Get(ctx, Spec{MemoryBytes: 256 << 20, Labels: map[string]string{"tenant": "b"}})
	if err != nil || !warm || b == a {
		t.Fatalf("second warm get: %v %v", warm, err)
	}
	// tenant b does not see tenant a's sandbox: another one, empty
	run(t, a, "bash", "echo secret > /mnt/data/a.txt")
	if files, err := b.ListFiles(ctx); err != nil || len(files) != 0 {
		t.Fatalf("b's files: %+v %v", files, err)
	}
	p.Release(a)
	if a.Alive() {
		t.Fatal("a released sandbox must be closed")
	}
	// the freed slot is refilled; a cold start of another class takes
	// the warm one's room
	waitWarm(t, p, small, 1)
	c, warm, err := p.Get(ctx, Spec{MemoryBytes: 512 << 20})
	if err != nil || warm {
		t.Fatalf("cold get: %v %v", warm, err)
	}
	// now b and c are handed out: the cap is reached
	if _, _, err := p.Get(ctx, Spec{MemoryBytes: 1 << 30}); !isCode(err, sandbox.CodeSandboxCapacity) {
		t.Fatalf("over MaxSandboxes: %v", err)
	}
	wantOut(t, run(t, c, "bash", "echo c"), "c")
	st := p.Stats()
	if st.Live != 2 || st.ColdStarts != 1 || st.Started < 3 {
		t.Fatalf("stats %+v", st)
	}
	p.Release(b)
	p.Release(c)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Live != 0 {
		t.Fatalf("after Run: %+v", st)
	}
	if ids := runscList(t, rt); len(ids) != 0 {
		t.Fatalf("sandboxes left: %v", ids)
	}
}

func isCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

func runscList(t *testing.T, rt *Runtime) []string {
	t.Helper()
	out, err := exec.Command("runsc", "--root="+filepath.Join(rt.cfg.StateDir, "runsc"), "list", "-quiet").Output()
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(string(out))
	sort.Strings(ids)
	return ids
}

// TestStaleSandboxesRemoved: a new runtime on the state dir of one that
// did not close (a crash) removes its sandboxes.
func TestStaleSandboxesRemoved(t *testing.T) {
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	if ids := runscList(t, rt); len(ids) != 1 || ids[0] != sb.ID() {
		t.Fatalf("running: %v", ids)
	}
	rt2, err := New(rt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	if ids := runscList(t, rt); len(ids) != 0 {
		t.Fatalf("left after New: %v", ids)
	}
	if sb.Alive() {
		// the old process's view learns it soon; the sandbox is gone
		<-sb.dead
	}
}

func TestRuntimeClose(t *testing.T) {
	rt := newTestRuntime(t, nil)
	startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	rt.Close()
	if ids := runscList(t, rt); len(ids) != 0 {
		t.Fatalf("left after Close: %v", ids)
	}
	if _, err := rt.Start(context.Background(), Spec{}); !isCode(err, sandbox.CodeSandboxUnavailable) {
		t.Fatalf("start after close: %v", err)
	}
}

func TestNewUnavailable(t *testing.T) {
	_, err := New(Config{StateDir: t.TempDir(), Runsc: "/nonexistent/runsc"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing runsc: %v", err)
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("no StateDir")
	}
}
