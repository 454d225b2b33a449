package runtime

import (
	"context"
	"io"
	"time"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

// Sandbox is one running gVisor sandbox with its resident interpreters.
type Sandbox struct {
	id string
}

// Result is an exec's outcome.
type Result struct {
	// ExecResult: ID, ContainerID and Files are left empty (the service
	// fills them).
	sandbox.ExecResult
	// MemoryPeakBytes is the sandbox's peak memory use (its cgroup's).
	MemoryPeakBytes int64
}

// FileInfo is a regular file under /mnt/data.
type FileInfo struct {
	Path    string
	Bytes   int64
	ModTime time.Time
}

// ID is the sandbox's runsc container id.
func (s *Sandbox) ID() string { return s.id }

// Alive reports whether the sandbox still runs and answers.
func (s *Sandbox) Alive() bool { return false }

// SetAllowedDomains changes an allow-list sandbox's allowed domains
// (normalized, see sandbox.NormalizeDomain; the pool starts them with
// none). It does nothing for a sandbox without network.
func (s *Sandbox) SetAllowedDomains(domains []string) {}

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
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest, out func(sandbox.ExecChunk)) (Result, error) {
	return Result{}, errNotImplemented
}

// WriteFile writes size bytes of r to path (a sandbox.CleanPath result)
// inside the sandbox: *Error CodeFileTooLarge when the disk is full or the
// file is over sandbox.MaxFileBytes, CodeInvalidPath for a path that
// leaves /mnt/data.
func (s *Sandbox) WriteFile(ctx context.Context, path string, r io.Reader, size int64) error {
	return errNotImplemented
}

// ReadFile copies the file at path to w, at most max bytes: *Error
// CodeFileNotFound, CodeInvalidPath, CodeFileTooLarge (over max).
func (s *Sandbox) ReadFile(ctx context.Context, path string, w io.Writer, max int64) (int64, error) {
	return 0, errNotImplemented
}

// ListFiles lists the regular files under /mnt/data (at most 10,000).
func (s *Sandbox) ListFiles(ctx context.Context) ([]FileInfo, error) {
	return nil, errNotImplemented
}

// RemoveFile removes the file at path: *Error CodeFileNotFound,
// CodeInvalidPath.
func (s *Sandbox) RemoveFile(ctx context.Context, path string) error {
	return errNotImplemented
}

// Close kills and deletes the sandbox and removes its dirs; idempotent.
func (s *Sandbox) Close() error { return nil }
