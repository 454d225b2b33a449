package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/sandbox"
)

// cliSandbox plays the sandbox service on the bus contract for the CLI:
// containers, one file store per container, and an exec that prints its
// code's first line (and exits with N for "exit N").
type cliSandbox struct {
	mu         sync.Mutex
	containers map[string]map[string]sandbox.File
	deleted    []string
	content    map[string][]byte
}

func (e *cliEdge) fakeSandbox(t *testing.T) *cliSandbox {
	t.Helper()
	sb := &cliSandbox{containers: map[string]map[string]sandbox.File{}, content: map[string][]byte{}}
	answer := func(m *nats.Msg, status int, v any) {
		out := nats.NewMsg(m.Reply)
		out.Header.Set(sandbox.HdrStatus, strconv.Itoa(status))
		out.Data, _ = json.Marshal(v)
		_ = m.RespondMsg(out)
	}
	sub, err := e.nc.QueueSubscribe(events.SandboxAll, events.SandboxQueue, func(m *nats.Msg) {
		parts := strings.Split(m.Subject, ".")
		op, tenant := parts[len(parts)-1], m.Header.Get(bridge.HdrTenant)
		sb.mu.Lock()
		defer sb.mu.Unlock()
		switch op {
		case sandbox.OpCreate:
			var req sandbox.CreateRequest
			_ = json.Unmarshal(m.Data, &req)
			id := "cntr_" + events.NewID()[:10]
			sb.containers[id] = map[string]sandbox.File{}
			answer(m, 200, sandbox.Container{ID: id, Object: sandbox.ObjectContainer, Status: sandbox.StatusRunning, Name: req.Name, MemoryLimit: req.MemoryLimit, ExpiresAfter: *req.ExpiresAfter})
			return
		case sandbox.OpList:
			page := sandbox.List[sandbox.Container]{Object: "list"}
			for id := range sb.containers {
				page.Data = append(page.Data, sandbox.Container{ID: id, Object: sandbox.ObjectContainer, Status: sandbox.StatusRunning, MemoryLimit: "1g"})
			}
			answer(m, 200, page)
			return
		}
		id := parts[4]
		files, ok := sb.containers[id]
		if !ok {
			answer(m, 404, sandbox.ErrorBody{Status: 404, Code: sandbox.CodeContainerNotFound, Message: "No such container: " + id})
			return
		}
		var fr sandbox.FileRequest
		_ = json.Unmarshal(m.Data, &fr)
		switch op {
		case sandbox.OpGet:
			answer(m, 200, sandbox.Container{ID: id, Object: sandbox.ObjectContainer, Status: sandbox.StatusRunning})
		case sandbox.OpDelete:
			delete(sb.containers, id)
			sb.deleted = append(sb.deleted, id)
			answer(m, 200, sandbox.Deleted{ID: id, Object: sandbox.ObjectContainerDeleted, Deleted: true})
		case sandbox.OpFileCreate:
			rc, _, err := e.objs.Get(context.Background(), fr.ObjectKey)
			if err != nil {
				answer(m, 400, sandbox.ErrorBody{Status: 400, Code: sandbox.CodeInvalidRequest, Message: err.Error()})
				return
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			p, _ := sandbox.CleanPath(fr.Name)
			f := sandbox.File{ID: "cfile_" + strconv.Itoa(len(files)+1), Object: sandbox.ObjectContainerFile, ContainerID: id, Path: p, Bytes: int64(len(b)), Source: sandbox.SourceUser}
			files[f.ID] = f
			sb.content[f.ID] = b
			answer(m, 200, f)
		case sandbox.OpFileList:
			page := sandbox.List[sandbox.File]{Object: "list"}
			for _, f := range files {
				page.Data = append(page.Data, f)
			}
			answer(m, 200, page)
		case sandbox.OpFileGet, sandbox.OpFileContent, sandbox.OpFileDelete:
			f, ok := files[fr.ID]
			if !ok {
				answer(m, 404, sandbox.ErrorBody{Status: 404, Code: sandbox.CodeFileNotFound, Message: "no such file"})
				return
			}
			switch op {
			case sandbox.OpFileGet:
				answer(m, 200, f)
			case sandbox.OpFileDelete:
				delete(files, fr.ID)
				answer(m, 200, sandbox.Deleted{ID: f.ID, Object: sandbox.ObjectFileDeleted, Deleted: true})
			default:
				key := sandbox.ContentKey(tenant, id, events.NewID()[:8])
				if _, err := e.objs.Put(context.Background(), key, strings.NewReader(string(sb.content[f.ID])), -1, ""); err != nil {
					answer(m, 500, sandbox.ErrorBody{Status: 500, Code: sandbox.CodeSandboxCrashed, Message: err.Error()})
					return
				}
				answer(m, 200, sandbox.ContentReply{File: f, ObjectKey: key})
			}
		case sandbox.OpExec:
			var req sandbox.ExecRequest
			_ = json.Unmarshal(m.Data, &req)
			res := sandbox.ExecResult{ID: "exec_1", Object: sandbox.ObjectExec, ContainerID: id, Files: []sandbox.File{}}
			if n, ok := strings.CutPrefix(req.Code, "exit "); ok {
				res.ExitCode, _ = strconv.Atoi(strings.TrimSpace(n))
				res.Stderr = "bye\n"
			} else {
				res.Stdout = "ran " + strings.SplitN(req.Code, "\n", 2)[0] + "\n"
			}
			if stream := m.Header.Get(sandbox.HdrStream); stream != "" {
				for _, ch := range []sandbox.ExecChunk{{Type: sandbox.EventStdout, Data: res.Stdout}, {Type: sandbox.EventStderr, Data: res.Stderr}} {
					out := nats.NewMsg(stream)
					out.Header.Set(sandbox.HdrEvent, ch.Type)
					out.Data, _ = json.Marshal(ch)
					_ = e.nc.PublishMsg(out)
				}
				out := nats.NewMsg(stream)
				out.Header.Set(sandbox.HdrEvent, sandbox.EventDone)
				out.Data, _ = json.Marshal(res)
				_ = e.nc.PublishMsg(out)
				return
			}
			answer(m, 200, res)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sb
}

// `aiforge sandbox exec` creates a container, runs the code, prints its
// output, exits with its status and deletes the container it made.
func TestSandboxExecCommand(t *testing.T) {
	e := startCLIEdge(t)
	t.Setenv("AIFORGE_ADMIN_KEY", cliAdminKey)
	e.must(t, "tenants", "create", "acme")
	out := e.must(t, "keys", "create", "--tenant", "acme")
	i := strings.Index(out, "AIFORGE_API_KEY=")
	t.Setenv("AIFORGE_API_KEY", strings.Fields(out[i+len("AIFORGE_API_KEY="):])[0])
	sb := e.fakeSandbox(t)

	stdout, stderr, err := e.aiforge(t, "sandbox", "exec", "--language", "python", "-c", "print(1+1)")
	if err != nil || stdout != "ran print(1+1)\n" || stderr != "" {
		t.Fatalf("exec: %v %q %q", err, stdout, stderr)
	}
	for _, stream := range []string{"--stream=false", "--stream"} {
		stdout, stderr, err = e.aiforge(t, "sandbox", "exec", "--language", "bash", "-c", "exit 3", stream)
		var exit *exitCodeError
		if !errors.As(err, &exit) || exit.code != 3 || stdout != "" || stderr != "bye\n" {
			t.Fatalf("exit 3 %s: %v %q %q", stream, err, stdout, stderr)
		}
	}
	sb.mu.Lock()
	deleted, left := len(sb.deleted), len(sb.containers)
	sb.mu.Unlock()
	if deleted != 3 || left != 0 {
		t.Fatalf("%d containers deleted, %d left", deleted, left)
	}

	// A file argument, --keep, then --container.
	dir := t.TempDir()
	script := filepath.Join(dir, "s.py")
	if err := os.WriteFile(script, []byte("import os\nprint(os.getcwd())\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err = e.aiforge(t, "sandbox", "exec", script, "--keep", "--stream")
	if err != nil || stdout != "ran import os\n" || !strings.Contains(stderr, "container cntr_") {
		t.Fatalf("file --keep: %v %q %q", err, stdout, stderr)
	}
	cid := strings.Fields(stderr)[1]
	if stdout := e.must(t, "sandbox", "exec", "--container", cid, "-c", "x"); stdout != "ran x\n" {
		t.Fatalf("--container: %q", stdout)
	}
	if _, _, err := e.aiforge(t, "sandbox", "exec", "--container", "cntr_nope", "-c", "x"); err == nil || !strings.Contains(err.Error(), "container_not_found") {
		t.Fatalf("unknown container: %v", err)
	}
	if _, _, err := e.aiforge(t, "sandbox", "exec", "--language", "ruby", "-c", "x"); err == nil || !strings.Contains(err.Error(), "language") {
		t.Fatalf("bad language: %v", err)
	}

	// containers and their files.
	out = e.must(t, "containers", "create", "--name", "work", "--memory-limit", "4g")
	if !strings.HasPrefix(out, "created container cntr_") || !strings.Contains(out, "4g") {
		t.Fatalf("create: %q", out)
	}
	id := strings.Fields(out)[2]
	if out := e.must(t, "containers", "list"); !strings.Contains(out, id) || !strings.Contains(out, cid) {
		t.Fatalf("list: %q", out)
	}
	if out := e.must(t, "containers", "get", id); !strings.Contains(out, `"id": "`+id+`"`) {
		t.Fatalf("get: %q", out)
	}
	local := filepath.Join(dir, "data.csv")
	if err := os.WriteFile(local, []byte("a,b\n1,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out = e.must(t, "containers", "files", "upload", id, local)
	if !strings.Contains(out, "/mnt/data/data.csv") {
		t.Fatalf("upload: %q", out)
	}
	fid := strings.Fields(out)[0]
	if out := e.must(t, "containers", "files", "list", id); !strings.Contains(out, fid) || !strings.Contains(out, "/mnt/data/data.csv") {
		t.Fatalf("files list: %q", out)
	}
	dest := filepath.Join(dir, "back.csv")
	e.must(t, "containers", "files", "download", id, fid, "-o", dest)
	if got, err := os.ReadFile(dest); err != nil || string(got) != "a,b\n1,2\n" {
		t.Fatalf("download: %q %v", got, err)
	}
	if out := e.must(t, "containers", "files", "download", id, fid, "-o", "-"); out != "a,b\n1,2\n" {
		t.Fatalf("download to stdout: %q", out)
	}
	e.must(t, "containers", "files", "delete", id, fid)
	if _, _, err := e.aiforge(t, "containers", "files", "download", id, fid, "-o", "-"); err == nil || !strings.Contains(err.Error(), sandbox.CodeFileNotFound) {
		t.Fatalf("download of a deleted file: %v", err)
	}
	if out := e.must(t, "containers", "delete", id); !strings.Contains(out, "deleted container "+id) {
		t.Fatalf("delete: %q", out)
	}
}
