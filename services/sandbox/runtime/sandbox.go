package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

// maxLine bounds one protocol line read from the agent: the agent's
// largest honest line is an output chunk of 16 KiB escaped as JSON (at
// most 6 bytes per byte) or a file chunk of 48 KiB in base64.
const maxLine = 256 << 10

// maxListed bounds ListFiles.
const maxListed = 10000

// fileChunk is the size of the file pieces sent to the agent.
const fileChunk = 48 << 10

// Why a sandbox ended, when the host ended it.
const (
	endNone int32 = iota
	endTimeout
	endClosed
	endProtocol
)

// Sandbox is one running gVisor sandbox with its resident interpreters.
type Sandbox struct {
	// pidsHits is the last count of tasks the host pids limit refused,
	// sampled during an exec.
	pidsHits atomic.Int64
	id       string
	rt       *Runtime
	dir      string
	labels   map[string]string
	cg       cgroupStats
	cmd      *exec.Cmd
	egress   *egressProxy

	wmu   sync.Mutex // one writer of the protocol at a time
	stdin io.WriteCloser

	mu      sync.Mutex
	calls   map[int64]*pending
	nextID  int64
	busy    atomic.Bool
	ended   atomic.Int32 // endNone, or why the host ended it
	dead    chan struct{}
	exitErr error // set before dead is closed
	ready   chan struct{}

	closeOnce sync.Once
	closeErr  error
	stderr    *tailBuffer
}

// pending is a call waiting for the agent's lines; gone is closed when the
// caller stops listening, so the reader never blocks on a call that left.
type pending struct {
	ch   chan agentMsg
	gone chan struct{}
}

// agentMsg is one line from the agent. Every field is checked before use.
type agentMsg struct {
	Op       string `json:"op"`
	ID       int64  `json:"id"`
	Stream   string `json:"stream"`
	Data     string `json:"data"`
	Exit     int    `json:"exit"`
	Error    string `json:"error"`
	Code     string `json:"code"`
	Msg      string `json:"msg"`
	TruncOut bool   `json:"trunc_out"`
	TruncErr bool   `json:"trunc_err"`
	Size     int64  `json:"size"`
	Path     string `json:"path"`
	MTime    int64  `json:"mtime"`
}

// Result is an exec's outcome.
type Result struct {
	// ExecResult: ID, ContainerID and Files are left empty (the service
	// fills them).
	sandbox.ExecResult
	// MemoryPeakBytes is the sandbox's peak memory use during the exec
	// (its cgroup's, gVisor included).
	MemoryPeakBytes int64
}

// FileInfo is a regular file under /mnt/data.
type FileInfo struct {
	Path    string
	Bytes   int64
	ModTime time.Time
}

func (r *Runtime) start(ctx context.Context, spec Spec) (*Sandbox, error) {
	id := newID()
	dir := filepath.Join(r.cfg.StateDir, "sandboxes", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &Error{Code: sandbox.CodeSandboxUnavailable, Message: "sandbox dir: " + err.Error()}
	}
	s := &Sandbox{
		id:     id,
		rt:     r,
		dir:    dir,
		labels: spec.Labels,
		cg:     newCgroupStats(id),
		calls:  map[int64]*pending{},
		dead:   make(chan struct{}),
		ready:  make(chan struct{}),
		stderr: &tailBuffer{max: 8 << 10},
	}
	fail := func(err error) (*Sandbox, error) {
		_ = s.Close()
		var e *Error
		if errors.As(err, &e) {
			return nil, e
		}
		return nil, &Error{Code: sandbox.CodeSandboxUnavailable, Message: "starting a sandbox: " + err.Error()}
	}
	egress := ""
	if spec.Network.Type == sandbox.NetworkAllowlist {
		egress = filepath.Join(dir, "egress")
		p, err := newEgressProxy(r.cfg.Egress, egress, r.log.With("sandbox", id))
		if err != nil {
			return fail(err)
		}
		s.egress = p
		p.setAllowed(spec.Network.AllowedDomains)
	}
	if err := r.writeBundle(dir, id, spec, egress); err != nil {
		return fail(err)
	}
	args := []string{"--root=" + r.runscRoot(), "--network=none", "--platform=" + r.cfg.Platform}
	if egress != "" {
		args = append(args, "--host-uds=open")
	}
	args = append(args, "run", "--bundle", dir, id)
	cmd := exec.Command(r.runsc, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"} // nothing of the host's environment
	cmd.Dir = dir
	cmd.Stderr = s.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fail(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail(err)
	}
	s.stdin = stdin
	s.cmd = cmd
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		s.cmd = nil
		return fail(err)
	}
	go s.wait()
	go s.read(stdout)
	timer := time.NewTimer(r.cfg.StartTimeout)
	defer timer.Stop()
	select {
	case <-s.ready:
	case <-s.dead:
		return fail(fmt.Errorf("the sandbox ended at start: %v: %s", s.exitErr, s.stderr.String()))
	case <-timer.C:
		return fail(errors.New("the sandbox did not answer within the start timeout"))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	r.log.Debug("sandbox started", "sandbox", id, "labels", spec.Labels, "network", spec.Network.Type, "took", time.Since(t0))
	return s, nil
}

// wait reaps runsc and marks the sandbox dead.
func (s *Sandbox) wait() {
	err := s.cmd.Wait()
	s.exitErr = err
	close(s.dead)
	s.mu.Lock()
	for id, p := range s.calls {
		close(p.ch)
		delete(s.calls, id)
	}
	s.mu.Unlock()
	if s.ended.Load() == endNone {
		s.rt.log.Info("sandbox ended by itself", "sandbox", s.id, "labels", s.labels, "err", err, "runsc", s.stderr.String())
	}
}

// read dispatches the agent's lines to the calls waiting for them. A line
// over maxLine or not JSON is a protocol violation: the sandbox is killed.
func (s *Sandbox) read(stdout io.Reader) {
	br := bufio.NewReaderSize(stdout, 64<<10)
	for {
		line, err := readLine(br, maxLine)
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				s.violation("a line over the limit")
			}
			return
		}
		var m agentMsg
		if err := json.Unmarshal(line, &m); err != nil {
			s.violation("a line that is not JSON")
			return
		}
		if m.Op == "ready" {
			select {
			case <-s.ready:
			default:
				close(s.ready)
			}
			continue
		}
		s.mu.Lock()
		p := s.calls[m.ID]
		s.mu.Unlock()
		if p == nil {
			continue // a late line of a call that gave up
		}
		select {
		case p.ch <- m:
		case <-p.gone:
		case <-s.dead:
			return
		}
	}
}

var errLineTooLong = errors.New("line too long")

func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)+len(frag) > max {
			return nil, errLineTooLong
		}
		buf = append(buf, frag...)
		if err == nil {
			return buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

func (s *Sandbox) violation(what string) {
	s.rt.log.Warn("sandbox agent broke the protocol; killing the sandbox", "sandbox", s.id, "labels", s.labels, "what", what)
	s.kill(endProtocol)
}

// kill ends the sandbox for the given reason (the first reason sticks).
func (s *Sandbox) kill(why int32) {
	s.ended.CompareAndSwap(endNone, why)
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.dead:
		return
	default:
	}
	grace := 5 * time.Second
	if _, err := s.rt.runscCmd(context.Background(), "kill", s.id, "KILL"); err != nil {
		grace = 0 // not created yet, or gone: runsc run is all there is
	}
	select {
	case <-s.dead:
	case <-time.After(grace):
		// runsc run did not notice: end it, and the container.
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.dead
	}
	// runsc run deletes the container when it ends; make sure.
	_, _ = s.rt.runscCmd(context.Background(), "delete", "-force", s.id)
}

// ID is the sandbox's runsc container id.
func (s *Sandbox) ID() string { return s.id }

// Alive reports whether the sandbox still runs.
func (s *Sandbox) Alive() bool {
	select {
	case <-s.dead:
		return false
	default:
		return s.ended.Load() == endNone
	}
}

// SetAllowedDomains changes an allow-list sandbox's allowed domains
// (normalized, see sandbox.NormalizeDomain; the pool starts them with
// none). It does nothing for a sandbox without network.
func (s *Sandbox) SetAllowedDomains(domains []string) {
	if s.egress != nil {
		s.egress.setAllowed(domains)
	}
}

// call registers a new call id and returns it with its channel.
func (s *Sandbox) call() (int64, chan agentMsg) {
	p := &pending{ch: make(chan agentMsg, 64), gone: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	select {
	case <-s.dead:
		close(p.ch)
	default:
		s.calls[s.nextID] = p
	}
	return s.nextID, p.ch
}

func (s *Sandbox) hangUp(id int64) {
	s.mu.Lock()
	if p := s.calls[id]; p != nil {
		close(p.gone)
		delete(s.calls, id)
	}
	s.mu.Unlock()
}

// send writes one request line to the agent.
func (s *Sandbox) send(req map[string]any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.stdin.Write(b); err != nil {
		return s.lost(err)
	}
	return nil
}

// lost is the error of a sandbox that cannot be talked to: it is killed.
func (s *Sandbox) lost(err error) *Error {
	s.kill(endProtocol)
	return &Error{Code: sandbox.CodeSandboxCrashed, Message: "the sandbox does not answer: " + err.Error()}
}

// Exec runs code in the resident interpreter (python: stateful, like a
// notebook; bash: a resident shell). One exec at a time per sandbox (a
// second concurrent one gets *Error{Code: sandbox.CodeSandboxBusy}). out,
// when non-nil, receives output as it comes (Type sandbox.EventStdout /
// EventStderr), already capped. The result always has Stdout/Stderr
// (capped, *Truncated flags), ExitCode, DurationMS, CPUMS and
// MemoryPeakBytes. A timeout, CPU limit, memory limit or crash sets
// Result.Error (CodeExecTimeout, CodeCPULimit, CodeMemoryLimit,
// CodeSandboxCrashed) and, where the sandbox had to be killed, Alive() is
// false afterwards (the caller replaces it). err != nil only for a failure
// to talk to the sandbox at all (then also Alive() == false), as *Error.
//
// The CPU limit of an exec is nine tenths of its wall-clock timeout
// (RLIMIT_CPU inside, whole seconds, at least one): a busy loop ends with
// CodeCPULimit and the sandbox keeps its state, code that waits is killed
// with the sandbox at the timeout.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest, out func(sandbox.ExecChunk)) (Result, error) {
	if err := req.Normalize(); err != nil {
		return Result{}, &Error{Code: sandbox.CodeInvalidRequest, Message: err.Error()}
	}
	if !s.busy.CompareAndSwap(false, true) {
		return Result{}, &Error{Code: sandbox.CodeSandboxBusy, Message: "another exec is running in this sandbox"}
	}
	defer s.busy.Store(false)
	if !s.Alive() {
		return Result{}, &Error{Code: sandbox.CodeSandboxCrashed, Message: "the sandbox has ended"}
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	cpu := int64(timeout.Seconds() * 0.9)
	if cpu < 1 {
		cpu = 1
	}
	s.cg.resetPeak()
	cpu0 := s.cg.cpuNanos()
	t0 := time.Now()
	id, ch := s.call()
	defer s.hangUp(id)
	res := Result{}
	res.Object = sandbox.ObjectExec
	stdout := capped{max: s.rt.cfg.MaxOutputBytes}
	stderr := capped{max: s.rt.cfg.MaxOutputBytes}
	finish := func() (Result, error) {
		res.Stdout, res.StdoutTruncated = stdout.String(), res.StdoutTruncated || stdout.truncated
		res.Stderr, res.StderrTruncated = stderr.String(), res.StderrTruncated || stderr.truncated
		res.DurationMS = time.Since(t0).Milliseconds()
		if c := s.cg.cpuNanos(); c > cpu0 {
			res.CPUMS = (c - cpu0) / 1e6
		}
		res.MemoryPeakBytes = s.cg.memoryPeak()
		return res, nil
	}
	if err := s.send(map[string]any{"op": "exec", "id": id, "lang": req.Language, "code": req.Code, "cpu": cpu, "max": s.rt.cfg.MaxOutputBytes}); err != nil {
		return Result{}, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	// The host cgroup is gone once runsc ends, so its pids events are
	// sampled while the code runs, to name a process flood that ends the
	// sandbox.
	sample := time.NewTicker(pidsSampleEvery)
	defer sample.Stop()
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return s.ended2(&res, finish)
			}
			switch m.Op {
			case "out":
				var c *capped
				var typ string
				switch m.Stream {
				case "stdout":
					c, typ = &stdout, sandbox.EventStdout
				case "stderr":
					c, typ = &stderr, sandbox.EventStderr
				default:
					continue
				}
				if data := c.add(m.Data); data != "" && out != nil {
					out(sandbox.ExecChunk{Type: typ, Data: data})
				}
			case "done":
				res.ExitCode = m.Exit
				res.StdoutTruncated = m.TruncOut
				res.StderrTruncated = m.TruncErr
				switch m.Error {
				case "xcpu":
					res.Error = &sandbox.ExecError{Code: sandbox.CodeCPULimit, Message: fmt.Sprintf("the code used up its CPU time (%d s)", cpu)}
				case "agent":
					res.Error = &sandbox.ExecError{Code: sandbox.CodeSandboxCrashed, Message: "the sandbox's agent failed to run the code"}
				case "memory":
					res.Error = &sandbox.ExecError{Code: sandbox.CodeMemoryLimit, Message: "the code ran out of memory (MemoryError); the sandbox still runs"}
				}
				return finish()
			}
		case <-sample.C:
			if n := s.cg.pidsLimitHits(); n > 0 {
				s.pidsHits.Store(n)
			}
		case <-s.dead:
			return s.ended2(&res, finish)
		case <-timer.C:
			s.kill(endTimeout)
			res.ExitCode = -1
			res.Error = &sandbox.ExecError{Code: sandbox.CodeExecTimeout, Message: fmt.Sprintf("the code ran past its %v timeout; the sandbox was killed", timeout)}
			return finish()
		case <-ctx.Done():
			s.kill(endTimeout)
			res.ExitCode = -1
			res.Error = &sandbox.ExecError{Code: sandbox.CodeExecTimeout, Message: "the exec was cancelled; the sandbox was killed"}
			return finish()
		}
	}
}

// pidsSampleEvery is how often an exec samples the host pids events.
const pidsSampleEvery = 250 * time.Millisecond

// ended2 fills the result of an exec whose sandbox died under it.
func (s *Sandbox) ended2(res *Result, finish func() (Result, error)) (Result, error) {
	<-s.dead
	res.ExitCode = -1
	peak, fails, pids := s.cg.memoryPeak(), s.cg.memoryFailures(), max(s.cg.pidsLimitHits(), s.pidsHits.Load())
	switch {
	case s.ended.Load() == endTimeout:
		res.Error = &sandbox.ExecError{Code: sandbox.CodeExecTimeout, Message: "the code ran past its timeout; the sandbox was killed"}
	case s.ended.Load() == endNone && (killedBySIGKILL(s.exitErr) || fails > 0):
		// Nobody here killed it: the kernel's OOM killer did, on the
		// sandbox's memory cgroup.
		res.Error = &sandbox.ExecError{Code: sandbox.CodeMemoryLimit, Message: "the code went over the memory limit; the sandbox was killed"}
	case pids > 0:
		res.Error = &sandbox.ExecError{Code: sandbox.CodePidsLimit, Message: "the code started more processes and threads than the sandbox allows; the sandbox was stopped"}
	default:
		res.Error = &sandbox.ExecError{Code: sandbox.CodeSandboxCrashed, Message: "the sandbox ended during the exec"}
	}
	s.ended.CompareAndSwap(endNone, endProtocol)
	r, err := finish()
	if r.MemoryPeakBytes == 0 {
		r.MemoryPeakBytes = peak
	}
	return r, err
}

func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
		return ws.Signaled() && ws.Signal() == syscall.SIGKILL || ws.Exited() && ws.ExitStatus() == 128+int(syscall.SIGKILL)
	}
	return false
}

// capped collects up to max bytes of a stream, cut at a UTF-8 boundary.
type capped struct {
	b         strings.Builder
	max       int64
	truncated bool
}

// add appends what fits and returns it.
func (c *capped) add(s string) string {
	room := c.max - int64(c.b.Len())
	if int64(len(s)) > room {
		c.truncated = true
		cut := int(max(room, 0))
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	c.b.WriteString(s)
	return s
}

func (c *capped) String() string { return c.b.String() }

// tailBuffer keeps the last max bytes written (runsc's own stderr).
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Close kills and deletes the sandbox and removes its dirs; idempotent.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() {
		s.kill(endClosed)
		if s.stdin != nil {
			_ = s.stdin.Close()
		}
		if s.egress != nil {
			s.egress.close()
		}
		s.rt.forget(s.id)
		removeCgroups(s.id)
		s.closeErr = os.RemoveAll(s.dir)
	})
	return s.closeErr
}
