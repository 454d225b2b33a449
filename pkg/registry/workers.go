package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
)

// Worker states (WorkerState.State).
const (
	// WorkerStarting: the worker is checking its engine for the first time.
	WorkerStarting = "starting"
	// WorkerServing: the engine passed its checks; the worker takes requests.
	WorkerServing = "serving"
	// WorkerUnreachable: the engine cannot be reached (or answers 5xx, as
	// engines do while loading); the worker checks again.
	WorkerUnreachable = "unreachable"
	// WorkerUnauthorized: the engine refuses the engine API key.
	WorkerUnauthorized = "unauthorized"
	// WorkerMisnamed: the engine answers but does not serve the upstream
	// model name.
	WorkerMisnamed = "misnamed"
	// WorkerUnhealthy: a health check of a serving engine failed; the
	// worker paused taking requests.
	WorkerUnhealthy = "unhealthy"
	// WorkerDraining: the worker is stopping and finishes what it holds.
	WorkerDraining = "draining"
)

// WorkerState is what one worker replica reports about itself and its
// engine in events.BucketWorkers. It holds no secret: BaseURL is redacted
// of credentials and LastError never carries the engine key.
type WorkerState struct {
	WorkerID string `json:"worker_id"`
	// Model is the served model name.
	Model string `json:"model"`
	// EngineID names which engine of the model the replica forwards to
	// (Engine.ID); empty for a model's only engine.
	EngineID string `json:"engine_id,omitempty"`
	// BaseURL is the engine's URL without user info or query.
	BaseURL string `json:"base_url"`
	// UpstreamModel is the name the engine knows the weights by, and
	// UpstreamVerified whether the engine listed it.
	UpstreamModel    string `json:"upstream_model"`
	UpstreamVerified bool   `json:"upstream_verified"`
	// KeyVerified: an authenticated call with the engine key was accepted
	// (false when the binding has no key).
	KeyVerified bool   `json:"key_verified"`
	State       string `json:"state"`
	// Class is the engine's worker class (Engine.Class).
	Class string `json:"class,omitempty"`
	// MaxConcurrency is the replica's slot count, and MaxConcurrencyFrom
	// where it came from: "registry", "engine" (what the engine reports,
	// such as llama-server's total_slots) or "default".
	MaxConcurrency     int    `json:"max_concurrency"`
	MaxConcurrencyFrom string `json:"max_concurrency_from,omitempty"`
	// InFlight is the requests the replica holds on engine slots, Queued
	// those waiting for one, as of UpdatedAt.
	// ContextWindow is the context length the engine reports (llama-server
	// /props n_ctx, vLLM max_model_len), 0 when it does not.
	ContextWindow int       `json:"context_window,omitempty"`
	InFlight      int       `json:"in_flight"`
	Queued        int       `json:"queued"`
	LastError     string    `json:"last_error,omitempty"`
	LastErrorAt   time.Time `json:"last_error_at,omitzero"`
	StartedAt     time.Time `json:"started_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	// Process is the state of the engine process the replica supervises
	// (Engine.Process); nil when it forwards to an engine run elsewhere.
	Process *ProcessState `json:"process,omitempty"`
}

// Supervised engine process states (ProcessState.State).
const (
	ProcessStarting  = "starting"
	ProcessServing   = "serving"
	ProcessUnhealthy = "unhealthy"
	ProcessStopped   = "stopped"
	// ProcessAsleep: the engine was stopped after its idle time
	// (EngineProcess.IdleStop); the replica still takes requests, and the
	// first one starts the engine again.
	ProcessAsleep = "asleep"
)

// ProcessState is what a worker reports about the engine process it
// supervises. It holds no secret.
type ProcessState struct {
	Kind string `json:"kind"`
	// State is ProcessStarting (started, not healthy yet), ProcessServing,
	// ProcessUnhealthy (exited and about to be restarted, or failing its
	// health probes), ProcessAsleep (scaled to zero) or ProcessStopped.
	State    string `json:"state"`
	PID      int    `json:"pid,omitempty"`
	Restarts int    `json:"restarts"`
	// Wakes counts starts of an asleep engine by a request, and
	// LastColdStart how long the last one took to become healthy.
	Wakes         int      `json:"wakes,omitempty"`
	LastColdStart Duration `json:"last_cold_start,omitempty"`
	// LastError is why the process last stopped serving or failed to
	// start, with the tail of its output.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// MoEPlacement is the expert placement decided at the last start:
	// "none" (dense, or placed by the engine), "auto", "cpu" or "layers";
	// MoECPULayers the layers whose experts are left on the CPU (mmap'd),
	// of MoELayers; MoEExpertsUsed the experts per token (the model's).
	MoEPlacement   string `json:"moe_placement,omitempty"`
	MoECPULayers   int    `json:"moe_cpu_layers,omitempty"`
	MoELayers      int    `json:"moe_layers,omitempty"`
	MoEExpertsUsed int    `json:"moe_experts_used,omitempty"`
}

// Servable reports whether the replica takes requests.
func (w WorkerState) Servable() bool { return w.State == WorkerServing }

// WorkerKeyPrefix is the key prefix of every replica of model in
// events.BucketWorkers: watch or list WorkerKeyPrefix(model)+">".
func WorkerKeyPrefix(model string) string {
	return "w." + strings.ToLower(kvEnc.EncodeToString([]byte(model))) + "."
}

// WorkerKey is the key of one replica's state.
func WorkerKey(model, workerID string) string { return WorkerKeyPrefix(model) + workerID }

// Workers is the worker state bucket.
type Workers struct{ b jetstream.KeyValue }

// OpenWorkers opens events.BucketWorkers, which must exist (events.Ensure).
func OpenWorkers(ctx context.Context, js jetstream.JetStream) (*Workers, error) {
	b, err := js.KeyValue(ctx, events.BucketWorkers)
	if err != nil {
		return nil, fmt.Errorf("registry: bucket %s: %w", events.BucketWorkers, err)
	}
	return &Workers{b: b}, nil
}

// Put records a replica's state.
func (w *Workers) Put(ctx context.Context, st WorkerState) error {
	if st.Model == "" || st.WorkerID == "" || !validKVKey(WorkerKey(st.Model, st.WorkerID)) {
		return fmt.Errorf("%w: worker state needs a model and a worker id usable as a key", ErrInvalid)
	}
	if _, err := kv.Put(ctx, w.b, WorkerKey(st.Model, st.WorkerID), st); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}

// Delete removes a replica's state (a stopping worker).
func (w *Workers) Delete(ctx context.Context, model, workerID string) error {
	if err := kv.Delete(ctx, w.b, WorkerKey(model, workerID)); err != nil && !errors.Is(err, kv.ErrNotFound) {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}

// List returns the live replicas of model, or of every model when model
// is "", sorted by key.
func (w *Workers) List(ctx context.Context, model string) ([]WorkerState, error) {
	var filters []string
	if model != "" {
		filters = []string{WorkerKeyPrefix(model) + ">"}
	}
	es, err := kv.List[WorkerState](ctx, w.b, filters...)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	return kv.Values(es), nil
}

// Watch follows every replica's state (registry.Change; a replica whose
// state expired or was deleted arrives as Deleted with only its key).
func (w *Workers) Watch(ctx context.Context, fn func(c Change[WorkerState], initialDone bool)) error {
	return watch(ctx, w.b, fn)
}
