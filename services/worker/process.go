package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker/internal/engineproc"
)

// setupProcess prepares the supervision of the binding's engine process
// (Engine.Process): its port (a free one when 0), the base URL and
// upstream name the worker uses, its slot count, its directory.
func (s *Service) setupProcess() error {
	p := *s.cfg.Engine.Process
	port := p.Port
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("worker %s: a port for the engine: %w", s.cfg.Model, err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
	}
	s.cfg.Engine.BaseURL = processBaseURL(port)
	s.cfg.Engine.Model = engineproc.UpstreamName(p.Kind, s.cfg.Engine.Model)
	if s.cfg.Engine.MaxConcurrency == 0 {
		switch {
		case p.Slots > 0:
			s.cfg.Engine.MaxConcurrency = p.Slots
		case p.Kind == registry.ProcessColi:
			// Colibrì serves one generation at a time (more queue in it).
			s.cfg.Engine.MaxConcurrency = 1
		}
	}
	engineID := s.cfg.Engine.ID
	if engineID == "" {
		engineID = "default"
	}
	dir := filepath.Join(s.cfg.EngineDir, dirName(s.cfg.Model), dirName(engineID))
	ep := s.cfg.EngineProcess
	sup, err := engineproc.New(engineproc.Config{
		Spec: engineproc.Spec{
			Served: s.cfg.Model, Upstream: s.cfg.Engine.Model, Process: p, Port: port,
			APIKey: s.cfg.Engine.APIKey, Dir: dir,
		},
		Logger:        s.log,
		RetryInterval: ep.RetryInterval,
		StartTimeout:  ep.StartTimeout,
		StopGrace:     ep.StopGrace,
		ProbeInterval: ep.ProbeInterval,
		OnChange:      s.onProcess,
		OnColdStart: func(d time.Duration) {
			s.deps.Metrics.coldStart.WithLabelValues(s.cfg.Model, p.Kind, s.cfg.Engine.ID).Observe(d.Seconds())
		},
	})
	if err != nil {
		return fmt.Errorf("worker %s: %w", s.cfg.Model, err)
	}
	s.proc = sup
	s.idleStop = p.IdleStop.D()
	return nil
}

// onProcess records a change of the engine process and has the engine
// checked at once: a crashed engine pauses the replica now rather than at
// the next health tick, a restarted one serves again as soon as it can.
func (s *Service) onProcess(st engineproc.State) {
	if st.Phase == engineproc.PhaseServing {
		// A (re)started engine gets its whole idle stop before it may
		// sleep, however long ago the request that woke it ended.
		s.lastActive.Store(s.now().UnixNano())
	}
	if s.state != nil {
		s.state.update(func(ws *registry.WorkerState) { ws.Process = processState(s.proc.Kind(), st) })
	}
	s.noteProcChange() // after the state: a woken request sees it recorded
	if st.Phase == engineproc.PhaseServing || st.Phase == engineproc.PhaseUnhealthy {
		select {
		case s.recheck <- struct{}{}:
		default:
		}
	}
}

func processState(kind string, st engineproc.State) *registry.ProcessState {
	ps := &registry.ProcessState{
		Kind: kind, State: st.Phase, PID: st.PID, Restarts: st.Restarts,
		Wakes: st.Wakes, LastColdStart: registry.Duration(st.LastColdStart),
		LastError: st.LastError, LastErrorAt: st.LastErrorAt,
		MoEPlacement: st.Placement.Mode, MoECPULayers: st.Placement.CPULayers,
		MoELayers: st.Placement.MoELayers, MoEExpertsUsed: int(st.Placement.ExpertUsedCount),
	}
	return ps
}

// dirName is a directory name for a model or engine id: its safe
// characters and a hash, so that different names never share one.
func dirName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 64 {
			break
		}
	}
	sum := sha256.Sum256([]byte(s))
	return strings.TrimLeft(b.String(), ".") + "-" + hex.EncodeToString(sum[:4])
}
