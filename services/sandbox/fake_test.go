package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	api "github.com/aiforge/aiforge/pkg/sandbox"
	"github.com/aiforge/aiforge/services/sandbox/runtime"
)

// fakePool and fakeBox stand for the runtime in the tests of the
// service's own rules (tenancy, pagination, expiry, limits, usage); the
// real-runtime tests (runsc_test.go) run the same flows under gVisor.
//
// A fakeBox runs a tiny line language: "print X", "eprint X",
// "set K V", "get K", "write PATH TEXT", "rm PATH", "exit N", "hang"
// (a timeout that kills the sandbox), "oom" (a memory kill), "block"
// (waits for the pool's gate).
type fakePool struct {
	mu       sync.Mutex
	max      int
	live     int
	started  int64
	released int
	boxes    []*fakeBox
	gate     chan struct{} // "block" waits for it
	blocked  chan struct{} // "block" signals here when it starts
}

func newFakePool(max int) *fakePool {
	return &fakePool{max: max, gate: make(chan struct{}), blocked: make(chan struct{}, 16)}
}

func (p *fakePool) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func (p *fakePool) Get(_ context.Context, spec runtime.Spec) (box, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live >= p.max {
		return nil, false, &runtime.Error{Code: api.CodeSandboxCapacity, Message: fmt.Sprintf("this replica runs %d sandboxes, the most it may", p.max)}
	}
	p.live++
	p.started++
	b := &fakeBox{id: fmt.Sprintf("fake-%d", p.started), alive: true, spec: spec, files: map[string]fakeFile{}, vars: map[string]string{}, pool: p}
	p.boxes = append(p.boxes, b)
	return b, true, nil
}

func (p *fakePool) Release(b box) {
	fb := b.(*fakeBox)
	fb.mu.Lock()
	closed := fb.closed
	fb.closed, fb.alive = true, false
	fb.mu.Unlock()
	if closed {
		panic("sandbox released twice")
	}
	p.mu.Lock()
	p.live--
	p.released++
	p.mu.Unlock()
}

func (p *fakePool) Stats() runtime.PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return runtime.PoolStats{Live: p.live, Started: p.started}
}

func (p *fakePool) counts() (live, started, released int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live, int(p.started), p.released
}

type fakeFile struct {
	data []byte
	mod  time.Time
}

type fakeBox struct {
	id      string
	spec    runtime.Spec
	pool    *fakePool
	mu      sync.Mutex
	alive   bool
	closed  bool
	domains []string
	files   map[string]fakeFile
	vars    map[string]string
	tick    int64
}

func (b *fakeBox) ID() string { return b.id }
func (b *fakeBox) Alive() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.alive
}
func (b *fakeBox) SetAllowedDomains(d []string) {
	b.mu.Lock()
	b.domains = append([]string(nil), d...)
	b.mu.Unlock()
}

func (b *fakeBox) Exec(ctx context.Context, req api.ExecRequest, out func(api.ExecChunk)) (runtime.Result, error) {
	var r runtime.Result
	r.DurationMS, r.CPUMS, r.MemoryPeakBytes = 250, 200, 64<<20
	emit := func(typ, s string) {
		if typ == api.EventStdout {
			r.Stdout += s
		} else {
			r.Stderr += s
		}
		if out != nil {
			out(api.ExecChunk{Type: typ, Data: s})
		}
	}
	for _, line := range strings.Split(req.Code, "\n") {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
		b.mu.Lock()
		b.tick++
		now := time.Unix(0, b.tick)
		b.mu.Unlock()
		switch cmd {
		case "print":
			emit(api.EventStdout, arg+"\n")
		case "eprint":
			emit(api.EventStderr, arg+"\n")
		case "set":
			k, v, _ := strings.Cut(arg, " ")
			b.mu.Lock()
			b.vars[k] = v
			b.mu.Unlock()
		case "get":
			b.mu.Lock()
			v := b.vars[arg]
			b.mu.Unlock()
			emit(api.EventStdout, v+"\n")
		case "write":
			p, text, _ := strings.Cut(arg, " ")
			b.mu.Lock()
			b.files[p] = fakeFile{data: []byte(text), mod: now}
			b.mu.Unlock()
		case "rm":
			b.mu.Lock()
			delete(b.files, arg)
			b.mu.Unlock()
		case "exit":
			r.ExitCode, _ = strconv.Atoi(arg)
			return r, nil
		case "hang":
			b.mu.Lock()
			b.alive = false
			b.mu.Unlock()
			r.ExitCode = -1
			r.DurationMS = req.TimeoutMS
			r.Error = &api.ExecError{Code: api.CodeExecTimeout, Message: fmt.Sprintf("the code ran past its %d ms timeout and was killed.", req.TimeoutMS)}
			return r, nil
		case "oom":
			b.mu.Lock()
			b.alive = false
			b.mu.Unlock()
			r.ExitCode = -1
			r.Error = &api.ExecError{Code: api.CodeMemoryLimit, Message: "the code went over the memory limit."}
			return r, nil
		case "block":
			b.pool.blocked <- struct{}{}
			select {
			case <-b.pool.gate:
			case <-ctx.Done():
				return r, &runtime.Error{Code: api.CodeSandboxCrashed, Message: ctx.Err().Error()}
			}
		}
	}
	return r, nil
}

func (b *fakeBox) WriteFile(_ context.Context, path string, r io.Reader, size int64) error {
	if !strings.HasPrefix(path, api.DataDir+"/") {
		return &runtime.Error{Code: api.CodeInvalidPath, Message: "outside " + api.DataDir}
	}
	data, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return err
	}
	if int64(len(data)) != size {
		return fmt.Errorf("got %d bytes, want %d", len(data), size)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tick++
	b.files[path] = fakeFile{data: data, mod: time.Unix(0, b.tick)}
	return nil
}

func (b *fakeBox) ReadFile(_ context.Context, path string, w io.Writer, max int64) (int64, error) {
	b.mu.Lock()
	f, ok := b.files[path]
	b.mu.Unlock()
	if !ok {
		return 0, &runtime.Error{Code: api.CodeFileNotFound, Message: path}
	}
	if int64(len(f.data)) > max {
		return 0, &runtime.Error{Code: api.CodeFileTooLarge, Message: path}
	}
	n, err := io.Copy(w, bytes.NewReader(f.data))
	return n, err
}

func (b *fakeBox) ListFiles(context.Context) ([]runtime.FileInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []runtime.FileInfo
	for p, f := range b.files {
		out = append(out, runtime.FileInfo{Path: p, Bytes: int64(len(f.data)), ModTime: f.mod})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (b *fakeBox) RemoveFile(_ context.Context, path string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.files[path]; !ok {
		return &runtime.Error{Code: api.CodeFileNotFound, Message: path}
	}
	delete(b.files, path)
	return nil
}

func (b *fakeBox) file(path string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.files[path]
	return string(f.data), ok
}
