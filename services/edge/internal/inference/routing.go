package inference

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/registry"
)

// Routing defaults.
const (
	// DefaultCooldownFailures is how many consecutive retryable failures
	// put an engine in cooldown.
	DefaultCooldownFailures = 3
	// DefaultCooldown is how long an engine in cooldown is skipped.
	DefaultCooldown = 30 * time.Second
	// latencyAlpha is the weight of a new sample in an engine's latency
	// average (EWMA).
	latencyAlpha = 0.3
)

// RoutingConfig tunes the choice of a worker replica.
type RoutingConfig struct {
	// CooldownFailures consecutive retryable failures of an engine (no
	// worker acknowledged, worker lost, engine error or timeout; never a
	// client's 4xx or an overloaded answer) put it in cooldown: it is
	// skipped for Cooldown, then tried again; a success ends its count,
	// and a failure right after a cooldown starts the next one. Defaults
	// DefaultCooldownFailures and DefaultCooldown; a negative
	// CooldownFailures turns cooldowns off.
	CooldownFailures int
	Cooldown         time.Duration
	// Now is the cooldowns' clock; default Deps.Now.
	Now func() time.Time
}

func (c RoutingConfig) withDefaults() RoutingConfig {
	if c.CooldownFailures == 0 {
		c.CooldownFailures = DefaultCooldownFailures
	}
	if c.Cooldown <= 0 {
		c.Cooldown = DefaultCooldown
	}
	return c
}

// engineKey names one engine of one model.
type engineKey struct{ model, engine string }

// engineStat is what this edge knows of one engine: its requests in flight
// from here, its failures and cooldown, and its recent latency. It is
// edge-local: each edge replica keeps its own.
type engineStat struct {
	outstanding int
	failures    int
	coolUntil   time.Time
	// probation: the engine left a cooldown and has not succeeded since;
	// one failure starts the next cooldown.
	probation bool
	// latency is the EWMA of the time to the first data frame, seconds;
	// samples counts what it averages.
	latency float64
	samples int
}

// router picks worker replicas and keeps the engines' statistics.
type router struct {
	cfg RoutingConfig
	now func() time.Time

	mu      sync.Mutex
	engines map[engineKey]*engineStat
	// replicas counts this edge's requests in flight per worker replica.
	replicas map[string]int
}

func newRouter(cfg RoutingConfig, now func() time.Time) *router {
	if cfg.Now != nil {
		now = cfg.Now
	}
	return &router{cfg: cfg.withDefaults(), now: now, engines: make(map[engineKey]*engineStat), replicas: make(map[string]int)}
}

func (r *router) statLocked(k engineKey) *engineStat {
	st := r.engines[k]
	if st == nil {
		st = &engineStat{}
		r.engines[k] = st
	}
	return st
}

// coolingLocked reports whether engine k is in cooldown at now.
func (r *router) coolingLocked(k engineKey, now time.Time) bool {
	st := r.engines[k]
	return st != nil && now.Before(st.coolUntil)
}

// pickResult is the choice of a replica for one attempt.
type pickResult struct {
	worker registry.WorkerState
	// ok: a replica was chosen. Otherwise servable counts the model's
	// servable replicas not excluded, and cooling how many of them were
	// skipped for their engine's cooldown.
	ok                bool
	servable, cooling int
	// others: another replica would remain for a retry after this one.
	others bool
}

// pick chooses a replica of m among states: servable, not in exclude, its
// engine not in cooldown (unless ignoreCooldown), by m's routing policy.
func (r *router) pick(m registry.Model, states []registry.WorkerState, exclude map[string]bool, ignoreCooldown bool) pickResult {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var res pickResult
	type cand struct {
		w      registry.WorkerState
		weight float64
	}
	cands := make([]cand, 0, len(states))
	for _, w := range states {
		if !w.Servable() || exclude[w.WorkerID] {
			continue
		}
		e, known := m.EngineByID(w.EngineID)
		if !known && len(m.Engines) > 0 {
			continue // a replica of an engine the binding no longer has
		}
		res.servable++
		if !ignoreCooldown && r.coolingLocked(engineKey{m.Name, w.EngineID}, now) {
			res.cooling++
			continue
		}
		cands = append(cands, cand{w: w, weight: float64(e.EffectiveWeight())})
	}
	if len(cands) == 0 {
		return res
	}
	// score: lower is better; ties go to the replica reporting the least
	// load (other edges' requests included), then to chance.
	score := func(c cand) float64 {
		st := r.engines[engineKey{m.Name, c.w.EngineID}]
		out := 0
		if st != nil {
			out = st.outstanding
		}
		if m.Routing == registry.RoutingLatency && st != nil && st.samples > 0 {
			// Latency times load: the fastest engine takes most requests
			// without being sent all of them at once.
			return st.latency * float64(1+out) / c.weight
		}
		if m.Routing == registry.RoutingLatency {
			return 0 // never measured: try it
		}
		return (float64(out) + float64(r.replicas[c.w.WorkerID])/1e3) / c.weight
	}
	best, ties := -1, 0
	var bestScore float64
	var bestLoad int
	for i, c := range cands {
		sc, load := score(c), c.w.InFlight+c.w.Queued
		switch {
		case best < 0 || sc < bestScore || (sc == bestScore && load < bestLoad):
			best, bestScore, bestLoad, ties = i, sc, load, 1
		case sc == bestScore && load == bestLoad:
			ties++
			if rand.IntN(ties) == 0 {
				best = i
			}
		}
	}
	res.ok, res.worker, res.others = true, cands[best].w, len(cands) > 1
	return res
}

// begin counts a request sent to replica w of model's engine; the
// returned func ends it.
func (r *router) begin(model string, w registry.WorkerState) func() {
	k := engineKey{model, w.EngineID}
	r.mu.Lock()
	r.statLocked(k).outstanding++
	r.replicas[w.WorkerID]++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.statLocked(k).outstanding--
		if r.replicas[w.WorkerID]--; r.replicas[w.WorkerID] <= 0 {
			delete(r.replicas, w.WorkerID)
		}
		r.mu.Unlock()
	}
}

// succeeded records a success of model's engine, with its time to the
// first data frame.
func (r *router) succeeded(model, engine string, firstByte time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.statLocked(engineKey{model, engine})
	st.failures, st.probation = 0, false
	if firstByte > 0 {
		v := firstByte.Seconds()
		if st.samples == 0 {
			st.latency = v
		} else {
			st.latency += latencyAlpha * (v - st.latency)
		}
		st.samples++
	}
}

// failed records a retryable failure of model's engine; it reports whether
// the engine went into cooldown.
func (r *router) failed(model, engine string) bool {
	if r.cfg.CooldownFailures < 0 {
		return false
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.statLocked(engineKey{model, engine})
	if now.Before(st.coolUntil) {
		return false // already cooling (a request sent before it began)
	}
	st.failures++
	if st.probation || st.failures >= r.cfg.CooldownFailures {
		st.coolUntil = now.Add(r.cfg.Cooldown)
		st.failures, st.probation = 0, true
		return true
	}
	return false
}
