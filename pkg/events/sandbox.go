package events

import (
	"errors"
	"fmt"
	"time"
)

// Sandbox usage kinds: one exec, or the time a container was kept alive
// (billed when it is deleted or expires).
const (
	SandboxUsageExec      = "exec"
	SandboxUsageContainer = "container"
)

// SandboxUsageV1 is what one agent sandbox exec (or one container's life)
// used: wall and CPU seconds and memory, the gigabyte-seconds billed
// (memory limit times wall time). Its envelope id is ID, so a retried
// publish is stored once. It never carries code or output.
type SandboxUsageV1 struct {
	ID          string `json:"id"`
	Tenant      string `json:"tenant"`
	KeyID       string `json:"key_id"`
	ContainerID string `json:"container_id"`
	// Kind is SandboxUsageExec or SandboxUsageContainer.
	Kind     string `json:"kind"`
	Language string `json:"language,omitempty"`
	// Status is UsageStatusOK, or UsageStatusError with ErrorCode
	// (pkg/sandbox's codes: exec_timeout, memory_limit_exceeded, ...).
	Status           string    `json:"status"`
	ErrorCode        string    `json:"error_code,omitempty"`
	ExitCode         int       `json:"exit_code"`
	WallMS           int64     `json:"wall_ms"`
	CPUMS            int64     `json:"cpu_ms"`
	MemoryLimitBytes int64     `json:"memory_limit_bytes"`
	MemoryPeakBytes  int64     `json:"memory_peak_bytes"`
	GBSeconds        float64   `json:"gb_seconds"`
	Warm             bool      `json:"warm"`
	Node             string    `json:"node"`
	StartedAt        time.Time `json:"started_at"`
	FinishedAt       time.Time `json:"finished_at"`
}

// EventType implements Event.
func (SandboxUsageV1) EventType() string { return TypeSandboxUsageV1 }

// Subject implements Event.
func (u SandboxUsageV1) Subject() string { return Subject(TypeSandboxUsageV1, u.Tenant) }

// Validate implements Event.
func (u SandboxUsageV1) Validate() error {
	var errs []error
	if u.ID == "" {
		errs = append(errs, errors.New("id is required"))
	}
	if u.Tenant == "" {
		errs = append(errs, errors.New("tenant is required"))
	}
	if u.ContainerID == "" {
		errs = append(errs, errors.New("container_id is required"))
	}
	switch u.Kind {
	case SandboxUsageExec, SandboxUsageContainer:
	default:
		errs = append(errs, fmt.Errorf("kind %q is not one of exec, container", u.Kind))
	}
	switch u.Status {
	case UsageStatusOK:
	case UsageStatusError:
		if u.ErrorCode == "" {
			errs = append(errs, errors.New("an error status needs error_code"))
		}
	default:
		errs = append(errs, fmt.Errorf("status %q is not one of ok, error", u.Status))
	}
	if u.WallMS < 0 || u.CPUMS < 0 || u.MemoryLimitBytes < 0 || u.MemoryPeakBytes < 0 || u.GBSeconds < 0 {
		errs = append(errs, errors.New("durations, bytes and gb_seconds are never negative"))
	}
	if u.StartedAt.IsZero() || u.FinishedAt.Before(u.StartedAt) {
		errs = append(errs, errors.New("started_at is required and finished_at is not before it"))
	}
	return errors.Join(errs...)
}
