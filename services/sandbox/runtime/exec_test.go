package runtime

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

func TestExecKeepsState(t *testing.T) {
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 512 << 20})

	run(t, sb, "python", "x = 41\nimport os")
	res := run(t, sb, "python", "print(x + 1)")
	wantOut(t, res, "42")
	if res.ExitCode != 0 || res.Error != nil {
		t.Fatalf("result %+v", res)
	}
	res = run(t, sb, "python", "raise ValueError('boom')")
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "ValueError: boom") {
		t.Fatalf("an exception: %+v", res)
	}
	wantOut(t, run(t, sb, "python", "print(x)"), "41")

	run(t, sb, "bash", "cd /tmp; export FOO=bar; mkdir -p d")
	wantOut(t, run(t, sb, "bash", "echo $FOO $(pwd)"), "bar /tmp")
	res = run(t, sb, "bash", "echo out; echo err >&2; false")
	if res.ExitCode != 1 || strings.TrimSpace(res.Stdout) != "out" || strings.TrimSpace(res.Stderr) != "err" {
		t.Fatalf("bash result %+v", res)
	}
	// exiting the shell restarts it
	res = run(t, sb, "bash", "exit 7")
	if res.ExitCode != 7 {
		t.Fatalf("exit 7: %+v", res)
	}
	wantOut(t, run(t, sb, "bash", "echo again"), "again")
	// python sees the files bash wrote, in /mnt/data by default
	run(t, sb, "bash", "cd /mnt/data && echo hello > f.txt")
	wantOut(t, run(t, sb, "python", "print(open('/mnt/data/f.txt').read().strip())"), "hello")
	if !sb.Alive() {
		t.Fatal("the sandbox died")
	}
}

// TestCoreutilsStat runs the tools that stat files with statx(2) and
// AT_NO_AUTOMOUNT (coreutils 9), which older gVisor refuses without the
// statx shim.
func TestCoreutilsStat(t *testing.T) {
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 512 << 20})
	res := run(t, sb, "bash", "cd /mnt/data && echo hi > a.txt && ls && ls -l a.txt | cut -c1-10 && stat -c %s a.txt && cp -a a.txt b.txt && find . -name b.txt")
	if res.ExitCode != 0 || res.Stdout != "a.txt\n-rw-r--r--\n3\n./b.txt\n" {
		t.Fatalf("ls, stat, cp -a, find: %+v", res)
	}
}

func TestExecStreams(t *testing.T) {
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 512 << 20})
	var mu sync.Mutex
	var chunks []sandbox.ExecChunk
	// The code waits for the host to have seen its first line before it
	// prints the second: only a streamed first chunk lets it go on.
	seen := make(chan struct{})
	var once sync.Once
	run(t, sb, "python", "import time, os")
	ctx := context.Background()
	go func() {
		<-seen
		// tell the code through a file, written by another call
		if err := sb.WriteFile(ctx, "/mnt/data/go", strings.NewReader("1"), 1); err != nil {
			t.Error(err)
		}
	}()
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Language: "python", Code: `
print("first", flush=True)
while not os.path.exists("/mnt/data/go"):
    time.sleep(0.01)
print("second")
import sys; print("oops", file=sys.stderr)`, TimeoutMS: 20000}, func(c sandbox.ExecChunk) {
		mu.Lock()
		chunks = append(chunks, c)
		mu.Unlock()
		if strings.Contains(c.Data, "first") {
			once.Do(func() { close(seen) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "first\nsecond\n" || res.Stderr != "oops\n" {
		t.Fatalf("result %+v", res)
	}
	var out, errs string
	for _, c := range chunks {
		switch c.Type {
		case sandbox.EventStdout:
			out += c.Data
		case sandbox.EventStderr:
			errs += c.Data
		default:
			t.Fatalf("chunk type %q", c.Type)
		}
	}
	if out != res.Stdout || errs != res.Stderr || len(chunks) < 3 {
		t.Fatalf("chunks %+v", chunks)
	}
}

func TestExecBusy(t *testing.T) {
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 512 << 20})
	started := make(chan struct{})
	done := make(chan Result, 1)
	go func() {
		res, _ := sb.Exec(context.Background(), sandbox.ExecRequest{Language: "bash", Code: "echo go; while [ ! -e /mnt/data/go ]; do sleep 0.01; done; echo done", TimeoutMS: 20000}, func(c sandbox.ExecChunk) {
			if c.Data == "go\n" {
				close(started)
			}
		})
		done <- res
	}()
	<-started
	_, err := sb.Exec(context.Background(), sandbox.ExecRequest{Language: "python", Code: "1"}, nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != sandbox.CodeSandboxBusy {
		t.Fatalf("a second exec: %v", err)
	}
	if err := sb.WriteFile(context.Background(), "/mnt/data/go", strings.NewReader(""), 0); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Stdout != "go\ndone\n" {
		t.Fatalf("first exec %+v", res)
	}
	res := run(t, sb, "python", "sum(range(10**6))")
	t.Logf("cpu %d ms, memory peak %d bytes", res.CPUMS, res.MemoryPeakBytes)
}

func TestTimeoutKills(t *testing.T) {
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 512 << 20})
	res := runT(t, sb, "bash", "sleep 100", time.Second)
	if res.Error == nil || res.Error.Code != sandbox.CodeExecTimeout || res.ExitCode != -1 {
		t.Fatalf("result %+v", res)
	}
	if sb.Alive() {
		t.Fatal("a timed-out sandbox must be killed")
	}
	if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Language: "python", Code: "1"}, nil); err == nil {
		t.Fatal("exec in a dead sandbox")
	}
}
