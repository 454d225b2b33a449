package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/events"
	api "github.com/aiforge/aiforge/pkg/sandbox"
)

// execGrace is how long past its timeout an exec may take before the
// service stops waiting for the runtime (which enforces the timeout
// itself).
const execGrace = 30 * time.Second

// lostMessage ends the error message of an exec whose sandbox died (the
// runtime's message says how it died).
const lostMessage = "; the next call on this container gets a fresh sandbox: the container's files and interpreter state are lost."

// onExec runs an exec; a streamed one (header api.HdrStream) also gets
// its chunks and its end (EventDone with the result, or EventError with
// the error) on the stream subject.
func (s *Service) onExec(ctx context.Context, c *container, m *nats.Msg, who caller) (any, error) {
	stream := m.Header.Get(api.HdrStream)
	if stream != "" && !validStream(stream) {
		return nil, invalid("stream", "a streamed exec's subject must be under %s", streamPrefix)
	}
	res, err := s.exec(ctx, c, m, who, stream)
	if stream != "" {
		end := nats.NewMsg(stream)
		if err != nil {
			eb, _ := errorBody(err)
			end.Header.Set(api.HdrEvent, api.EventError)
			end.Header.Set(api.HdrStatus, strconv.Itoa(eb.Status))
			end.Data = errorJSON(eb)
		} else {
			end.Header.Set(api.HdrEvent, api.EventDone)
			end.Header.Set(api.HdrStatus, "200")
			end.Data, _ = json.Marshal(res)
		}
		if perr := s.deps.NC.PublishMsg(end); perr != nil {
			s.log.Warn("sandbox: stream end not published", "container", c.id, "err", perr)
		}
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (s *Service) exec(ctx context.Context, c *container, m *nats.Msg, who caller, stream string) (*api.ExecResult, error) {
	var req api.ExecRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	if req.TimeoutMS == 0 {
		req.TimeoutMS = s.cfg.ExecTimeout.Milliseconds()
	}
	if req.TimeoutMS > s.cfg.MaxExecTimeout.Milliseconds() {
		return nil, invalid("timeout_ms", "timeout_ms must be between 1 and %d", s.cfg.MaxExecTimeout.Milliseconds())
	}
	if err := req.Normalize(); err != nil {
		return nil, err
	}
	if !c.op.TryLock() {
		return nil, busy(fmt.Sprintf("another exec or file operation is running in container %s; one at a time", c.id))
	}
	defer c.op.Unlock()
	if c.status() != api.StatusRunning {
		return nil, expired(c.id)
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	ectx, cancel := context.WithTimeout(c.ctx, timeout+execGrace)
	defer cancel()
	b, warm, err := s.ensureBox(ectx, c)
	if err != nil {
		return nil, err
	}
	var out func(api.ExecChunk)
	if stream != "" {
		out = func(ch api.ExecChunk) {
			msg := nats.NewMsg(stream)
			msg.Header.Set(api.HdrEvent, ch.Type)
			msg.Data, _ = json.Marshal(ch)
			if err := s.deps.NC.PublishMsg(msg); err != nil {
				s.log.Debug("sandbox: stream chunk not published", "container", c.id, "err", err)
			}
		}
	}
	started := s.now()
	r, xerr := b.Exec(ectx, req, out)
	finished := s.now()
	res := r.ExecResult
	if xerr != nil && res.Error == nil {
		res.Error = &api.ExecError{Code: api.CodeSandboxCrashed, Message: "the sandbox stopped answering: " + xerr.Error()}
		res.ExitCode = -1
	}
	if c.ctx.Err() != nil && res.Error == nil {
		res.Error = &api.ExecError{Code: api.CodeContainerExpired, Message: "the container ended while the code ran"}
		res.ExitCode = -1
	}
	res.ID = newID("exec_")
	res.Object = api.ObjectExec
	res.ContainerID = c.id
	res.Files = []api.File{}
	if res.DurationMS <= 0 {
		res.DurationMS = finished.Sub(started).Milliseconds()
	}
	if b.Alive() {
		res.Files = s.refreshFiles(ectx, c, b)
	} else {
		code := api.CodeSandboxCrashed
		if res.Error != nil {
			code = res.Error.Code
		} else {
			res.Error = &api.ExecError{Code: code, Message: "the sandbox died."}
		}
		res.Error.Message += lostMessage
		s.pool.Release(b)
		s.m.replaced.WithLabelValues(code).Inc()
		c.mu.Lock()
		c.box = nil
		c.lostFilesLocked()
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.cpuMS += res.CPUMS
	c.peak = max(c.peak, r.MemoryPeakBytes)
	c.mu.Unlock()
	c.touch(finished)
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	s.saveQuiet(sctx, c)
	scancel()

	status := "ok"
	u := events.SandboxUsageV1{
		ID: res.ID, Tenant: c.tenant, KeyID: who.keyID, ContainerID: c.id, Kind: events.SandboxUsageExec, Language: req.Language,
		Status: events.UsageStatusOK, ExitCode: res.ExitCode, WallMS: res.DurationMS, CPUMS: res.CPUMS, MemoryLimitBytes: c.mem,
		MemoryPeakBytes: r.MemoryPeakBytes, GBSeconds: gbSeconds(c.mem, time.Duration(res.DurationMS)*time.Millisecond),
		Warm: warm, Node: s.cfg.Node, StartedAt: started, FinishedAt: finished,
	}
	if res.Error != nil {
		status = res.Error.Code
		u.Status, u.ErrorCode = events.UsageStatusError, res.Error.Code
	}
	s.m.execs.WithLabelValues(req.Language, status).Inc()
	s.m.execTime.WithLabelValues(req.Language).Observe(float64(res.DurationMS) / 1000)
	s.publishUsage(u)
	return &res, nil
}

// refreshFiles lists the sandbox's files after an exec: new ones are
// tracked (source assistant), changed ones updated, vanished ones
// forgotten; it returns the new and changed ones.
func (s *Service) refreshFiles(ctx context.Context, c *container, b box) []api.File {
	infos, err := b.ListFiles(ctx)
	if err != nil {
		s.log.Warn("sandbox: files not listed after an exec", "container", c.id, "err", err)
		return []api.File{}
	}
	now := s.now()
	changed := []api.File{}
	seen := make(map[string]bool, len(infos))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fi := range infos {
		seen[fi.Path] = true
		if id, ok := c.byPath[fi.Path]; ok {
			t := c.files[id]
			if t.file.Bytes != fi.Bytes || (!t.mod.IsZero() && !t.mod.Equal(fi.ModTime)) {
				t.file.Bytes = fi.Bytes
				changed = append(changed, t.file)
			}
			t.mod = fi.ModTime
			continue
		}
		if len(c.files) >= maxFiles {
			continue
		}
		f := api.File{ID: s.newOrderedID("cfile_", now), Object: api.ObjectContainerFile, CreatedAt: now.Unix(), Bytes: fi.Bytes,
			ContainerID: c.id, Path: fi.Path, Source: api.SourceAssistant}
		c.addFileLocked(f, fi.ModTime)
		changed = append(changed, f)
	}
	for id, t := range c.files {
		if !seen[t.file.Path] {
			c.removeFileLocked(id)
		}
	}
	slices.SortFunc(changed, func(a, b api.File) int { return cmp.Compare(a.Path, b.Path) })
	return changed
}
