package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/events"
	api "github.com/aiforge/aiforge/pkg/sandbox"
)

// realEnv runs the service on the real gVisor runtime (built by New from
// the Config, as in production).
func realEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	requireRunsc(t)
	// A short state directory: runsc keeps unix sockets under it.
	dir, err := os.MkdirTemp("", "sbxsvc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cfg.StateDir = dir
	if cfg.Pool == "" {
		cfg.Pool = "1g=1"
	}
	if cfg.MaxSandboxes == 0 {
		cfg.MaxSandboxes = 8
	}
	e := newBus(t)
	e.start(cfg, nil) // stopped before dir is removed (cleanups run last first)
	return e
}

func TestRunscContainerLifecycle(t *testing.T) {
	e := realEnv(t, Config{})
	e.putFile(tenantA, "file-data", "data.csv", []byte("a,b\n1,2\n3,4\n"))
	c := e.create(tenantA, api.CreateRequest{Name: "analysis", FileIDs: []string{"file-data"}})

	// Python: the file is there, and state persists across execs.
	r := e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: `
import csv
rows = list(csv.DictReader(open("/mnt/data/data.csv")))
total = sum(int(r["a"]) + int(r["b"]) for r in rows)
print(total)
`})
	if r.Error != nil || strings.TrimSpace(r.Stdout) != "10" || r.ExitCode != 0 {
		t.Fatalf("python %+v", r)
	}
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: "print(total * 2)"})
	if strings.TrimSpace(r.Stdout) != "20" {
		t.Fatalf("python state %+v", r)
	}
	// Bash: a resident shell keeps its variables and directory.
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "bash", Code: "export FOO=bar; cd /mnt/data; echo $((6*7))"})
	if strings.TrimSpace(r.Stdout) != "42" || r.ExitCode != 0 {
		t.Fatalf("bash %+v", r)
	}
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "bash", Code: "echo $FOO $(pwd); ls"})
	if !strings.Contains(r.Stdout, "bar /mnt/data") || !strings.Contains(r.Stdout, "data.csv") {
		t.Fatalf("bash state %+v", r)
	}
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "bash", Code: "exit 3"})
	if r.ExitCode != 3 {
		t.Fatalf("bash exit %+v", r)
	}

	// Code writes a file: it is in the result and the list, and downloads.
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: `
import os
os.makedirs("/mnt/data/out", exist_ok=True)
open("/mnt/data/out/report.txt", "w").write("total=%d\n" % total)
`})
	if r.Error != nil || len(r.Files) != 1 || r.Files[0].Path != "/mnt/data/out/report.txt" || r.Files[0].Source != api.SourceAssistant || r.Files[0].Bytes != 9 {
		t.Fatalf("written files %+v", r)
	}
	report := r.Files[0]
	var files api.List[api.File]
	e.ok(events.SandboxContainer(c.ID, api.OpFileList), tenantA, api.ListRequest{Order: "asc"}, &files)
	if len(files.Data) != 2 || files.Data[0].Path != "/mnt/data/data.csv" || files.Data[0].Source != api.SourceUser || files.Data[1] != report {
		t.Fatalf("files %+v", files)
	}
	if got := e.content(tenantA, c.ID, report.ID); string(got) != "total=10\n" {
		t.Fatalf("content %q", got)
	}

	// An upload the edge stored goes in, and code sees it.
	key := api.UploadKey(tenantA, c.ID, "up1")
	if _, err := e.objects.Put(testCtx(t), key, bytes.NewReader([]byte("hello from the upload")), 21, ""); err != nil {
		t.Fatal(err)
	}
	var up api.File
	e.ok(events.SandboxContainer(c.ID, api.OpFileCreate), tenantA, api.FileRequest{ObjectKey: key, Name: "notes/in.txt", Bytes: 21}, &up)
	if up.Path != "/mnt/data/notes/in.txt" || up.Bytes != 21 {
		t.Fatalf("upload %+v", up)
	}
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "bash", Code: "cat /mnt/data/notes/in.txt"})
	if r.Stdout != "hello from the upload" {
		t.Fatalf("upload read %+v", r)
	}
	// Symlink tricks: a link out of /mnt/data is not followed when read.
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "bash", Code: "ln -s /etc/passwd /mnt/data/pw; echo done"})
	for _, f := range r.Files {
		if f.Path == "/mnt/data/pw" {
			var cr api.ContentReply
			m := e.mustRequest(events.SandboxContainer(c.ID, api.OpFileContent), tenantA, api.FileRequest{ID: f.ID})
			if m.status == 200 {
				_ = json.Unmarshal(m.body, &cr)
				t.Fatalf("a symlink out of /mnt/data was read: %+v", cr)
			}
		}
	}
	// Delete a file.
	e.ok(events.SandboxContainer(c.ID, api.OpFileDelete), tenantA, api.FileRequest{ID: report.ID}, nil)
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "bash", Code: "test -e /mnt/data/out/report.txt && echo there || echo gone"})
	if strings.TrimSpace(r.Stdout) != "gone" {
		t.Fatalf("deleted file %+v", r)
	}

	// Tenant B sees nothing of it.
	for _, op := range []string{api.OpGet, api.OpExec, api.OpFileList, api.OpFileContent} {
		var body any
		switch op {
		case api.OpExec:
			body = api.ExecRequest{Language: "bash", Code: "cat /mnt/data/data.csv"}
		case api.OpFileContent:
			body = api.FileRequest{ID: files.Data[0].ID}
		}
		e.fails(events.SandboxContainer(c.ID, op), tenantB, body, 404, api.CodeContainerNotFound)
	}

	var d api.Deleted
	e.ok(events.SandboxContainer(c.ID, api.OpDelete), tenantA, nil, &d)
	if !d.Deleted {
		t.Fatalf("deleted %+v", d)
	}
	if _, err := e.request(events.SandboxContainer(c.ID, api.OpGet), tenantA, nil, nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("get after delete: %v", err)
	}
	us := e.usage(10) // nine execs (tenant B's was refused) and the container's life
	for _, u := range us[:len(us)-1] {
		if u.Kind != events.SandboxUsageExec || u.ContainerID != c.ID || u.MemoryLimitBytes != 1<<30 || u.Tenant != tenantA ||
			math.Abs(u.GBSeconds-float64(u.WallMS)/1000) > 1e-9 || u.StartedAt.IsZero() {
			t.Fatalf("exec usage %+v", u)
		}
	}
	if last := us[len(us)-1]; last.Kind != events.SandboxUsageContainer || last.ContainerID != c.ID || math.Abs(last.GBSeconds-float64(last.WallMS)/1000) > 1e-9 || last.CPUMS <= 0 {
		t.Fatalf("container usage %+v", last)
	}
	t.Logf("exec wall ms: %v", func() (ms []int64) {
		for _, u := range us[:len(us)-1] {
			ms = append(ms, u.WallMS)
		}
		return
	}())
}

func TestRunscStreamTimeoutAndExpiry(t *testing.T) {
	e := realEnv(t, Config{})
	c := e.create(tenantA, api.CreateRequest{ExpiresAfter: &api.ExpiresAfter{Minutes: 1}})
	e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: "x = 1\nopen('/mnt/data/keep.txt','w').write('k')"})

	// Streamed: the chunks come as printed, then the result.
	subject := streamPrefix + "s1"
	sub, err := e.edge.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	code := "import sys\nfor i in range(3):\n    print('line', i, flush=True)\nprint('oops', file=sys.stderr, flush=True)"
	r, err := e.request(events.SandboxContainer(c.ID, api.OpExec), tenantA, api.ExecRequest{Language: "python", Code: code, Stream: true},
		map[string]string{api.HdrStream: subject})
	if err != nil || r.status != 200 {
		t.Fatalf("streamed exec: %v %+v", err, r)
	}
	var stdout, stderr string
	for done := false; !done; {
		m, err := sub.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("stream: %v (so far %q %q)", err, stdout, stderr)
		}
		switch ev := m.Header.Get(api.HdrEvent); ev {
		case api.EventDone:
			var res api.ExecResult
			if err := json.Unmarshal(m.Data, &res); err != nil {
				t.Fatal(err)
			}
			if res.Stdout != stdout || res.Stderr != stderr {
				t.Fatalf("result %q %q, chunks %q %q", res.Stdout, res.Stderr, stdout, stderr)
			}
			done = true
		case api.EventStdout, api.EventStderr:
			var ch api.ExecChunk
			if err := json.Unmarshal(m.Data, &ch); err != nil {
				t.Fatal(err)
			}
			if ev == api.EventStdout {
				stdout += ch.Data
			} else {
				stderr += ch.Data
			}
		default:
			t.Fatalf("event %q: %s", ev, m.Data)
		}
	}
	if stdout != "line 0\nline 1\nline 2\n" || stderr != "oops\n" {
		t.Fatalf("streamed %q %q", stdout, stderr)
	}

	// A timeout kills the sandbox; the next exec gets a fresh one. The code waits: a busy loop may use up its
	// CPU limit (nine tenths of the timeout, in whole seconds) before the timeout, which ends the exec and
	// keeps the sandbox, so its outcome races the clock.
	r2 := e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: "x = 1\nimport time\ntime.sleep(60)", TimeoutMS: 1500})
	if r2.Error == nil || r2.Error.Code != api.CodeExecTimeout || !strings.Contains(r2.Error.Message, "lost") {
		t.Fatalf("timeout %+v", r2)
	}
	r2 = e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: "import os\nprint('x' in globals(), os.listdir('/mnt/data'))"})
	if r2.Error != nil || strings.TrimSpace(r2.Stdout) != "False []" {
		t.Fatalf("after the timeout %+v", r2)
	}
	us := e.usage(4)
	if us[2].Status != events.UsageStatusError || us[2].ErrorCode != api.CodeExecTimeout || us[3].Status != events.UsageStatusOK {
		t.Fatalf("usage %+v", us)
	}

	// Idle past expires_after: the sweep expires it and closes its sandbox.
	before := e.svc.pool.Stats().Live
	e.clock.Advance(61 * time.Second)
	e.svc.sweep()
	rec, err := e.record(tenantA, c.ID)
	if err != nil || rec.Status != api.StatusExpired {
		t.Fatalf("record %+v %v", rec, err)
	}
	if after := e.svc.pool.Stats().Live; after != before-1 {
		t.Fatalf("live sandboxes %d, then %d", before, after)
	}
	if _, err := e.request(events.SandboxContainer(c.ID, api.OpExec), tenantA, api.ExecRequest{Language: "bash", Code: "true"}, nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("exec after expiry: %v", err)
	}
}

func TestRunscCapacityAndMemory(t *testing.T) {
	e := realEnv(t, Config{Pool: "none", MaxSandboxes: 2})
	a := e.create(tenantA, api.CreateRequest{})
	e.create(tenantB, api.CreateRequest{})
	e.fails(events.SandboxRequest(api.OpCreate), tenantA, nil, 429, api.CodeSandboxCapacity)

	// A memory bomb is contained; the container keeps serving.
	r := e.exec(tenantA, a.ID, api.ExecRequest{Language: "python", Code: "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))", TimeoutMS: 20_000})
	if r.Error == nil && !strings.Contains(r.Stderr, "MemoryError") {
		t.Fatalf("memory bomb not contained: %+v", r)
	}
	t.Logf("memory bomb: error %+v, exit %d, stderr tail %q", r.Error, r.ExitCode, r.Stderr[max(0, len(r.Stderr)-120):])
	r = e.exec(tenantA, a.ID, api.ExecRequest{Language: "python", Code: "print('still serving')"})
	if r.Error != nil || strings.TrimSpace(r.Stdout) != "still serving" {
		t.Fatalf("after the memory bomb %+v", r)
	}
	e.ok(events.SandboxContainer(a.ID, api.OpDelete), tenantA, nil, nil)
	e.create(tenantA, api.CreateRequest{}) // its slot is free again
}
