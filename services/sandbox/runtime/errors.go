package runtime

import "errors"

// Error is a failure of the runtime with a stable code from pkg/sandbox
// (sandbox.CodeSandboxBusy, CodeFileNotFound, ...).
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return "sandbox runtime: " + e.Code + ": " + e.Message }

// ErrUnavailable is wrapped by New's error when runsc cannot run here.
var ErrUnavailable = errors.New("sandbox runtime unavailable")
