package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/services/worker/internal/engineproc"
)

// Scale to zero. A supervised engine with an idle stop
// (EngineProcess.IdleStop) is put to sleep by idleLoop after that long
// with no request in the worker (none running, none waiting for a slot):
// its process is stopped, and the replica goes on taking requests, so the
// edge still routes to it (WorkerState serving, its process asleep). The
// first request wakes the engine and every request waits, up to
// ColdStartWait, for it to be healthy; past that it is answered 503
// model_warming with a Retry-After, and the engine goes on starting.
//
// sleepMu makes "is it awake?" of a request and "sleep now" of the idle
// loop one step each: a request that found the engine awake is counted
// (active) before the idle loop can look, and one that arrives after a
// Sleep wakes it.

// idleEnabled reports whether the engine scales to zero.
func (s *Service) idleEnabled() bool { return s.proc != nil && s.idleStop > 0 }

// dormant reports whether the engine is asleep or waking from sleep: the
// health loop then leaves it alone (the replica serves: requests wake it).
func (s *Service) dormant() bool {
	return s.idleEnabled() && (s.proc.Asleep() || s.proc.State().Waking)
}

// begin and end count a request in the worker and mark the last activity.
func (s *Service) begin() {
	s.active.Add(1)
	s.lastActive.Store(s.now().UnixNano())
}

func (s *Service) end() {
	s.lastActive.Store(s.now().UnixNano())
	s.active.Add(-1)
}

// idleLoop puts the engine to sleep once it has been idle for idleStop,
// checking every IdleCheckInterval (at most idleStop), until ctx ends.
func (s *Service) idleLoop(ctx context.Context) {
	every := min(s.cfg.IdleCheckInterval, s.idleStop)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.maybeSleep()
	}
}

// maybeSleep stops the engine when nothing is in the worker and the last
// request ended idleStop ago; it reports whether it did.
func (s *Service) maybeSleep() bool {
	if !s.idleEnabled() {
		return false
	}
	s.sleepMu.Lock()
	defer s.sleepMu.Unlock()
	if s.proc.Asleep() || s.active.Load() > 0 || (s.server != nil && (s.server.Running() > 0 || s.server.Waiting() > 0)) {
		return false
	}
	idle := s.now().Sub(time.Unix(0, s.lastActive.Load()))
	if idle < s.idleStop {
		return false
	}
	// A starting engine is left to start: an idle stop never cuts a
	// model load short.
	if st := s.proc.State(); st.Phase != engineproc.PhaseServing && st.Phase != engineproc.PhaseUnhealthy {
		return false
	}
	if s.proc.Sleep() {
		s.log.Info("engine idle; scaling it to zero", "idle", idle.Round(time.Millisecond), "idle_stop", s.idleStop)
	}
	return true
}

// awake returns when the engine serves: at once when it does, else after
// waking it (the first request of several starts it once) and waiting for
// it, up to ColdStartWait. Past that it returns model_warming; when the
// start failed, model_unavailable at once.
func (s *Service) awake(ctx context.Context) *bridge.Error {
	if !s.idleEnabled() {
		return nil
	}
	s.sleepMu.Lock()
	if s.engineServes() {
		s.sleepMu.Unlock()
		return nil
	}
	woke := s.proc.Wake()
	s.sleepMu.Unlock()
	if woke {
		s.log.Info("request for an engine scaled to zero; starting it", "cold_start_wait", s.cfg.ColdStartWait)
	}
	waitStart := time.Now()
	deadline := time.NewTimer(s.cfg.ColdStartWait)
	defer deadline.Stop()
	for {
		changed := s.procChanged()
		if s.engineServes() {
			return nil
		}
		st := s.proc.State()
		if st.Phase == engineproc.PhaseUnhealthy && !st.Waking && !s.proc.Asleep() {
			// The start failed (the supervisor retries it with backoff):
			// a clear answer now rather than a wait to the bound. The
			// cause, which may name local paths, is for operators.
			s.log.Warn("the engine failed to start for a request after scaling to zero", "err", st.LastError)
			e := contracts.ErrNoWorker(s.cfg.Model)
			e.Message = fmt.Sprintf("The engine of the model '%s' was scaled to zero and failed to start; it is being retried (operators: GET /admin/v1/models/%s). Retry later.", s.cfg.Model, s.cfg.Model)
			// Not retryable: the client gets this answer (or the model's
			// fallback), not a retry that finds the replica paused.
			return &bridge.Error{Status: e.Status, Code: e.Code, Message: e.Message, Body: e.Body()}
		}
		select {
		case <-ctx.Done():
			return nil // the request ends; the forward reports how
		case <-deadline.C:
			waited := time.Since(waitStart)
			rest := time.Second
			if last := s.proc.State().LastColdStart; last > waited {
				rest = last - waited
			}
			e := contracts.ErrModelWarming(s.cfg.Model, rest)
			return &bridge.Error{Status: e.Status, Code: e.Code, Message: e.Message, Body: e.Body(), RetryAfter: e.RetryAfter}
		case <-changed:
		}
	}
}

// engineServes reports whether the engine process serves and is not being put
// to sleep or woken.
func (s *Service) engineServes() bool {
	st := s.proc.State()
	return st.Phase == engineproc.PhaseServing && !st.Waking && !s.proc.Asleep()
}

// procChanged returns a channel closed at the next change of the engine
// process's state.
func (s *Service) procChanged() <-chan struct{} {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	if s.change == nil {
		s.change = make(chan struct{})
	}
	return s.change
}

// noteProcChange wakes the requests waiting for the engine.
func (s *Service) noteProcChange() {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	if s.change != nil {
		close(s.change)
		s.change = nil
	}
}
