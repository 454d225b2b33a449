package sandbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/events"
	pkgfiles "github.com/aiforge/aiforge/pkg/files"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/objstore"
	api "github.com/aiforge/aiforge/pkg/sandbox"
	"github.com/aiforge/aiforge/services/sandbox/runtime"
)

// maxFiles bounds the files tracked per container (listed, in the
// record); files code writes beyond it are not listed.
const maxFiles = 1000

// container is one live container of this replica.
type container struct {
	id, tenant, keyID string
	mem               int64
	spec              runtime.Spec
	created           time.Time
	ctx               context.Context // ends when the container does
	cancel            context.CancelFunc

	// op is held by whoever uses the sandbox: an exec, a file copy in or
	// out, a removal, the end. Calls that find it held answer 409.
	op sync.Mutex
	// saveMu orders record writes, so the last one written is the newest.
	saveMu sync.Mutex

	mu         sync.Mutex // guards the fields below
	rec        api.Record // Files is filled from files when saved
	box        box
	boxWarm    bool
	files      map[string]*tracked // by id
	byPath     map[string]string   // path → id
	seq        int64
	lastActive time.Time
	cpuMS      int64
	peak       int64
	sub        *nats.Subscription
}

// tracked is a file of a container: its object, when its content was
// last seen changed (zero: never listed), and its order of creation.
type tracked struct {
	file api.File
	mod  time.Time
	seq  int64
}

func (c *container) status() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec.Status
}

// object is the container object now.
func (c *container) object() api.Container {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.rec.Container
	o.LastActiveAt = c.lastActive.Unix()
	return o
}

// touch marks activity (expiry counts from the last one).
func (c *container) touch(t time.Time) {
	c.mu.Lock()
	if t.After(c.lastActive) {
		c.lastActive = t
	}
	c.mu.Unlock()
}

// addFile tracks f, replacing a file at the same path; c.mu held.
func (c *container) addFileLocked(f api.File, mod time.Time) {
	if old, ok := c.byPath[f.Path]; ok {
		delete(c.files, old)
	}
	c.seq++
	c.files[f.ID] = &tracked{file: f, mod: mod, seq: c.seq}
	c.byPath[f.Path] = f.ID
}

func (c *container) removeFileLocked(id string) {
	if t, ok := c.files[id]; ok {
		delete(c.byPath, t.file.Path)
		delete(c.files, id)
	}
}

// lostFilesLocked forgets every file: the sandbox holding them died.
func (c *container) lostFilesLocked() {
	c.files = map[string]*tracked{}
	c.byPath = map[string]string{}
}

func (c *container) file(id string) (api.File, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.files[id]
	if !ok {
		return api.File{}, false
	}
	return t.file, true
}

// fileList is the container's files in creation order.
func (c *container) fileList() []api.File {
	c.mu.Lock()
	ts := make([]*tracked, 0, len(c.files))
	for _, t := range c.files {
		ts = append(ts, t)
	}
	c.mu.Unlock()
	slices.SortFunc(ts, func(a, b *tracked) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]api.File, len(ts))
	for i, t := range ts {
		out[i] = t.file
	}
	return out
}

// snapshot is the record as it should be stored now.
func (c *container) snapshot() api.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rec
	r.LastActiveAt = c.lastActive.Unix()
	r.Files = make(map[string]api.File, len(c.files))
	for id, t := range c.files {
		r.Files[id] = t.file
	}
	return r
}

// save writes the container's record.
func (s *Service) save(ctx context.Context, c *container) error {
	c.saveMu.Lock()
	defer c.saveMu.Unlock()
	r := c.snapshot()
	b, err := r.Marshal()
	if err != nil {
		return err
	}
	if limit := s.deps.NC.MaxPayload() - 8<<10; int64(len(b)) > limit {
		// Many files with long paths: the record keeps the container, the
		// replica keeps the files.
		r.Files = nil
		if b, err = r.Marshal(); err != nil {
			return err
		}
		s.log.Warn("sandbox: record too large with its files; stored without them", "container", c.id)
	}
	if _, err := s.records.Put(ctx, api.RecordKey(c.tenant, c.id), b); err != nil {
		return fmt.Errorf("sandbox: save %s: %w", c.id, err)
	}
	return nil
}

// saveQuiet saves and logs a failure: the call it follows has done its
// work, and the next save writes the newer state anyway.
func (s *Service) saveQuiet(ctx context.Context, c *container) {
	if err := s.save(ctx, c); err != nil {
		s.log.Warn("sandbox: record not saved", "container", c.id, "err", err)
	}
}

// newOrderedID is prefix, the creation time in nanoseconds and random
// bytes, in hex: ids sort in creation order, so lists order by created_at
// then id as they were made.
func (s *Service) newOrderedID(prefix string, t time.Time) string {
	n := t.UnixNano()
	for {
		last := s.idTime.Load()
		if n <= last {
			n = last + 1
		}
		if s.idTime.CompareAndSwap(last, n) {
			break
		}
	}
	var b [20]byte
	binary.BigEndian.PutUint64(b[:8], uint64(n))
	_, _ = rand.Read(b[8:])
	return prefix + hex.EncodeToString(b[:])
}

// reserve takes one of the tenant's container slots on this replica.
func (s *Service) reserve(tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return &api.ErrorBody{Status: http.StatusServiceUnavailable, Code: api.CodeSandboxUnavailable, Message: "the sandbox replica is stopping"}
	}
	if s.perTenant[tenant] >= s.cfg.MaxContainersPerTenant {
		return &api.ErrorBody{Status: http.StatusTooManyRequests, Code: api.CodeSandboxCapacity,
			Message: fmt.Sprintf("tenant %s already has %d live containers on this sandbox replica, the most it may; delete one or let one expire", tenant, s.cfg.MaxContainersPerTenant)}
	}
	s.perTenant[tenant]++
	return nil
}

func (s *Service) unreserve(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perTenant[tenant]--; s.perTenant[tenant] <= 0 {
		delete(s.perTenant, tenant)
	}
}

// createTimeout bounds a create: a cold start and up to MaxFileIDs copies.
const createTimeout = 5 * time.Minute

func (s *Service) onCreate(ctx context.Context, m *nats.Msg, who caller) (any, error) {
	var req api.CreateRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	if err := req.Normalize(); err != nil {
		return nil, err
	}
	mem, _ := api.MemoryBytes(req.MemoryLimit)
	if err := s.reserve(who.tenant); err != nil {
		return nil, err
	}
	reserved := true
	defer func() {
		if reserved {
			s.unreserve(who.tenant)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()

	now := s.now()
	id := s.newOrderedID("cntr_", now)
	c := &container{
		id: id, tenant: who.tenant, keyID: who.keyID, mem: mem, created: now, lastActive: now,
		spec: runtime.Spec{MemoryBytes: mem, Network: *req.NetworkPolicy, Labels: map[string]string{"tenant": who.tenant, "container": id}},
		rec: api.Record{Container: api.Container{
			ID: id, Object: api.ObjectContainer, CreatedAt: now.Unix(), Status: api.StatusRunning, ExpiresAfter: *req.ExpiresAfter,
			LastActiveAt: now.Unix(), Name: req.Name, MemoryLimit: req.MemoryLimit, NetworkPolicy: req.NetworkPolicy,
		}, Tenant: who.tenant, KeyID: who.keyID, Node: s.cfg.Node},
		files: map[string]*tracked{}, byPath: map[string]string{},
	}
	b, warm, err := s.pool.Get(ctx, c.spec)
	if err != nil {
		return nil, err
	}
	c.box, c.boxWarm = b, warm
	ok := false
	defer func() {
		if !ok {
			s.pool.Release(b)
		}
	}()
	if req.NetworkPolicy.Type == api.NetworkAllowlist {
		b.SetAllowedDomains(req.NetworkPolicy.AllowedDomains)
	}
	for i, fid := range req.FileIDs {
		f, err := s.copyFileID(ctx, c, b, fid, "", fmt.Sprintf("file_ids[%d]", i))
		if err != nil {
			return nil, err
		}
		c.addFileLocked(f, time.Time{}) // c is not shared yet
	}
	c.ctx, c.cancel = context.WithCancel(s.base)
	r := c.snapshot()
	body, err := r.Marshal()
	if err != nil {
		return nil, err
	}
	if _, err := s.records.Create(ctx, api.RecordKey(c.tenant, c.id), body); err != nil {
		return nil, fmt.Errorf("sandbox: record %s: %w", c.id, err)
	}
	undo := func() {
		c.cancel()
		if c.sub != nil {
			_ = c.sub.Unsubscribe()
		}
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
		defer dcancel()
		if err := s.records.Delete(dctx, api.RecordKey(c.tenant, c.id)); err != nil {
			s.log.Warn("sandbox: record of a failed create left", "container", c.id, "err", err)
		}
	}
	sub, err := s.deps.NC.Subscribe(events.SandboxContainerAll(c.id), func(m *nats.Msg) {
		op := opOf(m.Subject)
		s.spawn(m, op, func(ctx context.Context, m *nats.Msg, who caller) (any, error) {
			return s.onContainer(ctx, c, op, m, who)
		})
	})
	if err != nil {
		undo()
		return nil, fmt.Errorf("sandbox: subscribe %s: %w", c.id, err)
	}
	c.sub = sub
	// The subscription must be in place at the server before the edge
	// learns the id and calls it.
	if err := s.deps.NC.FlushWithContext(ctx); err != nil { // ctx has createTimeout
		undo()
		return nil, fmt.Errorf("sandbox: flush: %w", err)
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		undo()
		return nil, &api.ErrorBody{Status: http.StatusServiceUnavailable, Code: api.CodeSandboxUnavailable, Message: "the sandbox replica is stopping"}
	}
	s.containers[c.id] = c
	s.mu.Unlock()
	ok, reserved = true, false // the container holds the sandbox and the slot now
	s.m.containers.Inc()
	s.log.Info("sandbox: container created", "container", c.id, "tenant", c.tenant, "memory_limit", req.MemoryLimit,
		"network", req.NetworkPolicy.Type, "files", len(req.FileIDs), "warm", warm)
	return c.object(), nil
}

// copyFileID copies the tenant's file fid (events.BucketFiles, bytes in
// the object store) into the sandbox, at name (default the file's name)
// under /mnt/data.
func (s *Service) copyFileID(ctx context.Context, c *container, b box, fid, name, param string) (api.File, error) {
	rec, _, err := kv.Get[pkgfiles.Record](ctx, s.files, pkgfiles.Key(c.tenant, fid))
	if errors.Is(err, kv.ErrNotFound) || (err == nil && rec.Tenant != "" && rec.Tenant != c.tenant) {
		return api.File{}, invalid(param, "No file found with id '%s'.", fid)
	}
	if err != nil {
		return api.File{}, fmt.Errorf("sandbox: file %s: %w", fid, err)
	}
	if rec.Bytes > api.MaxFileBytes {
		return api.File{}, &api.ErrorBody{Status: http.StatusRequestEntityTooLarge, Code: api.CodeFileTooLarge, Param: param,
			Message: fmt.Sprintf("file %s is %d bytes, over the %d a container file may have", fid, rec.Bytes, api.MaxFileBytes)}
	}
	if name == "" {
		name = path.Base(rec.Filename)
	}
	p, err := api.CleanPath(name)
	if err != nil {
		return api.File{}, &api.ErrorBody{Status: http.StatusBadRequest, Code: api.CodeInvalidPath, Param: param, Message: fmt.Sprintf("file %s: %v", fid, err)}
	}
	key := rec.ObjectKey
	if key == "" {
		key = pkgfiles.ObjectKey(c.tenant, fid)
	}
	rc, info, err := s.deps.Objects.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return api.File{}, invalid(param, "the content of file %s is gone", fid)
	}
	if err != nil {
		return api.File{}, fmt.Errorf("sandbox: file %s: %w", fid, err)
	}
	defer func() { _ = rc.Close() }()
	return s.writeIn(ctx, c, b, p, rc, info.Size, param)
}

// writeIn writes size bytes of r into the sandbox at p and returns the
// new file.
func (s *Service) writeIn(ctx context.Context, c *container, b box, p string, r io.Reader, size int64, param string) (api.File, error) {
	if size > api.MaxFileBytes {
		return api.File{}, &api.ErrorBody{Status: http.StatusRequestEntityTooLarge, Code: api.CodeFileTooLarge, Param: param,
			Message: fmt.Sprintf("the file is %d bytes, over the %d a container file may have", size, api.MaxFileBytes)}
	}
	if err := b.WriteFile(ctx, p, io.LimitReader(r, size), size); err != nil {
		return api.File{}, err
	}
	now := s.now()
	return api.File{ID: s.newOrderedID("cfile_", now), Object: api.ObjectContainerFile, CreatedAt: now.Unix(), Bytes: size,
		ContainerID: c.id, Path: p, Source: api.SourceUser}, nil
}

func (s *Service) onList(ctx context.Context, m *nats.Msg, who caller) (any, error) {
	var req api.ListRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	if err := normalizeList(&req); err != nil {
		return nil, err
	}
	entries, err := kv.List[api.Record](ctx, s.records, api.RecordKey(who.tenant, "*"))
	if err != nil {
		var de *kv.DecodeError
		if !errors.As(err, &de) {
			return nil, err
		}
		s.log.Warn("sandbox: records that do not decode are not listed", "tenant", who.tenant, "err", err)
	}
	var out []api.Container
	for _, e := range entries {
		r := e.Value
		if r.Tenant != who.tenant || r.Status == api.StatusDeleted || (req.Name != "" && r.Name != req.Name) {
			continue
		}
		out = append(out, r.Container)
	}
	slices.SortFunc(out, func(a, b api.Container) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return paginate(out, func(c api.Container) string { return c.ID }, req)
}

// onContainer serves a call on one of this replica's containers.
func (s *Service) onContainer(ctx context.Context, c *container, op string, m *nats.Msg, who caller) (any, error) {
	if who.tenant != c.tenant {
		return nil, notFound(c.id) // another tenant's container does not exist for this one
	}
	switch st := c.status(); st {
	case api.StatusRunning:
	case api.StatusDeleted:
		return nil, notFound(c.id)
	default:
		return nil, expired(c.id)
	}
	switch op {
	case api.OpGet:
		return c.object(), nil
	case api.OpDelete:
		if !s.end(c, api.StatusDeleted, false) {
			return nil, notFound(c.id)
		}
		return api.Deleted{ID: c.id, Object: api.ObjectContainerDeleted, Deleted: true}, nil
	case api.OpExec:
		return s.onExec(ctx, c, m, who)
	case api.OpFileCreate:
		return s.onFileCreate(ctx, c, m)
	case api.OpFileList:
		return s.onFileList(c, m)
	case api.OpFileGet:
		return s.onFileGet(c, m)
	case api.OpFileContent:
		return s.onFileContent(ctx, c, m)
	case api.OpFileDelete:
		return s.onFileDelete(ctx, c, m)
	}
	return nil, invalid("op", "unknown container operation %q", op)
}

// end ends a container (deleted or expired): no more calls, its sandbox
// closed, its record removed (deleted) or marked expired, its life
// billed. holdsOp says the caller holds c.op; otherwise end cancels what
// runs in the sandbox and waits for it. It reports whether it ended c (a
// container ends once).
func (s *Service) end(c *container, status string, holdsOp bool) bool {
	c.mu.Lock()
	if c.rec.Status != api.StatusRunning {
		c.mu.Unlock()
		return false
	}
	c.rec.Status = status
	sub := c.sub
	c.mu.Unlock()
	c.cancel()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	if !holdsOp {
		c.op.Lock()
		defer c.op.Unlock()
	}
	c.mu.Lock()
	b := c.box
	c.box = nil
	cpu, peak, warm := c.cpuMS, c.peak, c.boxWarm
	c.mu.Unlock()
	if b != nil {
		s.pool.Release(b)
	}
	s.mu.Lock()
	delete(s.containers, c.id)
	s.mu.Unlock()
	s.unreserve(c.tenant)
	s.m.containers.Dec()
	s.m.ended.WithLabelValues(status).Inc()

	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	if status == api.StatusDeleted {
		// Deleted containers are forgotten, as OpenAI's: a get answers 404.
		if err := s.records.Delete(ctx, api.RecordKey(c.tenant, c.id)); err != nil {
			s.log.Warn("sandbox: record of a deleted container left", "container", c.id, "err", err)
		}
	} else {
		s.saveQuiet(ctx, c)
	}
	s.publishUsage(lifeUsage(c.id, c.tenant, c.keyID, s.cfg.Node, c.mem, c.created, s.now(), cpu, peak, warm))
	s.log.Info("sandbox: container ended", "container", c.id, "tenant", c.tenant, "status", status)
	return true
}

// sweep expires the containers idle past their expires_after (an exec or
// file copy in progress is activity: such a container is left).
func (s *Service) sweep() {
	now := s.now()
	s.mu.Lock()
	all := make([]*container, 0, len(s.containers))
	for _, c := range s.containers {
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		if !c.op.TryLock() {
			continue
		}
		c.mu.Lock()
		idle := now.Sub(c.lastActive) >= time.Duration(c.rec.ExpiresAfter.Minutes)*time.Minute
		c.mu.Unlock()
		if idle {
			s.end(c, api.StatusExpired, true)
		}
		c.op.Unlock()
	}
}

// ensureBox returns the container's sandbox, replacing one that died
// with a fresh one (the files were lost with it); c.op held.
func (s *Service) ensureBox(ctx context.Context, c *container) (box, bool, error) {
	c.mu.Lock()
	b, warm := c.box, c.boxWarm
	c.mu.Unlock()
	if b != nil && b.Alive() {
		return b, warm, nil
	}
	if b != nil {
		s.pool.Release(b)
		s.m.replaced.WithLabelValues(api.CodeSandboxCrashed).Inc()
		s.log.Warn("sandbox: a container's sandbox died; replacing it", "container", c.id)
		c.mu.Lock()
		c.box = nil
		c.lostFilesLocked()
		c.mu.Unlock()
	}
	nb, warm, err := s.pool.Get(ctx, c.spec)
	if err != nil {
		return nil, false, err
	}
	if c.spec.Network.Type == api.NetworkAllowlist {
		nb.SetAllowedDomains(c.spec.Network.AllowedDomains)
	}
	c.mu.Lock()
	c.box = nb
	c.mu.Unlock()
	return nb, warm, nil
}
