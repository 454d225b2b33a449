package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

// The hostile suite: each attack is contained with a clear result, and the
// runtime keeps serving (another sandbox starts and runs code).

func stillServes(t *testing.T, rt *Runtime) {
	t.Helper()
	sb := startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	wantOut(t, run(t, sb, "python", "print(6*7)"), "42")
	sb.Close()
}

func TestMemoryBomb(t *testing.T) {
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	// In the agent: RLIMIT_AS gives a clean MemoryError, the sandbox lives.
	res := run(t, sb, "python", "b = bytearray(400 << 20)")
	if res.Error == nil || res.Error.Code != sandbox.CodeMemoryLimit || !strings.Contains(res.Stderr, "MemoryError") {
		t.Fatalf("python memory bomb: %+v", res)
	}
	if !sb.Alive() {
		t.Fatal("a MemoryError must not kill the sandbox")
	}
	wantOut(t, run(t, sb, "python", "print('alive')"), "alive")

	// Two processes, each under RLIMIT_AS, together over the cgroup's
	// limit: the whole sandbox is killed and reported.
	res = run(t, sb, "bash", `for i in 1 2 3; do python3 -c 'b = bytearray(120 << 20); b[::4096] = b"x" * len(b[::4096]); import time; time.sleep(30)' & done; wait`)
	if res.Error == nil || res.Error.Code != sandbox.CodeMemoryLimit {
		t.Fatalf("cgroup memory bomb: %+v", res)
	}
	if sb.Alive() {
		t.Fatal("the sandbox went over its cgroup limit and must be dead")
	}
	stillServes(t, rt)
}

func TestForkBomb(t *testing.T) {
	rt := newTestRuntime(t, func(c *Config) { c.Pids = 64 })
	sb := startSandbox(t, rt, Spec{MemoryBytes: 512 << 20})
	// The shell that sets the bomb off forks nothing afterwards: bash
	// retries a refused fork for 15 s, so a "sleep" after the bomb would
	// end only when the bomb lets it. It waits on a pipe that never
	// delivers (read -t is a builtin) until a bomb process reports the
	// refused fork in the file its stderr goes to (mapfile is a builtin
	// too), then says so. The exec's timeout only bounds a run that never
	// sees the limit.
	const code = `exec 7< <(exec sleep 600)
bomb() { bomb | bomb & }
bomb 2>>bomb.err
for ((i = 0; i < 1200; i++)); do
  read -t 0.05 -u 7
  mapfile -t lines < bomb.err
  for l in "${lines[@]}"; do
    if [[ $l == *"Resource temporarily unavailable"* ]]; then
      printf '%s\n' "$l" >&2
      echo contained
      break 2
    fi
  done
done`
	res := runT(t, sb, "bash", code, 60*time.Second)
	t.Logf("fork bomb: exit %d error %+v stdout %q stderr %.200q", res.ExitCode, res.Error, res.Stdout, res.Stderr)
	if res.Error != nil || strings.TrimSpace(res.Stdout) != "contained" || !strings.Contains(res.Stderr, "Resource temporarily unavailable") || !sb.Alive() {
		t.Fatalf("the fork bomb was not limited inside: %+v", res)
	}
	// contained inside: the sandbox still answers, once the bomb is gone
	run(t, sb, "bash", "kill -9 -1 2>/dev/null; true")
	wantOut(t, run(t, sb, "python", "print('ok')"), "ok")
	wantOut(t, run(t, sb, "bash", "/bin/echo forks again"), "forks again")
	stillServes(t, rt)
}

// The agent is the sandbox's init: a process whose parent is gone becomes
// its child, and a zombie it never reaped would hold one of the sandbox's
// process slots for ever. Each round leaves an orphan behind (the subshell
// ends, its background child ends later); with 64 slots, 200 of them go
// through only if the agent reaps them while the exec runs.
func TestOrphansDoNotHoldProcessSlots(t *testing.T) {
	rt := newTestRuntime(t, func(c *Config) { c.Pids = 64 })
	sb := startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	res := runT(t, sb, "bash", `for ((i = 0; i < 200; i++)); do ( /bin/true & ) || break; done; echo "$i"`, 120*time.Second)
	if strings.TrimSpace(res.Stdout) != "200" || res.Error != nil {
		t.Fatalf("orphans held the process slots: %+v", res)
	}
	wantOut(t, run(t, sb, "bash", "/bin/echo still forks"), "still forks")
}

func TestInfiniteLoopCPULimit(t *testing.T) {
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	run(t, sb, "python", "kept = 1")
	res := runT(t, sb, "python", "while True: pass", 3*time.Second)
	if res.Error == nil || (res.Error.Code != sandbox.CodeCPULimit && res.Error.Code != sandbox.CodeExecTimeout) {
		t.Fatalf("busy loop: %+v", res)
	}
	if res.Error.Code == sandbox.CodeCPULimit {
		wantOut(t, run(t, sb, "python", "print(kept)"), "1")
	} else {
		// On a loaded machine the wall clock can run out before the CPU
		// time: then the sandbox was killed, and the bash loop needs a new
		// one.
		if sb.Alive() {
			t.Fatal("a timed-out sandbox must be dead")
		}
		sb = startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	}
	res = runT(t, sb, "bash", "while :; do :; done", 3*time.Second)
	if res.Error == nil {
		t.Fatalf("bash busy loop: %+v", res)
	}
	stillServes(t, rt)
}

func TestDiskFill(t *testing.T) {
	rt := newTestRuntime(t, func(c *Config) { c.DiskBytes = 32 << 20 })
	sb := startSandbox(t, rt, Spec{MemoryBytes: 512 << 20})
	res := run(t, sb, "bash", "dd if=/dev/zero of=/mnt/data/big bs=1M count=100; echo rc=$?")
	if !strings.Contains(res.Stderr, "No space left on device") {
		t.Fatalf("disk fill: %+v", res)
	}
	err := sb.WriteFile(context.Background(), "/mnt/data/more", strings.NewReader(strings.Repeat("x", 1<<20)), 1<<20)
	var e *Error
	if !errors.As(err, &e) || e.Code != sandbox.CodeFileTooLarge {
		t.Fatalf("upload to a full disk: %v", err)
	}
	wantOut(t, run(t, sb, "python", "import os; os.remove('/mnt/data/big'); print('freed')"), "freed")
	if err := sb.WriteFile(context.Background(), "/mnt/data/more", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	// the root is read-only
	res = run(t, sb, "bash", "touch /usr/x /etc/x /x 2>&1; echo done")
	if strings.Count(res.Stdout, "Read-only")+strings.Count(res.Stdout, "Permission denied") != 3 {
		t.Fatalf("read-only root: %+v", res)
	}
}

func TestOutputCapped(t *testing.T) {
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 512 << 20})
	var streamed int
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Language: "bash", Code: "head -c 1000000000 /dev/zero | tr '\\0' x; echo; echo tail >&2", TimeoutMS: 120000}, func(c sandbox.ExecChunk) {
		streamed += len(c.Data)
	})
	if err != nil {
		t.Fatal(err)
	}
	limit := int(rt.cfg.MaxOutputBytes)
	if res.Error != nil || !res.StdoutTruncated || len(res.Stdout) != limit || streamed > 2*limit || res.Stderr != "tail\n" {
		t.Fatalf("1 GB of stdout: error %+v truncated %v, %d bytes kept, %d streamed, stderr %q", res.Error, res.StdoutTruncated, len(res.Stdout), streamed, res.Stderr)
	}
	wantOut(t, run(t, sb, "python", "print('next')"), "next")
}

func TestNoHostEnvironment(t *testing.T) {
	t.Setenv("AIFORGE_TEST_SECRET", "s3cr3t-value")
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	res := run(t, sb, "bash", "cat /proc/self/environ /proc/1/environ | tr '\\0' '\\n'; env")
	if strings.Contains(res.Stdout, "s3cr3t") || strings.Contains(res.Stdout, "AIFORGE_TEST_SECRET") || !strings.Contains(res.Stdout, "HOME=/mnt/data") {
		t.Fatalf("environment: %q", res.Stdout)
	}
	res = run(t, sb, "python", "import os; print(os.getuid(), os.getgid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0])")
	wantOut(t, res, "1000 1000 0000000000000000")
}

func TestNetworkDisabled(t *testing.T) {
	rt := newTestRuntime(t, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "host secret") }))
	defer srv.Close()
	nats, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nats.Close()
	_, httpPort, _ := net.SplitHostPort(srv.Listener.Addr().String())
	_, natsPort, _ := net.SplitHostPort(nats.Addr().String())
	sb := startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	code := fmt.Sprintf(`
import socket
for host, port in [("169.254.169.254", 80), ("127.0.0.1", %s), ("127.0.0.1", %s), ("10.0.0.1", 4222), ("8.8.8.8", 53)]:
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        print("CONNECTED", host, port)
    except OSError as e:
        print("refused", host, port, e)
    s.close()
`, httpPort, natsPort)
	res := run(t, sb, "python", code)
	if strings.Contains(res.Stdout, "CONNECTED") || strings.Count(res.Stdout, "\nrefused ") != 4 {
		t.Fatalf("network: %+v", res)
	}
}

func TestFileTricks(t *testing.T) {
	rt := newTestRuntime(t, nil)
	sb := startSandbox(t, rt, Spec{MemoryBytes: 256 << 20})
	ctx := context.Background()
	codeOf := func(err error) string {
		var e *Error
		if errors.As(err, &e) {
			return e.Code
		}
		return fmt.Sprint(err)
	}
	for _, p := range []string{"/mnt/data/../etc/passwd", "/etc/passwd", "/mnt/data/a/../../x", "relative", "/mnt/data/"} {
		if err := sb.WriteFile(ctx, p, strings.NewReader("x"), 1); codeOf(err) != sandbox.CodeInvalidPath {
			t.Errorf("write %q: %v", p, err)
		}
		if _, err := sb.ReadFile(ctx, p, &strings.Builder{}, 100); codeOf(err) != sandbox.CodeInvalidPath {
			t.Errorf("read %q: %v", p, err)
		}
	}
	// links the code makes, pointing out of /mnt/data
	run(t, sb, "bash", "cd /mnt/data && ln -s /etc/passwd pw && ln -s /usr/bin bin && ln -s /tmp tmp && echo secret > /tmp/s")
	for _, p := range []string{"/mnt/data/pw", "/mnt/data/bin/python3", "/mnt/data/tmp/s", "/mnt/data/tmp/new"} {
		var b strings.Builder
		if _, err := sb.ReadFile(ctx, p, &b, 1<<20); codeOf(err) != sandbox.CodeInvalidPath || b.Len() > 0 {
			t.Errorf("read through a link %q: %v %q", p, err, b.String())
		}
		if err := sb.WriteFile(ctx, p, strings.NewReader("x"), 1); codeOf(err) != sandbox.CodeInvalidPath {
			t.Errorf("write through a link %q: %v", p, err)
		}
	}
	wantOut(t, run(t, sb, "bash", "cat /tmp/s"), "secret")
	if _, err := sb.ReadFile(ctx, "/mnt/data/nothing", &strings.Builder{}, 10); codeOf(err) != sandbox.CodeFileNotFound {
		t.Errorf("missing file: %v", err)
	}
	// the normal path
	content := strings.Repeat("0123456789", 20000)
	if err := sb.WriteFile(ctx, "/mnt/data/dir/sub/f.txt", strings.NewReader(content), int64(len(content))); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if n, err := sb.ReadFile(ctx, "/mnt/data/dir/sub/f.txt", &b, 1<<20); err != nil || n != int64(len(content)) || b.String() != content {
		t.Fatalf("read back: %d %v", n, err)
	}
	if _, err := sb.ReadFile(ctx, "/mnt/data/dir/sub/f.txt", &strings.Builder{}, 100); codeOf(err) != sandbox.CodeFileTooLarge {
		t.Errorf("over max: %v", err)
	}
	files, err := sb.ListFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	if strings.Join(paths, ",") != "/mnt/data/dir/sub/f.txt" || files[0].Bytes != int64(len(content)) {
		t.Fatalf("list: %+v", files)
	}
	if err := sb.RemoveFile(ctx, "/mnt/data/dir/sub/f.txt"); err != nil {
		t.Fatal(err)
	}
	if err := sb.RemoveFile(ctx, "/mnt/data/dir/sub/f.txt"); codeOf(err) != sandbox.CodeFileNotFound {
		t.Fatalf("remove twice: %v", err)
	}
}
