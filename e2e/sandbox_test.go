package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/sandbox"
)

// needRunsc fails under CI=true when gVisor is missing (.ci/run installs
// it) and skips loudly elsewhere.
func needRunsc(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("runsc (gVisor) is not installed: .ci/run installs it with apt-get install runsc")
		}
		t.Skip("SKIPPING: runsc (gVisor) is not installed (apt-get install runsc); the sandbox suite needs it")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the sandbox suite runs runsc, which needs root here")
		}
		t.Skip("SKIPPING: runsc needs root on this machine")
	}
}

// sandboxStack is the all-in-one process with its sandbox service.
func sandboxStack(t *testing.T) *stack {
	t.Helper()
	needRunsc(t)
	return startStack(t, stackOpts{mutate: func(o *app.Options) { o.Sandbox.Pool = "1g=2" }})
}

type sbxClient struct {
	t   *testing.T
	s   *stack
	key string
}

func (c *sbxClient) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.s.url+path, r)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c *sbxClient) create(body map[string]any) sandbox.Container {
	c.t.Helper()
	st, b := c.do("POST", "/v1/containers", body)
	if st != http.StatusOK {
		c.t.Fatalf("create container: %d %s", st, b)
	}
	var ct sandbox.Container
	if err := json.Unmarshal(b, &ct); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { c.do("DELETE", "/v1/containers/"+ct.ID, nil) })
	return ct
}

// in is the client for subtest t.
func (c *sbxClient) in(t *testing.T) *sbxClient { return &sbxClient{t: t, s: c.s, key: c.key} }

func (c *sbxClient) exec(id, lang, code string, timeoutMS int64) sandbox.ExecResult {
	c.t.Helper()
	st, b := c.do("POST", "/v1/containers/"+id+"/exec", map[string]any{"language": lang, "code": code, "timeout_ms": timeoutMS})
	if st != http.StatusOK {
		c.t.Fatalf("exec %q: %d %s", code, st, b)
	}
	var r sandbox.ExecResult
	if err := json.Unmarshal(b, &r); err != nil {
		c.t.Fatal(err)
	}
	return r
}

// apiError decodes an OpenAI error body.
func apiError(t *testing.T, b []byte) (code, param, message string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Param   string `json:"param"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("not an OpenAI error body: %s", b)
	}
	return e.Error.Code, e.Error.Param, e.Error.Message
}

// stillServes asserts the service answers a fresh container's exec, after
// a hostile one.
func (c *sbxClient) stillServes(what string) {
	c.t.Helper()
	ct := c.create(map[string]any{"name": "after " + what})
	r := c.exec(ct.ID, "python", "print(1+1)", 10_000)
	if r.Stdout != "2\n" || r.ExitCode != 0 {
		c.t.Fatalf("after %s a fresh container answered %+v", what, r)
	}
}

// TestSandboxHostileSuite runs what a hostile tenant would try, each in
// its own container under gVisor, and checks that each is contained with
// a clear error and that the service goes on serving.
func TestSandboxHostileSuite(t *testing.T) {
	s := sandboxStack(t)
	keyA, _ := s.tenantKey("sbx-a")
	keyB, _ := s.tenantKey("sbx-b")
	a := &sbxClient{t: t, s: s, key: keyA}
	b := &sbxClient{t: t, s: s, key: keyB}

	// A secret in the service's own environment, and a loopback HTTP server
	// and a port standing for NATS on the host: none of them may be reached.
	t.Setenv("AIFORGE_TEST_HOST_SECRET", "host-secret-5f2a9c")
	hits := 0
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer web.Close()
	natsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer natsLn.Close()
	natsPort := natsLn.Addr().(*net.TCPAddr).Port
	webPort := web.Listener.Addr().(*net.TCPAddr).Port

	t.Run("fork bomb", func(t *testing.T) {
		a := a.in(t)
		ct := a.create(map[string]any{"name": "fork bomb"})
		// Tenant B's container, made before the bomb goes off, answers
		// while it runs.
		b := b.in(t)
		bct := b.create(map[string]any{"name": "neighbour"})
		bombed := make(chan sandbox.ExecResult, 1)
		go func() {
			_, body := a.do("POST", "/v1/containers/"+ct.ID+"/exec", map[string]any{"language": "bash", "code": `bomb() { bomb | bomb & }; bomb; sleep 5`, "timeout_ms": 5_000})
			var r sandbox.ExecResult
			_ = json.Unmarshal(body, &r)
			bombed <- r
		}()
		if r := b.exec(bct.ID, "python", "print(sum(range(10)))", 30_000); r.Stdout != "45\n" {
			t.Fatalf("tenant B's exec during A's fork bomb: %+v", r)
		}
		r := <-bombed
		if r.ExitCode == 0 && r.Error == nil {
			t.Fatalf("a fork bomb exited cleanly: %+v", r)
		}
		if r.Error != nil && r.Error.Message == "" {
			t.Fatalf("a fork bomb stopped without a message: %+v", r.Error)
		}
		t.Logf("fork bomb: exit %d error %+v stderr %.200q", r.ExitCode, r.Error, r.Stderr)
		a.stillServes("a fork bomb")
	})

	t.Run("memory bomb", func(t *testing.T) {
		a := a.in(t)
		ct := a.create(map[string]any{"name": "memory bomb", "memory_limit": "1g"})
		r := a.exec(ct.ID, "python", "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))\n", 60_000)
		memErr := r.Error != nil && r.Error.Code == sandbox.CodeMemoryLimit
		if !memErr && !strings.Contains(r.Stderr, "MemoryError") {
			t.Fatalf("a memory bomb was not stopped by the memory limit: %+v", r)
		}
		t.Logf("memory bomb: exit %d error %+v stderr %.120q", r.ExitCode, r.Error, r.Stderr)
		a.stillServes("a memory bomb")
	})

	t.Run("disk fill", func(t *testing.T) {
		a := a.in(t)
		ct := a.create(map[string]any{"name": "disk fill"})
		r := a.exec(ct.ID, "bash", `dd if=/dev/zero of=/mnt/data/fill bs=1M count=100000 2>&1; echo "dd exited $?"; dd if=/dev/zero of=/tmp/fill bs=1M count=100000 2>&1 | tail -1`, 60_000)
		if !strings.Contains(r.Stdout, "No space left on device") {
			t.Fatalf("filling the disk did not end in ENOSPC: %+v", r)
		}
		// The container still answers, and its files can be removed.
		r = a.exec(ct.ID, "bash", `rm -f /mnt/data/fill /tmp/fill && echo freed`, 10_000)
		if r.Stdout != "freed\n" {
			t.Fatalf("after the disk filled the container answered %+v", r)
		}
		a.stillServes("a disk fill")
	})

	t.Run("infinite loop", func(t *testing.T) {
		a := a.in(t)
		ct := a.create(map[string]any{"name": "loop"})
		r := a.exec(ct.ID, "python", "while True:\n    pass\n", 1_000)
		if r.Error == nil || (r.Error.Code != sandbox.CodeExecTimeout && r.Error.Code != sandbox.CodeCPULimit) {
			t.Fatalf("an infinite loop was not stopped: %+v", r)
		}
		if r.Error.Message == "" {
			t.Fatalf("the timeout has no message: %+v", r.Error)
		}
		// The same container serves the next exec (on a fresh sandbox).
		r = a.exec(ct.ID, "python", "print('next')", 10_000)
		if r.Stdout != "next\n" {
			t.Fatalf("after a timeout the container answered %+v", r)
		}
		a.stillServes("an infinite loop")
	})

	t.Run("environment", func(t *testing.T) {
		a := a.in(t)
		ct := a.create(map[string]any{"name": "environ"})
		r := a.exec(ct.ID, "python", `for p in ("/proc/self/environ", "/proc/1/environ"):
    try:
        print(p, open(p, "rb").read().replace(b"\0", b" ").decode())
    except OSError as e:
        print(p, "unreadable:", e)
`, 10_000)
		if r.ExitCode != 0 || !strings.Contains(r.Stdout, "/proc/1/environ") {
			t.Fatalf("reading the environment failed: %+v", r)
		}
		for _, secret := range []string{"host-secret-5f2a9c", adminKey, "AIFORGE_", "NATS", "nkey", keyA} {
			if strings.Contains(r.Stdout, secret) {
				t.Fatalf("the sandbox sees %q in its environment: %s", secret, r.Stdout)
			}
		}
	})

	t.Run("network", func(t *testing.T) {
		a := a.in(t)
		ct := a.create(map[string]any{"name": "network"})
		for _, target := range []string{"169.254.169.254:80", fmt.Sprintf("127.0.0.1:%d", webPort), fmt.Sprintf("127.0.0.1:%d", natsPort), "10.0.0.1:4222"} {
			host, port, _ := strings.Cut(target, ":")
			r := a.exec(ct.ID, "python", fmt.Sprintf(`import socket
s = socket.socket()
s.settimeout(3)
try:
    s.connect((%q, %s))
    print("CONNECTED")
except OSError as e:
    print("refused:", e)
`, host, port), 20_000)
			if strings.Contains(r.Stdout, "CONNECTED") || !strings.Contains(r.Stdout, "refused:") {
				t.Fatalf("connecting to %s from the sandbox: %+v", target, r)
			}
		}
		r := a.exec(ct.ID, "bash", fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/%d && echo CONNECTED || echo refused`, webPort), 20_000)
		if strings.Contains(r.Stdout, "CONNECTED") {
			t.Fatalf("bash reached the host's loopback server: %+v", r)
		}
		if hits != 0 {
			t.Fatalf("the host's loopback HTTP server was reached %d times", hits)
		}
	})

	t.Run("allow-list egress", func(t *testing.T) {
		a := a.in(t)
		ct := a.create(map[string]any{"name": "egress", "network_policy": map[string]any{"type": "allowlist", "allowed_domains": []string{"pypi.org"}}})
		if ct.NetworkPolicy == nil || ct.NetworkPolicy.Type != sandbox.NetworkAllowlist {
			t.Fatalf("container = %+v", ct)
		}
		// Through the proxy the environment names, and around it: the
		// metadata address, the host's loopback server, the NATS port, an
		// unlisted name are all refused.
		r := a.exec(ct.ID, "python", fmt.Sprintf(`import os, socket, urllib.request
print("proxy", os.environ.get("HTTP_PROXY"))
for url in ("http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:%d/", "http://127.0.0.1:%d/", "http://example.org/"):
    try:
        urllib.request.urlopen(url, timeout=5)
        print("REACHED", url)
    except Exception as e:
        print("refused", url, type(e).__name__, getattr(e, "code", ""))
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1", %d))
    print("REACHED direct")
except OSError as e:
    print("refused direct", e)
`, webPort, natsPort, webPort), 60_000)
		if strings.Contains(r.Stdout, "REACHED") || strings.Count(r.Stdout, "\nrefused ") != 5 || !strings.Contains(r.Stdout, "proxy http://127.0.0.1:") {
			t.Fatalf("allow-list egress: %+v", r)
		}
		if hits != 0 {
			t.Fatalf("the host's loopback HTTP server was reached %d times", hits)
		}
		for _, bad := range []string{"169.254.169.254", "localhost", "10.0.0.1", "metadata.google.internal", "*"} {
			st, body := a.do("POST", "/v1/containers", map[string]any{"name": "bad", "network_policy": map[string]any{"type": "allowlist", "allowed_domains": []string{bad}}})
			if st != http.StatusBadRequest {
				t.Fatalf("allow-list of %q: %d %s", bad, st, body)
			}
		}
	})

	t.Run("file name tricks", func(t *testing.T) {
		a := a.in(t)
		ct := a.create(map[string]any{"name": "paths"})
		for _, name := range []string{"../../etc/passwd", "/etc/passwd", "a/../../b", "/mnt/data/../../etc/shadow", "..", "/mnt/data"} {
			st, body := uploadContainerFile(t, s.url, keyA, ct.ID, name, []byte("pwned"))
			if st != http.StatusBadRequest {
				t.Fatalf("upload as %q: %d %s", name, st, body)
			}
			if code, _, _ := apiError(t, body); code != sandbox.CodeInvalidPath {
				t.Fatalf("upload as %q: code %q, want %s", name, code, sandbox.CodeInvalidPath)
			}
		}
		// Links made by code point out of /mnt/data: reading them through
		// the files API is refused, and nothing outside is disclosed.
		r := a.exec(ct.ID, "bash", `ln -s /etc/passwd /mnt/data/passwd && ln -s /proc/1/environ /mnt/data/env && ln -s .. /mnt/data/up && echo linked`, 10_000)
		if r.Stdout != "linked\n" {
			t.Fatalf("making links: %+v", r)
		}
		st, body := a.do("GET", "/v1/containers/"+ct.ID+"/files", nil)
		if st != http.StatusOK {
			t.Fatalf("list files: %d %s", st, body)
		}
		var list sandbox.List[sandbox.File]
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		for _, f := range list.Data {
			st, content := a.do("GET", "/v1/containers/"+ct.ID+"/files/"+f.ID+"/content", nil)
			if st == http.StatusOK && (bytes.Contains(content, []byte("root:")) || bytes.Contains(content, []byte("PATH="))) {
				t.Fatalf("the files API followed %s out of /mnt/data: %s", f.Path, content)
			}
		}
		a.stillServes("file name tricks")
	})

	t.Run("a gigabyte of stdout", func(t *testing.T) {
		a := a.in(t)
		ct := a.create(map[string]any{"name": "flood"})
		r := a.exec(ct.ID, "python", "import os\nb = b'x' * (1 << 20)\nfor _ in range(1024):\n    os.write(1, b)\n", 120_000)
		if !r.StdoutTruncated || int64(len(r.Stdout)) > 8<<20 {
			t.Fatalf("1 GB of stdout: truncated=%v, %d bytes kept", r.StdoutTruncated, len(r.Stdout))
		}
		t.Logf("1 GB of stdout: kept %d bytes, truncated, exit %d, error %+v, %d ms", len(r.Stdout), r.ExitCode, r.Error, r.DurationMS)
		a.stillServes("a gigabyte of stdout")
	})

	t.Run("tenants", func(t *testing.T) {
		a, b := a.in(t), b.in(t)
		ct := a.create(map[string]any{"name": "private"})
		st, body := uploadContainerFile(t, s.url, keyA, ct.ID, "secret.txt", []byte("tenant A's secret"))
		if st != http.StatusOK {
			t.Fatalf("upload: %d %s", st, body)
		}
		var f sandbox.File
		if err := json.Unmarshal(body, &f); err != nil {
			t.Fatal(err)
		}
		for _, call := range []struct{ method, path string }{
			{"GET", "/v1/containers/" + ct.ID},
			{"GET", "/v1/containers/" + ct.ID + "/files"},
			{"GET", "/v1/containers/" + ct.ID + "/files/" + f.ID},
			{"GET", "/v1/containers/" + ct.ID + "/files/" + f.ID + "/content"},
			{"DELETE", "/v1/containers/" + ct.ID + "/files/" + f.ID},
			{"DELETE", "/v1/containers/" + ct.ID},
		} {
			st, body := b.do(call.method, call.path, nil)
			if st != http.StatusNotFound || bytes.Contains(body, []byte("secret")) {
				t.Fatalf("tenant B %s %s: %d %s", call.method, call.path, st, body)
			}
		}
		st, body = b.do("POST", "/v1/containers/"+ct.ID+"/exec", map[string]any{"language": "bash", "code": "cat /mnt/data/secret.txt"})
		if st != http.StatusNotFound {
			t.Fatalf("tenant B exec in A's container: %d %s", st, body)
		}
		st, body = b.do("GET", "/v1/containers", nil)
		if st != http.StatusOK || bytes.Contains(body, []byte(ct.ID)) {
			t.Fatalf("tenant B lists A's container: %d %s", st, body)
		}
		// B's own container sees nothing of A's.
		bct := b.create(map[string]any{"name": "mine"})
		r := b.exec(bct.ID, "bash", "ls -A /mnt/data; cat /mnt/data/secret.txt 2>&1 || true", 10_000)
		if strings.Contains(r.Stdout, "tenant A's secret") {
			t.Fatalf("tenant B read A's file: %+v", r)
		}
		// And A still reads it.
		st, content := a.do("GET", "/v1/containers/"+ct.ID+"/files/"+f.ID+"/content", nil)
		if st != http.StatusOK || string(content) != "tenant A's secret" {
			t.Fatalf("tenant A reads its file: %d %q", st, content)
		}
	})
}

// uploadContainerFile uploads content as a multipart file named name.
func uploadContainerFile(t *testing.T, base, key, container, name string, content []byte) (int, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	h := make(map[string][]string)
	h["Content-Disposition"] = []string{fmt.Sprintf(`form-data; name="file"; filename=%q`, name)}
	h["Content-Type"] = []string{"application/octet-stream"}
	part, err := mw.CreatePart(h)
	if err != nil {
		t.Fatal(err)
	}
	part.Write(content)
	mw.Close()
	req, _ := http.NewRequest("POST", base+"/v1/containers/"+container+"/files", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
