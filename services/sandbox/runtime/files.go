package runtime

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

// The files API goes through the agent: the host never opens a path the
// sandbox controls. The agent refuses "..", symbolic links anywhere on the
// path (O_NOFOLLOW for the file itself) and anything but regular files.

// checkPath refuses a path that is not a sandbox.CleanPath result.
func checkPath(path string) error {
	c, err := sandbox.CleanPath(path)
	if err != nil {
		return &Error{Code: sandbox.CodeInvalidPath, Message: err.Error()}
	}
	if c != path {
		return &Error{Code: sandbox.CodeInvalidPath, Message: "the path is not clean"}
	}
	return nil
}

// agentError turns an agent's "err" reply into an *Error with a code the
// agent may give (anything else is CodeInvalidPath) and a bounded message.
func agentError(m agentMsg) *Error {
	code := m.Code
	switch code {
	case sandbox.CodeInvalidPath, sandbox.CodeFileNotFound, sandbox.CodeFileTooLarge:
	default:
		code = sandbox.CodeInvalidPath
	}
	msg := m.Msg
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return &Error{Code: code, Message: strings.ToValidUTF8(msg, "?")}
}

// await waits for the next message of a call.
func (s *Sandbox) await(ctx context.Context, ch chan agentMsg) (agentMsg, error) {
	select {
	case m, ok := <-ch:
		if !ok {
			return agentMsg{}, &Error{Code: sandbox.CodeSandboxCrashed, Message: "the sandbox has ended"}
		}
		return m, nil
	case <-s.dead:
		return agentMsg{}, &Error{Code: sandbox.CodeSandboxCrashed, Message: "the sandbox has ended"}
	case <-ctx.Done():
		return agentMsg{}, ctx.Err()
	}
}

// WriteFile writes size bytes of r to path (a sandbox.CleanPath result)
// inside the sandbox: *Error CodeFileTooLarge when the disk is full or the
// file is over sandbox.MaxFileBytes, CodeInvalidPath for a path that
// leaves /mnt/data.
func (s *Sandbox) WriteFile(ctx context.Context, path string, r io.Reader, size int64) error {
	if err := checkPath(path); err != nil {
		return err
	}
	if size < 0 || size > sandbox.MaxFileBytes {
		return &Error{Code: sandbox.CodeFileTooLarge, Message: fmt.Sprintf("a file is at most %d bytes", sandbox.MaxFileBytes)}
	}
	id, ch := s.call()
	defer s.hangUp(id)
	if err := s.send(map[string]any{"op": "write", "id": id, "path": path}); err != nil {
		return err
	}
	m, err := s.await(ctx, ch)
	if err != nil {
		return err
	}
	if m.Op != "ok" {
		return agentError(m)
	}
	buf := make([]byte, fileChunk)
	var sent int64
	for sent < size {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-sent)])
		if n > 0 {
			if err := s.send(map[string]any{"op": "wdata", "id": id, "data": base64.StdEncoding.EncodeToString(buf[:n])}); err != nil {
				return err
			}
			sent += int64(n)
		}
		select {
		case m, ok := <-ch:
			_ = s.send(map[string]any{"op": "wclose", "id": id})
			if !ok {
				return &Error{Code: sandbox.CodeSandboxCrashed, Message: "the sandbox has ended"}
			}
			return agentError(m)
		default:
		}
		if err != nil {
			_ = s.send(map[string]any{"op": "wclose", "id": id})
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return fmt.Errorf("the content is shorter than its size: %w", err)
			}
			return err
		}
		if ctx.Err() != nil {
			_ = s.send(map[string]any{"op": "wclose", "id": id})
			return ctx.Err()
		}
	}
	if err := s.send(map[string]any{"op": "wclose", "id": id}); err != nil {
		return err
	}
	m, err = s.await(ctx, ch)
	if err != nil {
		return err
	}
	if m.Op != "ok" {
		return agentError(m)
	}
	return nil
}

// ReadFile copies the file at path to w, at most max bytes: *Error
// CodeFileNotFound, CodeInvalidPath, CodeFileTooLarge (over max).
func (s *Sandbox) ReadFile(ctx context.Context, path string, w io.Writer, max int64) (int64, error) {
	if err := checkPath(path); err != nil {
		return 0, err
	}
	if max <= 0 || max > sandbox.MaxFileBytes {
		max = sandbox.MaxFileBytes
	}
	id, ch := s.call()
	defer s.hangUp(id)
	if err := s.send(map[string]any{"op": "read", "id": id, "path": path, "max": max}); err != nil {
		return 0, err
	}
	var n int64
	for {
		m, err := s.await(ctx, ch)
		if err != nil {
			return n, err
		}
		switch m.Op {
		case "rdata":
			b, err := base64.StdEncoding.DecodeString(m.Data)
			if err != nil {
				s.violation("a file chunk that is not base64")
				return n, &Error{Code: sandbox.CodeSandboxCrashed, Message: "the sandbox broke the protocol"}
			}
			if n+int64(len(b)) > max {
				return n, &Error{Code: sandbox.CodeFileTooLarge, Message: fmt.Sprintf("the file is over %d bytes", max)}
			}
			if _, err := w.Write(b); err != nil {
				return n, err
			}
			n += int64(len(b))
		case "ok":
			return n, nil
		case "err":
			return n, agentError(m)
		}
	}
}

// ListFiles lists the regular files under /mnt/data (at most 10,000).
func (s *Sandbox) ListFiles(ctx context.Context) ([]FileInfo, error) {
	id, ch := s.call()
	defer s.hangUp(id)
	if err := s.send(map[string]any{"op": "list", "id": id, "max": maxListed}); err != nil {
		return nil, err
	}
	var files []FileInfo
	for {
		m, err := s.await(ctx, ch)
		if err != nil {
			return nil, err
		}
		switch m.Op {
		case "file":
			if len(files) >= maxListed {
				continue
			}
			if !utf8.ValidString(m.Path) || len(m.Path) > sandbox.MaxPathLen || !strings.HasPrefix(m.Path, sandbox.DataDir+"/") || m.Size < 0 {
				continue
			}
			files = append(files, FileInfo{Path: m.Path, Bytes: m.Size, ModTime: time.Unix(m.MTime, 0).UTC()})
		case "ok":
			return files, nil
		case "err":
			return nil, agentError(m)
		}
	}
}

// RemoveFile removes the file at path: *Error CodeFileNotFound,
// CodeInvalidPath.
func (s *Sandbox) RemoveFile(ctx context.Context, path string) error {
	if err := checkPath(path); err != nil {
		return err
	}
	id, ch := s.call()
	defer s.hangUp(id)
	if err := s.send(map[string]any{"op": "remove", "id": id, "path": path}); err != nil {
		return err
	}
	m, err := s.await(ctx, ch)
	if err != nil {
		return err
	}
	if m.Op != "ok" {
		return agentError(m)
	}
	return nil
}
