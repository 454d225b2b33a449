package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker/internal/engine"
)

// Sources of WorkerState.MaxConcurrencyFrom.
const (
	FromRegistry = "registry" // the binding's max_concurrency (or the worker's own setting)
	FromEngine   = "engine"   // what the engine reports (llama-server total_slots)
	FromDefault  = "default"  // DefaultMaxConcurrency
)

// stateWriteTimeout bounds one write of the replica's state.
const stateWriteTimeout = 3 * time.Second

// reporter keeps the replica's registry.WorkerState and writes it to
// events.BucketWorkers: each change as it happens (a change comes from a
// check, so at most one per check) and a refresh every StateInterval with
// the slots in use, never per request. A write that fails is logged once
// and tried again at the next change or refresh; serving never waits on it.
type reporter struct {
	s    *Service
	log  *slog.Logger
	kick chan struct{}

	mu     sync.Mutex
	st     registry.WorkerState
	server *bridge.Server // slots in use, once serving

	writeMu sync.Mutex // serializes writes; guards workers and failing
	workers *registry.Workers
	failing bool
}

func newReporter(s *Service) *reporter {
	now := time.Now().UTC()
	r := &reporter{
		s: s, log: s.log, kick: make(chan struct{}, 1),
		st: registry.WorkerState{
			WorkerID:      s.cfg.WorkerID,
			Model:         s.cfg.Model,
			EngineID:      s.cfg.Engine.ID,
			BaseURL:       engine.RedactURL(s.cfg.Engine.BaseURL),
			UpstreamModel: s.cfg.Engine.Model,
			Class:         s.cfg.Engine.Class,
			State:         registry.WorkerStarting,
			StartedAt:     now,
			UpdatedAt:     now,
		},
	}
	if s.proc != nil {
		r.st.Process = processState(s.proc.Kind(), s.proc.State())
	}
	return r
}

// State returns the replica's state as last recorded (InFlight and Queued
// as of now when serving).
func (r *reporter) State() registry.WorkerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	if st.Process != nil {
		p := *st.Process
		st.Process = &p
	}
	if r.server != nil {
		st.InFlight, st.Queued = int(r.server.Running()), int(r.server.Waiting())
	}
	return st
}

// update changes the state with fn and has it written soon.
func (r *reporter) update(fn func(st *registry.WorkerState)) {
	r.mu.Lock()
	fn(&r.st)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// failed records a failed check as state, with its error and what the
// check verified before it failed.
func (r *reporter) failed(state string, rep engine.Report, err error) {
	r.update(func(st *registry.WorkerState) {
		st.State = state
		st.LastError = err.Error()
		st.LastErrorAt = time.Now().UTC()
		if p := st.Process; p != nil && p.State != registry.ProcessServing && p.LastError != "" {
			// The engine is not reachable because its process does not
			// run: say why it does not, rather than that it refused a
			// connection.
			st.LastError = "engine process " + p.State + ": " + p.LastError
		}
		if rep.UpstreamVerified {
			st.UpstreamVerified = true
		}
		if errors.Is(err, engine.ErrMisnamed) {
			st.UpstreamVerified = false
		}
		if errors.Is(err, engine.ErrUnauthorized) {
			st.KeyVerified = false
		}
	})
}

// verified records a passed full check.
func (r *reporter) verified(rep engine.Report) {
	r.update(func(st *registry.WorkerState) {
		st.UpstreamVerified = rep.UpstreamVerified
		st.KeyVerified = rep.KeyVerified
		if rep.ContextWindow > 0 {
			st.ContextWindow = rep.ContextWindow
		}
	})
}

func (r *reporter) serving(srv *bridge.Server, maxConc int, from string) {
	r.mu.Lock()
	r.server = srv
	r.mu.Unlock()
	r.update(func(st *registry.WorkerState) {
		st.State = registry.WorkerServing
		st.MaxConcurrency, st.MaxConcurrencyFrom = maxConc, from
	})
}

// run writes each change and refreshes the state every StateInterval
// until ctx ends.
func (r *reporter) run(ctx context.Context) {
	t := time.NewTicker(r.s.cfg.StateInterval)
	defer t.Stop()
	for {
		r.write(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
		}
	}
}

// write puts the current state, opening the bucket on first use.
func (r *reporter) write(ctx context.Context) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, stateWriteTimeout)
	defer cancel()
	err := r.open(ctx)
	if err == nil {
		st := r.State()
		st.UpdatedAt = time.Now().UTC()
		err = r.workers.Put(ctx, st)
	}
	r.note(ctx, err)
}

// remove deletes the replica's state (a stopping worker).
func (r *reporter) remove(ctx context.Context) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, stateWriteTimeout)
	defer cancel()
	err := r.open(ctx)
	if err == nil {
		err = r.workers.Delete(ctx, r.s.cfg.Model, r.s.cfg.WorkerID)
	}
	r.note(ctx, err)
}

func (r *reporter) open(ctx context.Context) error {
	if r.workers != nil {
		return nil
	}
	w, err := registry.OpenWorkers(ctx, r.s.deps.JS)
	if err != nil {
		return err
	}
	r.workers = w
	return nil
}

// note logs the first failure of a run of failed writes, and the recovery.
func (r *reporter) note(ctx context.Context, err error) {
	switch {
	case err != nil && !r.failing:
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return
		}
		r.failing = true
		r.log.Warn("could not report the worker's state; serving goes on, retrying", "err", err)
	case err == nil && r.failing:
		r.failing = false
		r.log.Info("worker state reported again")
	}
}

// The kinds of engine check failures a worker reports (errors.Is on the
// error Hooks.OnCheckFailed and Hooks.OnUnhealthy get).
var (
	ErrEngineUnreachable  = engine.ErrUnreachable
	ErrEngineUnauthorized = engine.ErrUnauthorized
	ErrEngineMisnamed     = engine.ErrMisnamed
)
