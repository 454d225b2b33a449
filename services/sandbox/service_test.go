package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	api "github.com/aiforge/aiforge/pkg/sandbox"
)

func fakeEnv(t *testing.T, cfg Config, max int) (*env, *fakePool) {
	t.Helper()
	e := newBus(t)
	p := newFakePool(max)
	e.start(cfg, p)
	return e, p
}

func TestCreateGetListDelete(t *testing.T) {
	e, p := fakeEnv(t, Config{}, 16)
	var ids []string
	for _, name := range []string{"one", "two", "three"} {
		c := e.create(tenantA, api.CreateRequest{Name: name})
		if !strings.HasPrefix(c.ID, "cntr_") || c.Object != api.ObjectContainer || c.Status != api.StatusRunning ||
			c.MemoryLimit != "1g" || c.ExpiresAfter != (api.ExpiresAfter{Anchor: "last_active_at", Minutes: 20}) || c.Name != name {
			t.Fatalf("created %+v", c)
		}
		rec, err := e.record(tenantA, c.ID)
		if err != nil || rec.Node != "node-1" || rec.Tenant != tenantA || rec.KeyID != "key_"+tenantA || rec.Status != api.StatusRunning {
			t.Fatalf("record %+v, %v", rec, err)
		}
		ids = append(ids, c.ID)
	}
	other := e.create(tenantB, api.CreateRequest{Name: "one"})

	var got api.Container
	e.ok(events.SandboxContainer(ids[1], api.OpGet), tenantA, nil, &got)
	if got.ID != ids[1] || got.Name != "two" {
		t.Fatalf("get %+v", got)
	}

	var l api.List[api.Container]
	e.ok(events.SandboxRequest(api.OpList), tenantA, nil, &l)
	if len(l.Data) != 3 || l.Data[0].ID != ids[2] || l.Data[2].ID != ids[0] || l.HasMore || l.FirstID != ids[2] || l.LastID != ids[0] {
		t.Fatalf("list (desc) %+v", l)
	}
	e.ok(events.SandboxRequest(api.OpList), tenantA, api.ListRequest{Order: "asc", Limit: 2}, &l)
	if len(l.Data) != 2 || l.Data[0].ID != ids[0] || l.Data[1].ID != ids[1] || !l.HasMore {
		t.Fatalf("list (asc, 2) %+v", l)
	}
	e.ok(events.SandboxRequest(api.OpList), tenantA, api.ListRequest{Order: "asc", Limit: 2, After: l.LastID}, &l)
	if len(l.Data) != 1 || l.Data[0].ID != ids[2] || l.HasMore {
		t.Fatalf("list (asc, after) %+v", l)
	}
	e.ok(events.SandboxRequest(api.OpList), tenantA, api.ListRequest{Name: "two"}, &l)
	if len(l.Data) != 1 || l.Data[0].ID != ids[1] {
		t.Fatalf("list (name) %+v", l)
	}
	e.ok(events.SandboxRequest(api.OpList), tenantB, nil, &l)
	if len(l.Data) != 1 || l.Data[0].ID != other.ID {
		t.Fatalf("tenant B lists %+v", l)
	}

	var d api.Deleted
	e.ok(events.SandboxContainer(ids[0], api.OpDelete), tenantA, nil, &d)
	if d != (api.Deleted{ID: ids[0], Object: api.ObjectContainerDeleted, Deleted: true}) {
		t.Fatalf("deleted %+v", d)
	}
	if _, err := e.record(tenantA, ids[0]); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("record after delete: %v", err)
	}
	// Nobody answers for a deleted container: the edge reports not found.
	if _, err := e.request(events.SandboxContainer(ids[0], api.OpGet), tenantA, nil, nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("get after delete: %v", err)
	}
	e.ok(events.SandboxRequest(api.OpList), tenantA, nil, &l)
	if len(l.Data) != 2 {
		t.Fatalf("list after delete %+v", l)
	}
	if live, _, released := p.counts(); live != 3 || released != 1 {
		t.Fatalf("pool: live %d released %d", live, released)
	}

	// Stopping the service closes every sandbox and marks its containers expired.
	e.stop()
	if live, _, _ := p.counts(); live != 0 {
		t.Fatalf("%d sandboxes left after stop", live)
	}
	for _, id := range ids[1:] {
		if rec, err := e.record(tenantA, id); err != nil || rec.Status != api.StatusExpired {
			t.Fatalf("record after stop: %+v %v", rec, err)
		}
	}
}

func TestRefusals(t *testing.T) {
	e, _ := fakeEnv(t, Config{MaxContainersPerTenant: 2}, 3)
	create := events.SandboxRequest(api.OpCreate)
	e.fails(create, "", nil, 400, api.CodeInvalidRequest)
	e.fails(create, "Not A Tenant", nil, 400, api.CodeInvalidRequest)
	e.fails(create, tenantA, []byte("{"), 400, api.CodeInvalidRequest)
	if eb := e.fails(create, tenantA, api.CreateRequest{MemoryLimit: "2g"}, 400, api.CodeInvalidRequest); eb.Param != "memory_limit" {
		t.Fatalf("param %q", eb.Param)
	}
	if eb := e.fails(create, tenantA, api.CreateRequest{ExpiresAfter: &api.ExpiresAfter{Minutes: 100000}}, 400, api.CodeInvalidRequest); eb.Param != "expires_after.minutes" {
		t.Fatalf("param %q", eb.Param)
	}
	if eb := e.fails(create, tenantA, api.CreateRequest{NetworkPolicy: &api.NetworkPolicy{Type: api.NetworkAllowlist, AllowedDomains: []string{"169.254.169.254"}}}, 400, api.CodeDomainNotAllowed); eb.Param != "network_policy.allowed_domains[0]" {
		t.Fatalf("param %q", eb.Param)
	}
	if eb := e.fails(create, tenantA, api.CreateRequest{FileIDs: []string{"file-nope"}}, 400, api.CodeInvalidRequest); eb.Param != "file_ids[0]" {
		t.Fatalf("param %q", eb.Param)
	}
	list := events.SandboxRequest(api.OpList)
	e.fails(list, tenantA, api.ListRequest{Limit: 101}, 400, api.CodeInvalidRequest)
	e.fails(list, tenantA, api.ListRequest{Order: "up"}, 400, api.CodeInvalidRequest)
	e.fails(list, tenantA, api.ListRequest{After: "cntr_nope"}, 400, api.CodeInvalidRequest)

	// The per-tenant limit, then the replica's capacity.
	a1 := e.create(tenantA, api.CreateRequest{})
	e.create(tenantA, api.CreateRequest{})
	if eb := e.fails(create, tenantA, nil, 429, api.CodeSandboxCapacity); !strings.Contains(eb.Message, "tenant acme already has 2 live containers") {
		t.Fatalf("message %q", eb.Message)
	}
	e.create(tenantB, api.CreateRequest{})
	e.fails(create, tenantB, nil, 429, api.CodeSandboxCapacity) // the pool's 3 are taken
	e.ok(events.SandboxContainer(a1.ID, api.OpDelete), tenantA, nil, nil)
	e.create(tenantB, api.CreateRequest{})
}

func TestTenantIsolation(t *testing.T) {
	e, _ := fakeEnv(t, Config{}, 8)
	e.putFile(tenantA, "file-a", "secret.txt", []byte("tenant A's secret"))
	a := e.create(tenantA, api.CreateRequest{FileIDs: []string{"file-a"}})
	var files api.List[api.File]
	e.ok(events.SandboxContainer(a.ID, api.OpFileList), tenantA, nil, &files)
	if len(files.Data) != 1 {
		t.Fatalf("files %+v", files)
	}
	fid := files.Data[0].ID
	// Tenant B cannot copy tenant A's file in by id.
	e.fails(events.SandboxRequest(api.OpCreate), tenantB, api.CreateRequest{FileIDs: []string{"file-a"}}, 400, api.CodeInvalidRequest)
	for _, call := range []struct {
		op   string
		body any
	}{
		{api.OpGet, nil}, {api.OpExec, api.ExecRequest{Language: "python", Code: "print 1"}}, {api.OpFileList, nil},
		{api.OpFileGet, api.FileRequest{ID: fid}}, {api.OpFileContent, api.FileRequest{ID: fid}}, {api.OpFileDelete, api.FileRequest{ID: fid}},
		{api.OpFileCreate, api.FileRequest{FileID: "file-a"}}, {api.OpDelete, nil},
	} {
		eb := e.fails(events.SandboxContainer(a.ID, call.op), tenantB, call.body, 404, api.CodeContainerNotFound)
		if strings.Contains(eb.Message, "secret") {
			t.Fatalf("%s leaks: %q", call.op, eb.Message)
		}
	}
	if got := e.content(tenantA, a.ID, fid); string(got) != "tenant A's secret" {
		t.Fatalf("tenant A reads %q", got)
	}
	var l api.List[api.Container]
	e.ok(events.SandboxRequest(api.OpList), tenantB, nil, &l)
	if len(l.Data) != 0 {
		t.Fatalf("tenant B lists %+v", l)
	}
}

func TestExecStateFilesAndUsage(t *testing.T) {
	e, p := fakeEnv(t, Config{}, 8)
	c := e.create(tenantA, api.CreateRequest{MemoryLimit: "4g"})
	r := e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: "set x 42\nprint hello\neprint warn"})
	if r.Stdout != "hello\n" || r.Stderr != "warn\n" || r.ExitCode != 0 || r.Error != nil || !strings.HasPrefix(r.ID, "exec_") ||
		r.Object != api.ObjectExec || r.ContainerID != c.ID || r.Files == nil || len(r.Files) != 0 {
		t.Fatalf("exec %+v", r)
	}
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: "get x\nwrite /mnt/data/out.csv a,b\nexit 3"})
	if r.Stdout != "42\n" || r.ExitCode != 3 || len(r.Files) != 1 || r.Files[0].Path != "/mnt/data/out.csv" || r.Files[0].Source != api.SourceAssistant ||
		r.Files[0].Bytes != 3 || !strings.HasPrefix(r.Files[0].ID, "cfile_") {
		t.Fatalf("exec %+v", r)
	}
	written := r.Files[0]
	var files api.List[api.File]
	e.ok(events.SandboxContainer(c.ID, api.OpFileList), tenantA, nil, &files)
	if len(files.Data) != 1 || files.Data[0] != written {
		t.Fatalf("files %+v", files)
	}
	var f api.File
	e.ok(events.SandboxContainer(c.ID, api.OpFileGet), tenantA, api.FileRequest{ID: written.ID}, &f)
	if f != written {
		t.Fatalf("file %+v", f)
	}
	if got := e.content(tenantA, c.ID, written.ID); string(got) != "a,b" {
		t.Fatalf("content %q", got)
	}
	// An unchanged file is not reported again; a rewritten one is.
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "bash", Code: "print again"})
	if len(r.Files) != 0 {
		t.Fatalf("unchanged files reported: %+v", r.Files)
	}
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "bash", Code: "write /mnt/data/out.csv a,b,c"})
	if len(r.Files) != 1 || r.Files[0].ID != written.ID || r.Files[0].Bytes != 5 {
		t.Fatalf("rewritten file %+v", r.Files)
	}
	rec, err := e.record(tenantA, c.ID)
	if err != nil || len(rec.Files) != 1 || rec.Files[written.ID].Bytes != 5 {
		t.Fatalf("record files %+v, %v", rec.Files, err)
	}
	var d api.Deleted
	e.ok(events.SandboxContainer(c.ID, api.OpFileDelete), tenantA, api.FileRequest{ID: written.ID}, &d)
	if d != (api.Deleted{ID: written.ID, Object: api.ObjectFileDeleted, Deleted: true}) {
		t.Fatalf("deleted %+v", d)
	}
	if _, ok := p.boxes[0].file("/mnt/data/out.csv"); ok {
		t.Fatal("file still in the sandbox")
	}
	e.fails(events.SandboxContainer(c.ID, api.OpFileGet), tenantA, api.FileRequest{ID: written.ID}, 404, api.CodeFileNotFound)
	e.fails(events.SandboxContainer(c.ID, api.OpFileContent), tenantA, api.FileRequest{ID: "cfile_nope"}, 404, api.CodeFileNotFound)

	// Bad execs.
	ex := events.SandboxContainer(c.ID, api.OpExec)
	e.fails(ex, tenantA, api.ExecRequest{Code: "print 1"}, 400, "missing_required_parameter")
	e.fails(ex, tenantA, api.ExecRequest{Language: "ruby", Code: "print 1"}, 400, api.CodeInvalidRequest)
	e.fails(ex, tenantA, api.ExecRequest{Language: "bash", Code: "print 1", TimeoutMS: 11 * 60 * 1000}, 400, api.CodeInvalidRequest)
	e.fails(events.SandboxContainer(c.ID, "nope"), tenantA, nil, 400, api.CodeInvalidRequest)

	e.ok(events.SandboxContainer(c.ID, api.OpDelete), tenantA, nil, nil)
	us := e.usage(5)
	for i, u := range us[:4] {
		if u.Kind != events.SandboxUsageExec || u.Tenant != tenantA || u.KeyID != "key_"+tenantA || u.ContainerID != c.ID || u.Node != "node-1" ||
			u.WallMS != 250 || u.CPUMS != 200 || u.MemoryLimitBytes != 4<<30 || u.MemoryPeakBytes != 64<<20 || !u.Warm ||
			math.Abs(u.GBSeconds-4*0.25) > 1e-9 || u.Status != events.UsageStatusOK || !strings.HasPrefix(u.ID, "exec_") {
			t.Fatalf("usage %d: %+v", i, u)
		}
	}
	if us[0].Language != "python" || us[1].ExitCode != 3 || us[3].Language != "bash" {
		t.Fatalf("usage %+v", us)
	}
	life := us[4]
	if life.Kind != events.SandboxUsageContainer || life.ContainerID != c.ID || life.CPUMS != 800 || life.MemoryLimitBytes != 4<<30 ||
		life.Language != "" || life.Status != events.UsageStatusOK {
		t.Fatalf("container usage %+v", life)
	}
}

func TestFilesIn(t *testing.T) {
	e, p := fakeEnv(t, Config{}, 8)
	e.putFile(tenantA, "file-1", "data.csv", []byte("x,y\n1,2\n"))
	e.putFile(tenantA, "file-2", "../../etc/notes.txt", []byte("notes"))
	c := e.create(tenantA, api.CreateRequest{FileIDs: []string{"file-1", "file-2"}})
	box := p.boxes[0]
	if got, _ := box.file("/mnt/data/data.csv"); got != "x,y\n1,2\n" {
		t.Fatalf("data.csv %q", got)
	}
	if got, _ := box.file("/mnt/data/notes.txt"); got != "notes" {
		t.Fatalf("notes.txt %q (a file name's directories are dropped)", got)
	}
	var files api.List[api.File]
	e.ok(events.SandboxContainer(c.ID, api.OpFileList), tenantA, api.ListRequest{Order: "asc"}, &files)
	if len(files.Data) != 2 || files.Data[0].Path != "/mnt/data/data.csv" || files.Data[0].Source != api.SourceUser || files.Data[0].Bytes != 8 ||
		files.Data[0].ContainerID != c.ID || files.Data[1].Path != "/mnt/data/notes.txt" {
		t.Fatalf("files %+v", files)
	}

	// An upload the edge stored.
	key := api.UploadKey(tenantA, c.ID, "tok1")
	if _, err := e.objects.Put(testCtx(t), key, bytes.NewReader([]byte("print('hi')")), 11, ""); err != nil {
		t.Fatal(err)
	}
	var f api.File
	e.ok(events.SandboxContainer(c.ID, api.OpFileCreate), tenantA, api.FileRequest{ObjectKey: key, Name: "src/main.py", Bytes: 11}, &f)
	if f.Path != "/mnt/data/src/main.py" || f.Bytes != 11 || f.Source != api.SourceUser {
		t.Fatalf("upload %+v", f)
	}
	if got, _ := box.file("/mnt/data/src/main.py"); got != "print('hi')" {
		t.Fatalf("main.py %q", got)
	}
	if _, err := e.objects.Stat(testCtx(t), key); err == nil {
		t.Fatal("the upload was not removed")
	}
	// A file by id, renamed.
	e.ok(events.SandboxContainer(c.ID, api.OpFileCreate), tenantA, api.FileRequest{FileID: "file-1", Name: "copy.csv"}, &f)
	if f.Path != "/mnt/data/copy.csv" || f.Bytes != 8 {
		t.Fatalf("by id %+v", f)
	}
	fc := events.SandboxContainer(c.ID, api.OpFileCreate)
	other := api.UploadKey(tenantB, c.ID, "tok2")
	if _, err := e.objects.Put(testCtx(t), other, bytes.NewReader([]byte("b")), 1, ""); err != nil {
		t.Fatal(err)
	}
	e.fails(fc, tenantA, api.FileRequest{ObjectKey: other, Name: "x"}, 400, api.CodeInvalidRequest)
	if _, err := e.objects.Stat(testCtx(t), other); err != nil {
		t.Fatalf("another tenant's object was touched: %v", err)
	}
	e.fails(fc, tenantA, api.FileRequest{ObjectKey: api.UploadKey(tenantA, c.ID, "gone"), Name: "x"}, 400, api.CodeInvalidRequest)
	e.fails(fc, tenantA, api.FileRequest{ObjectKey: api.UploadKey(tenantA, c.ID, "t3"), Name: "../escape"}, 400, api.CodeInvalidPath)
	e.fails(fc, tenantA, api.FileRequest{ObjectKey: api.UploadKey(tenantA, c.ID, "t4"), Name: "/etc/passwd"}, 400, api.CodeInvalidPath)
	e.fails(fc, tenantA, api.FileRequest{ObjectKey: api.UploadKey(tenantA, c.ID, "t5"), Name: "big", Bytes: api.MaxFileBytes + 1}, 413, api.CodeFileTooLarge)
	e.fails(fc, tenantA, api.FileRequest{}, 400, api.CodeInvalidRequest)
	e.fails(fc, tenantA, api.FileRequest{FileID: "nope"}, 400, api.CodeInvalidRequest)
}

func TestStreamedExec(t *testing.T) {
	e, _ := fakeEnv(t, Config{}, 8)
	c := e.create(tenantA, api.CreateRequest{})
	subject := streamPrefix + "req1"
	sub, err := e.edge.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.request(events.SandboxContainer(c.ID, api.OpExec), tenantA, api.ExecRequest{Language: "python", Code: "print a\neprint b\nprint c", Stream: true},
		map[string]string{api.HdrStream: subject})
	if err != nil || r.status != 200 {
		t.Fatalf("streamed exec: %v %+v", err, r)
	}
	var final api.ExecResult
	if err := json.Unmarshal(r.body, &final); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m, err := sub.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		ev := m.Header.Get(api.HdrEvent)
		if ev == api.EventDone {
			var done api.ExecResult
			if err := json.Unmarshal(m.Data, &done); err != nil {
				t.Fatal(err)
			}
			if done.ID != final.ID || done.Stdout != "a\nc\n" || done.Stderr != "b\n" {
				t.Fatalf("done %+v, reply %+v", done, final)
			}
			break
		}
		var ch api.ExecChunk
		if err := json.Unmarshal(m.Data, &ch); err != nil || ch.Type != ev {
			t.Fatalf("chunk %q (%s): %v", m.Data, ev, err)
		}
		got = append(got, ch.Type+":"+ch.Data)
	}
	if strings.Join(got, "|") != "exec.stdout:a\n|exec.stderr:b\n|exec.stdout:c\n" {
		t.Fatalf("chunks %q", got)
	}
	// An error goes to the stream too.
	r, err = e.request(events.SandboxContainer(c.ID, api.OpExec), tenantA, api.ExecRequest{Language: "perl", Code: "x"}, map[string]string{api.HdrStream: subject})
	if err != nil || r.status != 400 {
		t.Fatalf("bad streamed exec: %v %+v", err, r)
	}
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil || m.Header.Get(api.HdrEvent) != api.EventError || m.Header.Get(api.HdrStatus) != "400" {
		t.Fatalf("stream error: %v %+v", err, m)
	}
	// A stream subject outside the edge's namespace is refused.
	for _, bad := range []string{"aiforge.usage.sandbox.v1.acme", streamPrefix + "*", streamPrefix, "_INBOX_sandbox.x"} {
		r, err = e.request(events.SandboxContainer(c.ID, api.OpExec), tenantA, api.ExecRequest{Language: "bash", Code: "print 1"}, map[string]string{api.HdrStream: bad})
		if err != nil || r.status != 400 || r.errBody(t).Param != "stream" {
			t.Fatalf("stream %q: %v %+v", bad, err, r)
		}
	}
}

func TestDeadSandboxReplaced(t *testing.T) {
	e, p := fakeEnv(t, Config{}, 8)
	c := e.create(tenantA, api.CreateRequest{})
	e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: "set x 1\nwrite /mnt/data/a.txt a"})
	r := e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: "hang", TimeoutMS: 100})
	if r.Error == nil || r.Error.Code != api.CodeExecTimeout || !strings.Contains(r.Error.Message, "files and interpreter state are lost") || r.ExitCode != -1 {
		t.Fatalf("timeout %+v", r)
	}
	var files api.List[api.File]
	e.ok(events.SandboxContainer(c.ID, api.OpFileList), tenantA, nil, &files)
	if len(files.Data) != 0 {
		t.Fatalf("files of a dead sandbox listed: %+v", files)
	}
	if live, started, released := p.counts(); live != 0 || started != 1 || released != 1 {
		t.Fatalf("dead sandbox not released: live %d started %d released %d", live, started, released)
	}
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: "get x\nprint fresh"})
	if r.Error != nil || r.Stdout != "\nfresh\n" {
		t.Fatalf("after the timeout %+v", r)
	}
	if _, started, _ := p.counts(); started != 2 {
		t.Fatalf("started %d", started)
	}
	r = e.exec(tenantA, c.ID, api.ExecRequest{Language: "python", Code: "oom"})
	if r.Error == nil || r.Error.Code != api.CodeMemoryLimit {
		t.Fatalf("oom %+v", r)
	}
	e.exec(tenantA, c.ID, api.ExecRequest{Language: "bash", Code: "print ok"})
	us := e.usage(5)
	if us[1].Status != events.UsageStatusError || us[1].ErrorCode != api.CodeExecTimeout || us[1].WallMS != 100 || us[3].ErrorCode != api.CodeMemoryLimit {
		t.Fatalf("usage %+v", us)
	}
}

func TestBusy(t *testing.T) {
	e, p := fakeEnv(t, Config{}, 8)
	c := e.create(tenantA, api.CreateRequest{})
	done := make(chan api.ExecResult, 1)
	go func() {
		var r api.ExecResult
		m, err := e.request(events.SandboxContainer(c.ID, api.OpExec), tenantA, api.ExecRequest{Language: "bash", Code: "block\nprint done"}, nil)
		if err == nil {
			_ = json.Unmarshal(m.body, &r)
		}
		done <- r
	}()
	<-p.blocked
	e.fails(events.SandboxContainer(c.ID, api.OpExec), tenantA, api.ExecRequest{Language: "bash", Code: "print 1"}, 409, api.CodeSandboxBusy)
	e.fails(events.SandboxContainer(c.ID, api.OpFileCreate), tenantA, api.FileRequest{FileID: "x"}, 409, api.CodeSandboxBusy)
	// Reads are served meanwhile.
	e.ok(events.SandboxContainer(c.ID, api.OpGet), tenantA, nil, nil)
	e.ok(events.SandboxContainer(c.ID, api.OpFileList), tenantA, nil, nil)
	close(p.gate)
	if r := <-done; r.Stdout != "done\n" {
		t.Fatalf("blocked exec %+v", r)
	}
	e.exec(tenantA, c.ID, api.ExecRequest{Language: "bash", Code: "print 1"})
}

func TestExpirySweep(t *testing.T) {
	e, p := fakeEnv(t, Config{}, 8)
	short := e.create(tenantA, api.CreateRequest{ExpiresAfter: &api.ExpiresAfter{Minutes: 1}})
	long := e.create(tenantA, api.CreateRequest{ExpiresAfter: &api.ExpiresAfter{Minutes: 5}})
	e.clock.Advance(50 * time.Second)
	e.exec(tenantA, long.ID, api.ExecRequest{Language: "bash", Code: "print 1"}) // activity
	e.svc.sweep()
	if _, err := e.record(tenantA, short.ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(20 * time.Second)
	e.svc.sweep()
	rec, err := e.record(tenantA, short.ID)
	if err != nil || rec.Status != api.StatusExpired {
		t.Fatalf("after the sweep %+v %v", rec, err)
	}
	if _, err := e.request(events.SandboxContainer(short.ID, api.OpExec), tenantA, api.ExecRequest{Language: "bash", Code: "print 1"}, nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("exec on an expired container: %v", err)
	}
	var l api.List[api.Container]
	e.ok(events.SandboxRequest(api.OpList), tenantA, nil, &l)
	if len(l.Data) != 2 || l.Data[1].ID != short.ID || l.Data[1].Status != api.StatusExpired || l.Data[0].Status != api.StatusRunning {
		t.Fatalf("list %+v", l)
	}
	if live, _, _ := p.counts(); live != 1 {
		t.Fatalf("live %d", live)
	}
	us := e.usage(2)
	life := us[1]
	if life.Kind != events.SandboxUsageContainer || life.ContainerID != short.ID || life.WallMS != 70_000 || math.Abs(life.GBSeconds-70) > 1e-9 {
		t.Fatalf("container usage %+v", life)
	}
	// A call that raced the sweep is answered expired.
	c := &container{id: "cntr_x", tenant: tenantA, rec: api.Record{Container: api.Container{Status: api.StatusExpired}}}
	if _, err := e.svc.onContainer(testCtx(t), c, api.OpGet, nats.NewMsg("x"), caller{tenant: tenantA}); err == nil {
		t.Fatal("no error")
	} else if eb, _ := errorBody(err); eb.Status != 400 || eb.Code != api.CodeContainerExpired {
		t.Fatalf("expired answer %+v", eb)
	}
}

func TestRestartExpiresStale(t *testing.T) {
	e := newBus(t)
	ctx := testCtx(t)
	stale := api.Record{Container: api.Container{ID: "cntr_old", Object: api.ObjectContainer, CreatedAt: 1000, LastActiveAt: 1600, Status: api.StatusRunning,
		MemoryLimit: "1g", ExpiresAfter: api.ExpiresAfter{Anchor: "last_active_at", Minutes: 20}}, Tenant: tenantA, KeyID: "k", Node: "node-1"}
	otherNode := stale
	otherNode.ID, otherNode.Node = "cntr_other", "node-2"
	for _, r := range []api.Record{stale, otherNode} {
		if _, err := kv.Put(ctx, e.records, api.RecordKey(r.Tenant, r.ID), r); err != nil {
			t.Fatal(err)
		}
	}
	e.start(Config{Node: "node-1"}, newFakePool(4))
	if r, _ := e.record(tenantA, "cntr_old"); r.Status != api.StatusExpired {
		t.Fatalf("stale record %+v", r)
	}
	if r, _ := e.record(tenantA, "cntr_other"); r.Status != api.StatusRunning {
		t.Fatalf("another node's record %+v", r)
	}
	u := e.usage(1)[0]
	if u.ContainerID != "cntr_old" || u.Kind != events.SandboxUsageContainer || u.WallMS != 600_000 {
		t.Fatalf("stale usage %+v", u)
	}
}

func TestConfig(t *testing.T) {
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "node is required") || !strings.Contains(err.Error(), "state dir is required") {
		t.Fatalf("empty config: %v", err)
	}
	bad := Config{Node: "n", StateDir: "/x", Platform: "vm", Pool: "2g=1", ExecTimeout: 20 * time.Minute, MaxExecTimeout: 11 * time.Minute, CPUs: -1, Pids: 2}
	err := bad.Validate()
	for _, want := range []string{"platform", "pool", "MaxExecTimeout", "ExecTimeout", "cpus", "pids"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("want %q in %v", want, err)
		}
	}
	sizes, err := ParsePool("1g=2, 4g/allowlist=1")
	if err != nil || len(sizes) != 2 {
		t.Fatalf("pool %v %v", sizes, err)
	}
	if _, err := ParsePool("1g=2,1g/disabled=1"); err == nil {
		t.Fatal("a class named twice")
	}
	var c Config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--sandbox-node", "n1", "--sandbox-state-dir", "/tmp/s", "--sandbox-max-containers-per-tenant", "3",
		"--sandbox-exec-timeout", "5s", "--sandbox-pool", "none", "--sandbox-platform", "ptrace"}); err != nil {
		t.Fatal(err)
	}
	if c.Node != "n1" || c.StateDir != "/tmp/s" || c.MaxContainersPerTenant != 3 || c.ExecTimeout != 5*time.Second || c.Pool != "none" {
		t.Fatalf("flags %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d := c.withDefaults()
	if d.MaxSandboxes != 32 || d.MaxOutputBytes != 1<<20 || d.SweepInterval != 30*time.Second {
		t.Fatalf("defaults %+v", d)
	}
}

func TestRuntimeUnavailable(t *testing.T) {
	e := newBus(t)
	e.start(Config{Runsc: "/nonexistent/runsc"}, nil)
	eb := e.fails(events.SandboxRequest(api.OpCreate), tenantA, nil, 503, api.CodeSandboxUnavailable)
	if !strings.Contains(eb.Message, "unavailable") {
		t.Fatalf("message %q", eb.Message)
	}
	var l api.List[api.Container]
	e.ok(events.SandboxRequest(api.OpList), tenantA, nil, &l) // the rest still answers
}
