package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/objstore"
	api "github.com/aiforge/aiforge/pkg/sandbox"
	"github.com/aiforge/aiforge/services/sandbox/runtime"
)

// fileTimeout bounds a file copy in or out of a sandbox.
const fileTimeout = 2 * time.Minute

// holdOp takes the container's sandbox for a file operation (409 while an
// exec runs) and checks the container still runs.
func (s *Service) holdOp(c *container) error {
	if !c.op.TryLock() {
		return busy(fmt.Sprintf("an exec or file operation is running in container %s; retry when it finished", c.id))
	}
	if c.status() != api.StatusRunning {
		c.op.Unlock()
		return expired(c.id)
	}
	return nil
}

func (s *Service) onFileCreate(ctx context.Context, c *container, m *nats.Msg) (any, error) {
	var req api.FileRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	var uploadPrefix = api.UploadKey(c.tenant, c.id, "")
	switch {
	case req.FileID != "" && req.ObjectKey != "":
		return nil, invalid("file_id", "give file_id or an upload, not both")
	case req.FileID == "" && req.ObjectKey == "":
		return nil, invalid("file_id", "file_id or an uploaded file is required")
	case len(req.FileID) > 128:
		return nil, invalid("file_id", "not a file id")
	case req.ObjectKey != "":
		if !strings.HasPrefix(req.ObjectKey, uploadPrefix) || objstore.ValidateKey(req.ObjectKey) != nil {
			return nil, invalid("object_key", "an upload must be under %s", uploadPrefix)
		}
		// The upload is the service's to remove once read, whatever comes of it.
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
			defer cancel()
			if err := s.deps.Objects.Delete(dctx, req.ObjectKey); err != nil {
				s.log.Warn("sandbox: upload not removed", "container", c.id, "err", err)
			}
		}()
		if req.Name == "" {
			return nil, invalid("file", "an upload needs its file name")
		}
		if req.Bytes < 0 || req.Bytes > api.MaxFileBytes {
			return nil, &api.ErrorBody{Status: http.StatusRequestEntityTooLarge, Code: api.CodeFileTooLarge, Param: "file",
				Message: fmt.Sprintf("a container file may have at most %d bytes", api.MaxFileBytes)}
		}
	}
	var p string
	if req.Name != "" {
		var err error
		if p, err = api.CleanPath(req.Name); err != nil {
			return nil, &api.ErrorBody{Status: http.StatusBadRequest, Code: api.CodeInvalidPath, Param: "file", Message: err.Error()}
		}
	}
	if err := s.holdOp(c); err != nil {
		return nil, err
	}
	defer c.op.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, fileTimeout)
	defer cancel()
	b, _, err := s.ensureBox(ctx, c)
	if err != nil {
		return nil, err
	}
	var f api.File
	if req.FileID != "" {
		if f, err = s.copyFileID(ctx, c, b, req.FileID, req.Name, "file_id"); err != nil {
			return nil, err
		}
	} else {
		rc, info, err := s.deps.Objects.Get(ctx, req.ObjectKey)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, invalid("object_key", "no upload at %s", req.ObjectKey)
		}
		if err != nil {
			return nil, fmt.Errorf("sandbox: upload: %w", err)
		}
		f, err = s.writeIn(ctx, c, b, p, rc, info.Size, "file")
		_ = rc.Close()
		if err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.addFileLocked(f, time.Time{})
	c.mu.Unlock()
	c.touch(s.now())
	s.saveQuiet(ctx, c)
	return f, nil
}

func (s *Service) onFileList(c *container, m *nats.Msg) (any, error) {
	var req api.ListRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	if err := normalizeList(&req); err != nil {
		return nil, err
	}
	return paginate(c.fileList(), func(f api.File) string { return f.ID }, req)
}

// fileOf reads a FileRequest naming one of the container's files.
func fileOf(c *container, m *nats.Msg) (api.File, error) {
	var req api.FileRequest
	if err := decode(m, &req); err != nil {
		return api.File{}, err
	}
	if req.ID == "" {
		return api.File{}, invalid("file_id", "the file id is required")
	}
	f, ok := c.file(req.ID)
	if !ok {
		return api.File{}, fileNotFound(req.ID)
	}
	return f, nil
}

func (s *Service) onFileGet(c *container, m *nats.Msg) (any, error) {
	return fileOf(c, m)
}

// onFileContent copies a file out of the sandbox into the object store at
// api.ContentKey, for the edge to stream and remove.
func (s *Service) onFileContent(_ context.Context, c *container, m *nats.Msg) (any, error) {
	return s.onSandboxFile(c, m, func(ctx context.Context, b box, f api.File) (any, error) {
		return s.copyOut(ctx, c, b, f)
	})
}

// onSandboxFile runs op on a file the request names, holding the
// container's sandbox (one such operation at a time) for fileTimeout.
func (s *Service) onSandboxFile(c *container, m *nats.Msg, op func(ctx context.Context, b box, f api.File) (any, error)) (any, error) {
	f, err := fileOf(c, m)
	if err != nil {
		return nil, err
	}
	if err := s.holdOp(c); err != nil {
		return nil, err
	}
	defer c.op.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, fileTimeout)
	defer cancel()
	b, _, err := s.ensureBox(ctx, c)
	if err != nil {
		return nil, err
	}
	if _, ok := c.file(f.ID); !ok { // the sandbox was replaced: its files are gone
		return nil, fileNotFound(f.ID)
	}
	return op(ctx, b, f)
}

// copyOut copies f out of the sandbox to the object store.
func (s *Service) copyOut(ctx context.Context, c *container, b box, f api.File) (any, error) {
	key := api.ContentKey(c.tenant, c.id, newID(""))
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		_, err := b.ReadFile(ctx, f.Path, pw, api.MaxFileBytes)
		_ = pw.CloseWithError(err)
		read <- err
	}()
	ct := mime.TypeByExtension(path.Ext(f.Path))
	if ct == "" {
		ct = "application/octet-stream"
	}
	info, perr := s.deps.Objects.Put(ctx, key, pr, -1, ct)
	_ = pr.CloseWithError(errors.New("sandbox: copy out ended"))
	rerr := <-read
	if rerr != nil {
		var re *runtime.Error
		if errors.As(rerr, &re) && re.Code == api.CodeFileNotFound {
			c.mu.Lock()
			c.removeFileLocked(f.ID)
			c.mu.Unlock()
			return nil, fileNotFound(f.ID)
		}
		if perr == nil { // the store finished before the reader failed: do not leave a partial copy
			_ = s.deps.Objects.Delete(context.WithoutCancel(ctx), key)
		}
		return nil, rerr
	}
	if perr != nil {
		return nil, fmt.Errorf("sandbox: copy out: %w", perr)
	}
	f.Bytes = info.Size
	c.touch(s.now())
	return api.ContentReply{File: f, ObjectKey: key}, nil
}

func (s *Service) onFileDelete(_ context.Context, c *container, m *nats.Msg) (any, error) {
	return s.onSandboxFile(c, m, func(ctx context.Context, b box, f api.File) (any, error) {
		if err := b.RemoveFile(ctx, f.Path); err != nil {
			var re *runtime.Error
			if !errors.As(err, &re) || re.Code != api.CodeFileNotFound {
				return nil, err
			}
		}
		c.mu.Lock()
		c.removeFileLocked(f.ID)
		c.mu.Unlock()
		c.touch(s.now())
		s.saveQuiet(ctx, c)
		return api.Deleted{ID: f.ID, Object: api.ObjectFileDeleted, Deleted: true}, nil
	})
}
