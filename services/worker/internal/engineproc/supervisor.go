package engineproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker/internal/supervise"
)

// Phases of a supervised engine (State.Phase).
const (
	// PhaseStarting: the process is starting (or loading the model); its
	// health endpoint does not answer 200 yet.
	PhaseStarting = registry.ProcessStarting
	// PhaseServing: the health endpoint answered 200.
	PhaseServing = registry.ProcessServing
	// PhaseUnhealthy: the process exited (it is restarted after a backoff)
	// or stopped passing health probes.
	PhaseUnhealthy = registry.ProcessUnhealthy
	// PhaseStopped: the supervisor stopped it.
	PhaseStopped = registry.ProcessStopped
	// PhaseAsleep: stopped by Sleep (scaled to zero); Wake starts it.
	PhaseAsleep = registry.ProcessAsleep
)

// State is a supervised engine's state. It holds no secret.
type State struct {
	Phase string
	PID   int
	// Restarts counts starts after the first.
	Restarts int
	// LastError is why the engine last stopped serving or failed to start
	// (with the tail of its output), LastErrorAt when.
	LastError   string
	LastErrorAt time.Time
	Placement   Placement
	Since       time.Time
	// Waking is true from a Wake of the asleep engine until it serves
	// (or its start fails); Wakes counts those starts, LastColdStart is
	// how long the last one took from Wake to healthy.
	Waking        bool
	Wakes         int
	LastColdStart time.Duration
}

// Config configures a Supervisor.
type Config struct {
	Spec   Spec
	Logger *slog.Logger
	// HTTPClient probes health and scrapes metrics; default one with a 5 s
	// timeout and no proxy.
	HTTPClient *http.Client
	// RetryInterval scales the restart backoff (supervise.NewBackoff:
	// 100 ms doubling to 8 x RetryInterval). Default 1 s.
	RetryInterval time.Duration
	// StartTimeout bounds a start until the first healthy probe; past it
	// the process is killed and started again. Default 10 min.
	StartTimeout time.Duration
	// StopGrace is how long a stopping engine has between SIGTERM and
	// SIGKILL. Default 10 s.
	StopGrace time.Duration
	// ProbeInterval is the health (and metrics) probe period while
	// serving. Default 5 s.
	ProbeInterval time.Duration
	// RestartAfter is how many probes in a row may fail before a serving
	// engine that still runs is killed and started again. Default 12.
	RestartAfter int
	// SetupTimeout bounds the model setup after a start (ollama create).
	// Default 30 min.
	SetupTimeout time.Duration
	// OnChange is called after each state change; it must not block.
	OnChange func(State)
	// OnColdStart is called with the time from a Wake of the asleep
	// engine to its first healthy probe (the cold start); it must not
	// block.
	OnColdStart func(time.Duration)
}

// Supervisor runs one engine process.
type Supervisor struct {
	cfg  Config
	log  *slog.Logger
	http *http.Client

	mu      sync.Mutex
	st      State
	samples []Sample
	created bool // the Ollama model was created

	// sleepMu guards the wish to run: asleep is true from Sleep until
	// Wake; stopRun ends the running process's context (Sleep); wakeAt is
	// when the pending Wake was asked for.
	sleepMu sync.Mutex
	asleep  bool
	stopRun context.CancelFunc
	wakeAt  time.Time
	wake    chan struct{}
}

// New validates cfg and returns a stopped supervisor.
func New(cfg Config) (*Supervisor, error) {
	if !supported {
		return nil, errors.New("engineproc: supervised engines need a unix system")
	}
	if err := Validate(cfg.Spec.Process); err != nil {
		return nil, fmt.Errorf("engine process: %w", err)
	}
	if cfg.Spec.Port <= 0 || cfg.Spec.Dir == "" {
		return nil, errors.New("engine process: a port and a directory are required")
	}
	if cfg.RetryInterval < 0 || cfg.StartTimeout < 0 || cfg.StopGrace < 0 || cfg.ProbeInterval < 0 || cfg.RestartAfter < 0 || cfg.SetupTimeout < 0 {
		return nil, errors.New("engine process: durations and counts must not be negative")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.RetryInterval, time.Second)
	def(&cfg.StartTimeout, 10*time.Minute)
	def(&cfg.StopGrace, 10*time.Second)
	def(&cfg.ProbeInterval, 5*time.Second)
	def(&cfg.SetupTimeout, 30*time.Minute)
	if cfg.RestartAfter == 0 {
		cfg.RestartAfter = 12
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2}}
	}
	return &Supervisor{
		cfg: cfg, http: cfg.HTTPClient,
		log:  cfg.Logger.With("engine", cfg.Spec.Process.Kind, "port", cfg.Spec.Port),
		st:   State{Phase: PhaseStarting, Since: time.Now().UTC()},
		wake: make(chan struct{}, 1),
	}, nil
}

// State returns the engine's state now.
func (s *Supervisor) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Kind is the engine kind.
func (s *Supervisor) Kind() string { return s.cfg.Spec.Process.Kind }

func (s *Supervisor) update(fn func(*State)) { s.notify(s.setState(fn)) }

// setState changes the state with fn and returns it; notify reports it.
func (s *Supervisor) setState(fn func(*State)) State {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.st
	fn(&s.st)
	if s.st.Phase != before.Phase {
		s.st.Since = time.Now().UTC()
	}
	return s.st
}

func (s *Supervisor) notify(st State) {
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(st)
	}
}

// failed records a failed start or an exit; a failed wake is no longer
// waking (its requests get the error, the start is retried as a restart).
func (s *Supervisor) failed(phase string, err error) {
	s.sleepMu.Lock()
	s.wakeAt = time.Time{}
	s.sleepMu.Unlock()
	s.update(func(st *State) {
		st.Phase, st.PID, st.Waking = phase, 0, false
		st.LastError, st.LastErrorAt = err.Error(), time.Now().UTC()
	})
}

// Sleep stops the engine (SIGTERM, SIGKILL after StopGrace) and keeps it
// stopped, in PhaseAsleep, until Wake: scale to zero. It returns at once;
// it reports false when the engine was already asleep.
func (s *Supervisor) Sleep() bool {
	s.sleepMu.Lock()
	defer s.sleepMu.Unlock()
	if s.asleep {
		return false
	}
	s.asleep = true
	s.wakeAt = time.Time{}
	if s.stopRun != nil {
		s.stopRun()
	}
	return true
}

// Wake starts an engine that Sleep stopped; the start is measured until
// the engine is healthy (Config.OnColdStart). Concurrent calls start it
// once; it reports whether this call did.
func (s *Supervisor) Wake() bool {
	s.sleepMu.Lock()
	if !s.asleep {
		s.sleepMu.Unlock()
		return false
	}
	s.asleep = false
	s.wakeAt = time.Now()
	// Waking is set with asleep cleared: between Sleep and the next
	// healthy start one of them always says the engine is not ready.
	st := s.setState(func(st *State) { st.Waking = true })
	s.sleepMu.Unlock()
	s.notify(st)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// Asleep reports whether the engine is meant to be asleep (Sleep was
// called, Wake not since).
func (s *Supervisor) Asleep() bool {
	s.sleepMu.Lock()
	defer s.sleepMu.Unlock()
	return s.asleep
}

// runContext is the context of one start: ctx, also ended by Sleep. It is
// nil when the engine is to stay asleep.
func (s *Supervisor) runContext(ctx context.Context) (context.Context, context.CancelFunc) {
	s.sleepMu.Lock()
	defer s.sleepMu.Unlock()
	if s.asleep {
		return nil, nil
	}
	rctx, cancel := context.WithCancel(ctx)
	s.stopRun = cancel
	return rctx, cancel
}

// sleep waits in PhaseAsleep until Wake or ctx ends; it reports false for
// the latter.
func (s *Supervisor) sleep(ctx context.Context) bool {
	s.sleepMu.Lock()
	if !s.asleep { // woken already
		s.sleepMu.Unlock()
		return true
	}
	st := s.setState(func(st *State) { st.Phase, st.PID, st.Waking = PhaseAsleep, 0, false })
	s.sleepMu.Unlock()
	s.notify(st)
	s.log.Info("engine asleep (scaled to zero); the next request starts it")
	for s.Asleep() {
		select {
		case <-ctx.Done():
			return false
		case <-s.wake:
		}
	}
	return true
}

// Run keeps the engine running until ctx ends, then stops it (SIGTERM,
// SIGKILL after StopGrace) and returns nil. Between Sleep and Wake the
// engine is kept stopped.
func (s *Supervisor) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(s.cfg.Spec.Dir, "home"), 0o700); err != nil {
		return fmt.Errorf("engine process: %w", err)
	}
	backoff := supervise.NewBackoff(s.cfg.RetryInterval)
	for starts := 0; ; starts++ {
		rctx, cancel := s.runContext(ctx)
		if rctx == nil {
			if !s.sleep(ctx) {
				s.update(func(st *State) { st.Phase, st.PID, st.Waking = PhaseStopped, 0, false })
				return nil
			}
			backoff = supervise.NewBackoff(s.cfg.RetryInterval)
			starts = -1 // a wake is a start, not a restart
			continue
		}
		if starts > 0 {
			s.update(func(st *State) { st.Restarts++ })
		}
		served, err := s.runOnce(rctx)
		slept := rctx.Err() != nil // only Sleep ends rctx before ctx
		cancel()
		if ctx.Err() != nil {
			s.update(func(st *State) { st.Phase, st.PID, st.Waking = PhaseStopped, 0, false })
			return nil
		}
		if slept {
			// Stopped by Sleep: not a failure, and the next start (a
			// wake) is no restart.
			s.log.Info("engine process stopped: idle", "served_for", served.Round(time.Millisecond))
			starts = -1
			continue
		}
		if served >= time.Minute {
			backoff = supervise.NewBackoff(s.cfg.RetryInterval) // it had recovered
		}
		s.failed(PhaseUnhealthy, err)
		wait := backoff.Next()
		s.log.Warn("engine process stopped; restarting", "err", err, "restart_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.update(func(st *State) { st.Phase, st.PID, st.Waking = PhaseStopped, 0, false })
			return nil
		case <-t.C:
		}
	}
}

// process is one started engine.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // set before exited closes
	out    *tail
	logf   *os.File
}

// runOnce starts the engine, waits for it to be healthy, sets it up,
// serves until it exits, fails RestartAfter probes in a row, or ctx ends
// (then stops it). It returns how long it served and why it stopped.
func (s *Supervisor) runOnce(ctx context.Context) (time.Duration, error) {
	c, err := s.cfg.Spec.Plan()
	if err != nil {
		return 0, err
	}
	p, err := s.start(c)
	if err != nil {
		return 0, err
	}
	defer s.reap(p)
	s.update(func(st *State) {
		st.Phase, st.PID, st.Placement = PhaseStarting, p.cmd.Process.Pid, c.Placement
	})
	s.log.Info("engine process started", "pid", p.cmd.Process.Pid, "path", c.Path, "args", c.Args,
		"moe_placement", c.Placement.Mode, "moe_cpu_layers", c.Placement.CPULayers)

	// Wait for health.
	deadline := time.NewTimer(s.cfg.StartTimeout)
	defer deadline.Stop()
	// Probed often at first: a small model's engine (a wake from zero
	// on a warm page cache) is healthy within tens of milliseconds, and
	// the cold start is measured to the probe that saw it.
	wait := 10 * time.Millisecond
	for {
		if s.healthy(ctx, c) {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.stop(p)
			return 0, ctx.Err()
		case <-p.exited:
			t.Stop()
			return 0, s.exitError(p, "while starting")
		case <-deadline.C:
			t.Stop()
			s.stop(p)
			return 0, fmt.Errorf("engine %s did not answer %s within %s%s", c.Kind, c.Health, s.cfg.StartTimeout, p.out.suffix())
		case <-t.C:
		}
		wait = min(wait*2, time.Second)
	}
	if err := s.setup(ctx, c, p); err != nil {
		s.stop(p)
		return 0, err
	}
	started := time.Now()
	s.sleepMu.Lock()
	wakeAt := s.wakeAt
	s.wakeAt = time.Time{}
	s.sleepMu.Unlock()
	cold := time.Duration(0)
	if !wakeAt.IsZero() {
		cold = started.Sub(wakeAt)
		if s.cfg.OnColdStart != nil {
			s.cfg.OnColdStart(cold) // before the requests waiting for it are let go
		}
	}
	s.update(func(st *State) {
		st.Phase = PhaseServing
		if st.Waking {
			st.Waking, st.Wakes, st.LastColdStart = false, st.Wakes+1, cold
		}
	})
	if cold > 0 {
		s.log.Info("engine process serving after a cold start", "pid", p.cmd.Process.Pid, "cold_start", cold)
	} else {
		s.log.Info("engine process serving", "pid", p.cmd.Process.Pid)
	}
	s.scrape(ctx, c)

	probe := time.NewTicker(s.cfg.ProbeInterval)
	defer probe.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			s.stop(p)
			return time.Since(started), ctx.Err()
		case <-p.exited:
			return time.Since(started), s.exitError(p, "")
		case <-probe.C:
		}
		if s.healthy(ctx, c) {
			if fails > 0 {
				s.update(func(st *State) { st.Phase = PhaseServing })
			}
			fails = 0
			s.scrape(ctx, c)
			continue
		}
		if ctx.Err() != nil {
			continue
		}
		fails++
		if fails == 1 {
			s.update(func(st *State) { st.Phase = PhaseUnhealthy })
		}
		if fails >= s.cfg.RestartAfter {
			s.stop(p)
			return time.Since(started), fmt.Errorf("engine %s failed %d health probes in a row; restarted", c.Kind, fails)
		}
	}
}

func (s *Supervisor) start(c Command) (*process, error) {
	logPath := filepath.Join(s.cfg.Spec.Dir, "engine.log")
	_ = os.Rename(logPath, logPath+".1")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("engine log: %w", err)
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = c.Env
	cmd.Dir = s.cfg.Spec.Dir
	// The engine writes its log itself: with no pipe to copy, Wait returns
	// as soon as it exits, even while what it started (Ollama's runners)
	// still holds the file.
	cmd.Stdout, cmd.Stderr = logf, logf
	prepare(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("engine %s: start %s: %w", c.Kind, c.Path, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), out: &tail{f: logf}, logf: logf}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends SIGTERM to the engine's group, and SIGKILL after StopGrace.
func (s *Supervisor) stop(p *process) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = signalGroup(p.cmd.Process.Pid, syscall.SIGTERM)
	t := time.NewTimer(s.cfg.StopGrace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		s.log.Warn("engine did not stop in its grace; killing it", "grace", s.cfg.StopGrace)
		_ = signalGroup(p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// reap kills what the engine left in its process group (an Ollama runner
// whose server was killed) and closes its log.
func (s *Supervisor) reap(p *process) {
	<-p.exited
	_ = signalGroup(p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.logf.Close()
	s.mu.Lock()
	s.samples = nil
	s.mu.Unlock()
}

func (s *Supervisor) exitError(p *process, when string) error {
	<-p.exited
	err := p.err
	if err == nil {
		err = errors.New("exited")
	}
	if when != "" {
		when = " " + when
	}
	return fmt.Errorf("engine %s%s: %w%s", s.cfg.Spec.Process.Kind, when, err, p.out.suffix())
}

// healthy probes the health endpoint once.
func (s *Supervisor) healthy(ctx context.Context, c Command) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Health, nil)
	if err != nil {
		return false
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if c.HealthJSON && resp.StatusCode == http.StatusOK {
		s.setSamples(jsonSamples(io.LimitReader(resp.Body, 1<<20)))
		return true
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode == http.StatusOK
}

// tail reads the last bytes an engine wrote (its log file, or what was
// written to it), for error messages.
type tail struct {
	f   *os.File
	mu  sync.Mutex
	buf []byte
}

const tailSize = 2 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailSize {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailSize:]...)
	}
	return len(p), nil
}

func (t *tail) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if t.f != nil {
		if fi, err := t.f.Stat(); err == nil {
			off := max(fi.Size()-tailSize, 0)
			b = make([]byte, fi.Size()-off)
			n, _ := t.f.ReadAt(b, off)
			b = b[:n]
		}
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return "; its last output: " + s
	}
	return ""
}

// IsOllama reports whether the engine is Ollama.
func (s *Supervisor) IsOllama() bool { return s.cfg.Spec.Process.Kind == registry.ProcessOllama }
