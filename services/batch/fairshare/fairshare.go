package fairshare

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/batch"
)

// Config configures a Scheduler.
type Config struct {
	// HalfLife is the half-life of a queue's historical usage (Kueue's
	// usageHalfLifeTime). Default 5m.
	HalfLife time.Duration
}

// DefaultHalfLife is Config.HalfLife's default.
const DefaultHalfLife = 5 * time.Minute

// eps absorbs floating point noise when shares are compared, so that two
// queues whose shares are mathematically equal tie (and the oldest demand
// wins) instead of an ulp deciding.
const eps = 1e-9

// Scheduler admits batch lines in fair-share order. It is pure: no bus, no
// goroutines, no clock (callers pass now); one mutex makes it safe for
// concurrent use.
//
// The model, after Kueue:
//
//   - A pool's nominal quota of a flavor is its configured lines (0: the
//     serving slots of its models on that flavor). A model in no configured
//     pool has an implicit pool named after it with its slots as quota.
//     Whatever the quota, a model never has more lines in flight on a flavor
//     than its replicas' slots (SetCapacity).
//   - Pools in a cohort share the lendable part of their nominal quota
//     (all of it, or LendingLimit): a pool may use more than its nominal
//     quota (borrow, at most BorrowingLimit beyond it) while the cohort's
//     lendable quota is not all in use. The part of a nominal quota that is
//     not lendable is the pool's alone. A pool's dominant resource share is
//     what it uses above its nominal quota over the cohort's lendable
//     quota, divided by its weight; a line that borrows goes to the pool
//     with the lowest share after admission, and a line within a nominal
//     quota always comes before a line that borrows (a lender gets its quota
//     back as borrowed lines finish: nothing is cancelled).
//   - In a pool, a tenant queue's share is (lines in flight + decayed
//     historical usage) / weight, where the historical usage is the
//     queue's lines in flight averaged exponentially over time (half-life
//     HalfLife), so it is in lines too and line-seconds count, not line
//     counts. The next line comes from the queue with the lowest share;
//     ties go to the oldest demand.
//   - Preemption without cancelling: a queue Q is held when another queue P
//     of its pool waits and P's share with one more line is at or below
//     Q's share with one line less (Kueue's LessThanOrEqualToFinalShare:
//     P could preempt a line of Q). A held queue gets no new lines while a
//     queue below it can take the slot; its lines in flight finish. It
//     stays held until P's share with one more line is no longer below
//     Q's (Kueue's weaker LessThanInitialShare stops holding): the band
//     between the two rules is the hysteresis, so two queues at equal
//     share never hold each other and a hold does not flap as lines start
//     and end.
//   - A quota with TokensPerSecond admits while a token bucket refilled at
//     that rate (burst: one second of it) is positive; each admitted line
//     reserves the pool's recent tokens per line, and Release settles the
//     difference with the tokens the line spent. Until a line's tokens are
//     known, one line at a time is admitted.
type Scheduler struct {
	mu     sync.Mutex
	lambda float64 // decay rate of history, per second

	pools   []batch.Pool
	cohorts []batch.Cohort
	queueW  map[qkey]float64 // configured queue weights
	poolOf  map[string]string

	caps    map[mfkey]*modelFlavor // per model and flavor: slots and lines in flight
	waiting map[tmkey]int64        // per tenant and model
	queues  map[qkey]*queue
	active  []*queue // queues with waiting lines
	seq     uint64   // demand order

	poolUse map[pfkey]*counter // per pool and flavor: lines in flight
	buckets map[pfkey]*bucket

	dirty  bool // rt must be rebuilt
	rt     map[string]*poolRT
	gen    uint64 // rebuilds
	epoch  uint64
	nextID uint64
	adm    map[uint64]*record

	ref      time.Time // see decay
	decayAt  time.Time
	decayNow float64
}

type qkey struct{ pool, tenant string }
type mfkey struct{ model, flavor string }
type tmkey struct{ tenant, model string }
type pfkey struct{ pool, flavor string }

type counter struct{ n int64 }

type modelFlavor struct {
	slots int64
	use   int64
}

// queue is a tenant's queue in a pool.
type queue struct {
	pool, tenant string
	weight       float64
	inflight     int64
	borrowed     int64
	completed    int64
	// The history (the exponential average of inflight) at t is
	// inflight + dev·decay(t): see Scheduler.decay.
	dev    float64
	demand []demand
	total  int64  // sum of demand
	since  uint64 // demand order; 0 when no demand
	held   bool
	idx    int // index in Scheduler.active, -1 when not there
	// per-round scratch
	share  float64
	prt    *poolRT // s.rt[pool] as of rebuild prtGen
	prtGen uint64
}

type demand struct {
	model string
	n     int64
	// mi is the model's index in its pool as of rebuild gen (-1: none).
	mi  int
	gen uint64
}

// bucket is a token-rate quota.
type bucket struct {
	rate    float64 // tokens per second
	level   float64
	at      time.Time
	est     float64 // tokens per line, recent average; 0: unknown
	pending int64   // lines admitted, not released
	// recent is the tokens released, exponentially decayed with tokenTau,
	// for the status' rate.
	recent   float64
	recentAt time.Time
}

const tokenTau = 10.0 // seconds

type record struct {
	q        *queue
	pool     *counter
	mf       *modelFlavor
	b        *bucket
	reserved float64
	borrowed bool
	a        Admission
}

// poolRT is a pool compiled from the configuration and the capacity.
type poolRT struct {
	name     string
	cohort   *cohortRT
	models   []string
	modelIdx map[string]int
	weight   float64
	implicit bool
	flavors  []*flavorRT
	// mfs[i][j]: model i on flavor j (nil: no replicas).
	mfs [][]*modelFlavor
	// per-round cache of the best option of each model, and the two
	// lowest shares after one more line of its queues (and whose is low1)
	optEpoch   []uint64
	opts       []option
	lowEpoch   uint64
	low1, low2 float64
	lowQ       *queue
}

type flavorRT struct {
	name        string
	nominal     int64
	lendable    int64
	borrowLimit *int64
	use         *counter
	bucket      *bucket
}

type cohortRT struct {
	name  string
	pools []*poolRT
}

type option struct {
	ok     bool
	flavor int
	borrow bool
	drs    float64 // pool's dominant resource share after admission, when borrowing
}

// Admission is one admitted line: its quota stays reserved until Release.
type Admission struct {
	Tenant, Model, Pool, Flavor string
	// Borrowed is true when the line runs on quota borrowed from the cohort.
	Borrowed bool
	id       uint64
}

// New makes a scheduler.
func New(cfg Config) *Scheduler {
	hl := cfg.HalfLife
	if hl <= 0 {
		hl = DefaultHalfLife
	}
	return &Scheduler{
		lambda:  math.Ln2 / hl.Seconds(),
		queueW:  map[qkey]float64{},
		poolOf:  map[string]string{},
		caps:    map[mfkey]*modelFlavor{},
		waiting: map[tmkey]int64{},
		queues:  map[qkey]*queue{},
		poolUse: map[pfkey]*counter{},
		buckets: map[pfkey]*bucket{},
		adm:     map[uint64]*record{},
		dirty:   true,
	}
}

// SetConfig replaces the configured pools, cohorts and tenant queues. Lines
// in flight keep their reservations until released, under the pool that
// admitted them.
func (s *Scheduler) SetConfig(pools []batch.Pool, cohorts []batch.Cohort, queues []batch.Queue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools = append([]batch.Pool(nil), pools...)
	sort.Slice(s.pools, func(i, j int) bool { return s.pools[i].Name < s.pools[j].Name })
	s.cohorts = append([]batch.Cohort(nil), cohorts...)
	s.poolOf = map[string]string{}
	for _, p := range s.pools {
		for _, m := range p.Models {
			if _, taken := s.poolOf[m]; !taken {
				s.poolOf[m] = p.Name
			}
		}
	}
	s.queueW = map[qkey]float64{}
	for _, q := range queues {
		s.queueW[qkey{q.Pool, q.Tenant}] = q.EffectiveWeight()
	}
	for k, q := range s.queues {
		q.weight = s.weightOf(k)
	}
	for k := range s.queueW {
		s.queue(k)
	}
	// Demand moves with its model's pool.
	for _, q := range s.queues {
		q.demand = q.demand[:0]
		q.total = 0
	}
	for k, n := range s.waiting {
		s.addDemand(s.queue(qkey{s.poolOfLocked(k.model), k.tenant}), k.model, n)
	}
	for _, q := range s.queues {
		s.syncActive(q)
	}
	s.dirty = true
}

func (s *Scheduler) weightOf(k qkey) float64 {
	if w, ok := s.queueW[k]; ok {
		return w
	}
	return 1
}

// PoolOf is the pool serving a model: the configured pool listing it, else
// an implicit pool named after the model.
func (s *Scheduler) PoolOf(model string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.poolOfLocked(model)
}

func (s *Scheduler) poolOfLocked(model string) string {
	if p, ok := s.poolOf[model]; ok {
		return p
	}
	return model
}

// SetCapacity says how many slots the serving replicas of model of one
// flavor (worker class, "" default) have now. A model never has more lines
// in flight on a flavor than this; it is also the nominal quota of an
// implicit pool and of a configured quota whose Lines is 0.
func (s *Scheduler) SetCapacity(model, flavor string, slots int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slots < 0 {
		slots = 0
	}
	k := mfkey{model, flavor}
	mf := s.caps[k]
	if mf == nil {
		if slots == 0 {
			return
		}
		mf = &modelFlavor{}
		s.caps[k] = mf
		s.dirty = true
	}
	if mf.slots != slots {
		mf.slots = slots
		s.dirty = true
	}
}

// SetWaiting says how many lines of model a tenant has enqueued and not yet
// dispatched (0 removes the demand).
func (s *Scheduler) SetWaiting(tenant, model string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 0 {
		n = 0
	}
	k := tmkey{tenant, model}
	old := s.waiting[k]
	if old == n {
		return
	}
	if n == 0 {
		delete(s.waiting, k)
	} else {
		s.waiting[k] = n
	}
	pool := s.poolOfLocked(model)
	if _, ok := s.rt[pool]; !ok {
		s.dirty = true // a new implicit pool
	}
	q := s.queue(qkey{pool, tenant})
	s.addDemand(q, model, n-old)
	s.syncActive(q)
}

// queue finds or makes a queue.
func (s *Scheduler) queue(k qkey) *queue {
	q := s.queues[k]
	if q == nil {
		q = &queue{pool: k.pool, tenant: k.tenant, weight: s.weightOf(k), idx: -1}
		s.queues[k] = q
	}
	return q
}

func (s *Scheduler) addDemand(q *queue, model string, delta int64) {
	if delta == 0 {
		return
	}
	for i := range q.demand {
		if q.demand[i].model == model {
			q.demand[i].n += delta
			q.total += delta
			if q.demand[i].n <= 0 {
				q.total -= q.demand[i].n
				q.demand = append(q.demand[:i], q.demand[i+1:]...)
			}
			return
		}
	}
	if delta > 0 {
		q.demand = append(q.demand, demand{model: model, n: delta})
		q.total += delta
	}
}

// syncActive keeps s.active the set of queues with demand.
func (s *Scheduler) syncActive(q *queue) {
	switch {
	case q.total > 0 && q.idx < 0:
		s.seq++
		q.since = s.seq
		q.idx = len(s.active)
		s.active = append(s.active, q)
	case q.total <= 0 && q.idx >= 0:
		last := s.active[len(s.active)-1]
		s.active[q.idx] = last
		last.idx = q.idx
		s.active = s.active[:len(s.active)-1]
		q.idx = -1
		q.since = 0
		q.held = false
	}
}

// decay is e^(-λ(now-ref)). Every queue's history is kept against the one
// reference time ref, so that a round costs one exponential, not one per
// queue: a queue whose inflight has been c since t, with history h at t,
// has at now the history c + (h-c)·e^(-λ(now-t)) = c + dev·decay(now) with
// dev = (h-c)/decay(t), exact since inflight is constant in between. ref
// moves forward (rescaling every dev) before the factors get extreme.
func (s *Scheduler) decay(now time.Time) float64 {
	if s.ref.IsZero() {
		s.ref = now
	}
	if now.Equal(s.decayAt) {
		return s.decayNow
	}
	x := -s.lambda * now.Sub(s.ref).Seconds()
	if math.Abs(x) > 30 {
		f := math.Exp(x)
		for _, q := range s.queues {
			q.dev *= f
			if math.Abs(q.dev) < 1e-12 {
				q.dev = 0
			}
		}
		s.ref, x = now, 0
	}
	s.decayAt, s.decayNow = now, math.Exp(x)
	return s.decayNow
}

// histAt is the queue's decayed historical usage at now.
func (s *Scheduler) histAt(q *queue, now time.Time) float64 {
	if q.dev == 0 {
		return float64(q.inflight)
	}
	return float64(q.inflight) + q.dev*s.decay(now)
}

// addInflight changes a queue's lines in flight at now, its history
// continuing from its value at now towards the new inflight.
func (s *Scheduler) addInflight(q *queue, now time.Time, delta int64) {
	h := s.histAt(q, now)
	q.inflight += delta
	if d := s.decay(now); d > 0 {
		q.dev = (h - float64(q.inflight)) / d
	}
}

func (s *Scheduler) shareAt(q *queue, now time.Time) float64 {
	return (float64(q.inflight) + s.histAt(q, now)) / q.weight
}

// rebuild compiles the pools from the configuration and the capacity.
func (s *Scheduler) rebuild() {
	s.dirty = false
	s.gen++
	s.rt = map[string]*poolRT{}
	cohorts := map[string]*cohortRT{}
	add := func(p *poolRT, cohort string) {
		s.rt[p.name] = p
		if cohort != "" {
			c := cohorts[cohort]
			if c == nil {
				c = &cohortRT{name: cohort}
				cohorts[cohort] = c
			}
			c.pools = append(c.pools, p)
			p.cohort = c
		}
	}
	flavorsOf := func(models []string) []string {
		set := map[string]bool{}
		for k, mf := range s.caps {
			if mf.slots > 0 {
				for _, m := range models {
					if k.model == m {
						set[k.flavor] = true
					}
				}
			}
		}
		out := make([]string, 0, len(set))
		for f := range set {
			out = append(out, f)
		}
		sort.Strings(out)
		return out
	}
	for _, cp := range s.pools {
		var models []string
		for _, m := range cp.Models {
			if s.poolOf[m] == cp.Name {
				models = append(models, m)
			}
		}
		p := s.newPoolRT(cp.Name, models)
		if cp.Weight > 0 {
			p.weight = cp.Weight
		}
		if len(cp.Quotas) == 0 {
			for _, f := range flavorsOf(models) {
				s.addFlavor(p, batch.Quota{Flavor: f})
			}
		}
		for _, q := range cp.Quotas {
			s.addFlavor(p, q)
		}
		add(p, cp.Cohort)
	}
	implicit := map[string]bool{}
	for k := range s.caps {
		implicit[k.model] = true
	}
	for k := range s.waiting {
		implicit[k.model] = true
	}
	for _, r := range s.adm {
		implicit[r.a.Model] = true
	}
	for m := range implicit {
		if _, configured := s.poolOf[m]; configured {
			continue
		}
		if _, clash := s.rt[m]; clash {
			continue // a configured pool has the model's name
		}
		p := s.newPoolRT(m, []string{m})
		p.implicit = true
		for _, f := range flavorsOf(p.models) {
			s.addFlavor(p, batch.Quota{Flavor: f})
		}
		add(p, "")
	}
}

func (s *Scheduler) newPoolRT(name string, models []string) *poolRT {
	p := &poolRT{name: name, models: models, modelIdx: map[string]int{}, weight: 1}
	for i, m := range models {
		p.modelIdx[m] = i
	}
	p.mfs = make([][]*modelFlavor, len(models))
	p.optEpoch = make([]uint64, len(models))
	p.opts = make([]option, len(models))
	return p
}

func (s *Scheduler) addFlavor(p *poolRT, q batch.Quota) {
	f := &flavorRT{name: q.Flavor, borrowLimit: q.BorrowingLimit}
	var slots int64
	for i, m := range p.models {
		mf := s.caps[mfkey{m, q.Flavor}]
		p.mfs[i] = append(p.mfs[i], mf)
		if mf != nil {
			slots += mf.slots
		}
	}
	f.nominal = q.Lines
	if f.nominal == 0 {
		f.nominal = slots
	}
	f.lendable = f.nominal
	if q.LendingLimit != nil && *q.LendingLimit < f.lendable {
		f.lendable = *q.LendingLimit
	}
	k := pfkey{p.name, q.Flavor}
	f.use = s.poolUse[k]
	if f.use == nil {
		f.use = &counter{}
		s.poolUse[k] = f.use
	}
	if q.TokensPerSecond > 0 {
		b := s.buckets[k]
		if b == nil {
			b = &bucket{level: float64(q.TokensPerSecond)}
			s.buckets[k] = b
		}
		b.rate = float64(q.TokensPerSecond)
		f.bucket = b
	}
	p.flavors = append(p.flavors, f)
}

// quota says whether one more line of p on flavor j fits the quota, and
// whether it borrows.
func (p *poolRT) quota(j int) (ok, borrow bool) {
	f := p.flavors[j]
	u := f.use.n + 1
	if p.cohort == nil {
		return u <= f.nominal, false
	}
	if f.borrowLimit != nil && u > f.nominal+*f.borrowLimit {
		return false, false
	}
	borrow = u > f.nominal
	if u <= f.nominal-f.lendable {
		return true, false // the part of the quota that is not lent
	}
	var shared, lendable int64
	for _, o := range p.cohort.pools {
		of := o.flavor(f.name)
		if of == nil {
			continue
		}
		lendable += of.lendable
		if g := of.nominal - of.lendable; of.use.n > g {
			shared += of.use.n - g
		}
	}
	return shared+1 <= lendable, borrow
}

func (p *poolRT) flavor(name string) *flavorRT {
	for _, f := range p.flavors {
		if f.name == name {
			return f
		}
	}
	return nil
}

// drs is the pool's dominant resource share with one more line on flavor
// j (j < 0: as it is): the largest of its use above nominal over the
// cohort's lendable quota, per flavor, over its weight.
func (p *poolRT) drs(j int) float64 {
	if p.cohort == nil {
		return 0
	}
	var d float64
	for i, f := range p.flavors {
		u := f.use.n
		if i == j {
			u++
		}
		if u <= f.nominal {
			continue
		}
		var lendable int64
		for _, o := range p.cohort.pools {
			if of := o.flavor(f.name); of != nil {
				lendable += of.lendable
			}
		}
		r := math.Inf(1)
		if lendable > 0 {
			r = float64(u-f.nominal) / float64(lendable)
		}
		d = math.Max(d, r)
	}
	return d / p.weight
}

// refill brings a token quota to now (burst: one second of its rate).
func (b *bucket) refill(now time.Time) {
	if !b.at.IsZero() {
		if dt := now.Sub(b.at).Seconds(); dt > 0 {
			b.level = math.Min(b.rate, b.level+b.rate*dt)
		}
	}
	if b.at.IsZero() || now.After(b.at) {
		b.at = now
	}
}

// admits says whether a token quota admits a line now.
func (b *bucket) admits() bool {
	if b.est == 0 && b.pending > 0 {
		return false // one line at a time until a line's tokens are known
	}
	return b.level > 0
}

// option finds how one more line of model i of p could run now: the first
// flavor within nominal quota, else the first that borrows.
func (s *Scheduler) option(p *poolRT, i int, now time.Time) option {
	if p.optEpoch[i] == s.epoch {
		return p.opts[i]
	}
	best := option{}
	for j, f := range p.flavors {
		mf := p.mfs[i][j]
		if mf == nil || mf.use >= mf.slots {
			continue
		}
		ok, borrow := p.quota(j)
		if !ok {
			continue
		}
		if f.bucket != nil {
			f.bucket.refill(now)
			if !f.bucket.admits() {
				continue
			}
		}
		if !borrow {
			best = option{ok: true, flavor: j}
			break
		}
		if !best.ok {
			best = option{ok: true, flavor: j, borrow: true, drs: p.drs(j)}
		}
	}
	p.optEpoch[i] = s.epoch
	p.opts[i] = best
	return best
}

// Admit picks the next line to dispatch, in fair-share order, and reserves
// its quota (one line of the flavor) and decrements that queue's waiting
// count. ok is false when nothing can be admitted now (no demand, no free
// quota or capacity, or every queue with demand is held over its share).
// Call it in a loop until !ok whenever capacity frees or demand arrives.
func (s *Scheduler) Admit(now time.Time) (a Admission, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.active) == 0 {
		return Admission{}, false
	}
	if s.dirty {
		s.rebuild()
	}
	s.updateHolds(now)

	var (
		best    *queue
		bestOpt option
		bestDm  int
	)
	for _, q := range s.active {
		p := q.prt
		if p == nil {
			continue
		}
		// The queue's first model that can run, in demand order.
		var opt option
		dm := -1
		for k := range q.demand {
			d := &q.demand[k]
			if d.gen != s.gen {
				d.mi, d.gen = -1, s.gen
				if i, known := p.modelIdx[d.model]; known {
					d.mi = i
				}
			}
			if d.mi < 0 || d.n <= 0 {
				continue
			}
			o := s.option(p, d.mi, now)
			if o.ok && (dm < 0 || (opt.borrow && !o.borrow)) {
				opt, dm = o, k
				if !o.borrow {
					break
				}
			}
		}
		if dm < 0 {
			continue
		}
		if best == nil || before(q, opt, best, bestOpt) {
			best, bestOpt, bestDm = q, opt, dm
		}
	}
	if best == nil {
		return Admission{}, false
	}
	return s.admit(best, bestDm, bestOpt, now), true
}

// before orders candidates: lines within nominal quota before borrowing
// ones, unheld queues before held ones, borrowers by their pool's share,
// then by the queue's share, then the oldest demand.
func before(q *queue, qo option, r *queue, ro option) bool {
	if qo.borrow != ro.borrow {
		return !qo.borrow
	}
	if q.held != r.held {
		return !q.held
	}
	if qo.borrow && math.Abs(qo.drs-ro.drs) > eps {
		return qo.drs < ro.drs
	}
	if math.Abs(q.share-r.share) > eps {
		return q.share < r.share
	}
	return q.since < r.since
}

// updateHolds starts an admission round: it computes the active queues'
// shares and holds (see Scheduler).
func (s *Scheduler) updateHolds(now time.Time) {
	s.epoch++
	// The two lowest "share after one more line" per pool, so that each
	// queue is compared with the lowest other queue in one pass.
	for _, q := range s.active {
		if q.prtGen != s.gen {
			q.prt, q.prtGen = s.rt[q.pool], s.gen
		}
		p := q.prt
		q.share = s.shareAt(q, now)
		if p == nil {
			continue
		}
		if p.lowEpoch != s.epoch {
			p.lowEpoch, p.low1, p.low2, p.lowQ = s.epoch, math.Inf(1), math.Inf(1), nil
		}
		switch after := q.share + 1/q.weight; {
		case after < p.low1:
			p.low2, p.low1, p.lowQ = p.low1, after, q
		case after < p.low2:
			p.low2 = after
		}
	}
	for _, q := range s.active {
		if q.prt == nil {
			q.held = false
			continue
		}
		minOther := q.prt.low1
		if q.prt.lowQ == q {
			minOther = q.prt.low2
		}
		s.hold(q, minOther)
	}
}

// hold applies the hysteresis (see Scheduler): minOther is the lowest share
// after one more line among the pool's other waiting queues.
func (s *Scheduler) hold(q *queue, minOther float64) {
	if math.IsInf(minOther, 1) {
		q.held = false
		return
	}
	if q.held {
		if q.share <= minOther+eps {
			q.held = false
		}
	} else if q.share >= minOther+1/q.weight-eps {
		q.held = true
	}
}

func (s *Scheduler) admit(q *queue, dm int, opt option, now time.Time) Admission {
	p := s.rt[q.pool]
	d := &q.demand[dm]
	i := p.modelIdx[d.model]
	f := p.flavors[opt.flavor]
	mf := p.mfs[i][opt.flavor]

	s.nextID++
	a := Admission{Tenant: q.tenant, Model: d.model, Pool: p.name, Flavor: f.name, Borrowed: opt.borrow, id: s.nextID}
	r := &record{q: q, pool: f.use, mf: mf, b: f.bucket, borrowed: opt.borrow, a: a}

	s.addInflight(q, now, 1)
	if opt.borrow {
		q.borrowed++
	}
	f.use.n++
	mf.use++
	if b := f.bucket; b != nil {
		b.refill(now)
		r.reserved = b.est
		b.level -= b.est
		b.pending++
	}
	s.adm[a.id] = r

	k := tmkey{q.tenant, d.model}
	if n := s.waiting[k] - 1; n > 0 {
		s.waiting[k] = n
	} else {
		delete(s.waiting, k)
	}
	s.addDemand(q, d.model, -1)
	s.syncActive(q)
	return a
}

// Release ends an admission: the line finished having spent tokens
// (dispatched=true), or it was never sent (dispatched=false: no line was
// there after all; its waiting count is NOT restored — call SetWaiting).
// Releasing an admission twice, or one this scheduler did not make, does
// nothing.
func (s *Scheduler) Release(a Admission, tokens int64, dispatched bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.adm[a.id]
	if r == nil {
		return
	}
	delete(s.adm, a.id)
	q := r.q
	s.addInflight(q, now, -1)
	if r.borrowed {
		q.borrowed--
	}
	r.pool.n--
	r.mf.use--
	if dispatched {
		q.completed++
	}
	if b := r.b; b != nil {
		b.refill(now)
		b.pending--
		if dispatched {
			t := float64(tokens)
			b.level -= t - r.reserved
			if b.est == 0 {
				b.est = t
			} else {
				b.est = 0.8*b.est + 0.2*t
			}
			b.decayRecent(now)
			b.recent += t
		} else {
			b.level += r.reserved
		}
	}
}

func (b *bucket) decayRecent(now time.Time) {
	if !b.recentAt.IsZero() {
		if dt := now.Sub(b.recentAt).Seconds(); dt > 0 {
			b.recent *= math.Exp(-dt / tokenTau)
		}
	}
	if b.recentAt.IsZero() || now.After(b.recentAt) {
		b.recentAt = now
	}
}

// Status is the state for `aiforge batches queues`.
func (s *Scheduler) Status(now time.Time) batch.QueuesReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dirty {
		s.rebuild()
	}
	s.updateHolds(now)
	reply := batch.QueuesReply{At: now.UnixMilli(), Pools: []batch.PoolStatus{}, Queues: []batch.QueueStatus{}}

	names := make([]string, 0, len(s.rt))
	for n := range s.rt {
		names = append(names, n)
	}
	sort.Strings(names)
	lent := s.lent()
	for _, n := range names {
		p := s.rt[n]
		ps := batch.PoolStatus{Name: p.name, Models: append([]string{}, p.models...), Implicit: p.implicit, Flavors: []batch.FlavorStatus{}}
		if p.cohort != nil {
			ps.Cohort = p.cohort.name
		}
		for _, f := range p.flavors {
			fs := batch.FlavorStatus{Flavor: f.name, Nominal: f.nominal, InUse: f.use.n, Lent: lent[f]}
			if f.use.n > f.nominal {
				fs.Borrowed = f.use.n - f.nominal
			}
			if b := f.bucket; b != nil {
				fs.TokensPerSecond = int64(b.rate)
				r := b.recent
				if !b.recentAt.IsZero() && now.After(b.recentAt) {
					r *= math.Exp(-now.Sub(b.recentAt).Seconds() / tokenTau)
				}
				fs.TokensRate = r / tokenTau
			}
			ps.Flavors = append(ps.Flavors, fs)
		}
		reply.Pools = append(reply.Pools, ps)
	}

	keys := make([]qkey, 0, len(s.queues))
	for k, q := range s.queues {
		_, configured := s.queueW[k]
		if configured || q.inflight > 0 || q.total > 0 || q.completed > 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pool != keys[j].pool {
			return keys[i].pool < keys[j].pool
		}
		return keys[i].tenant < keys[j].tenant
	})
	for _, k := range keys {
		q := s.queues[k]
		reply.Queues = append(reply.Queues, batch.QueueStatus{
			Pool: q.pool, Tenant: q.tenant, Weight: q.weight,
			Share: s.shareAt(q, now), Admitted: q.inflight, Borrowed: q.borrowed,
			Waiting: q.total, Completed: q.completed, Held: q.held && q.total > 0,
		})
	}
	return reply
}

// lent attributes the lines borrowed in each cohort to the idle lendable
// quota of its pools, in pool order.
func (s *Scheduler) lent() map[*flavorRT]int64 {
	out := map[*flavorRT]int64{}
	seen := map[*cohortRT]bool{}
	for _, p := range s.rt {
		c := p.cohort
		if c == nil || seen[c] {
			continue
		}
		seen[c] = true
		pools := append([]*poolRT(nil), c.pools...)
		sort.Slice(pools, func(i, j int) bool { return pools[i].name < pools[j].name })
		borrowed := map[string]int64{}
		for _, o := range pools {
			for _, f := range o.flavors {
				if f.use.n > f.nominal {
					borrowed[f.name] += f.use.n - f.nominal
				}
			}
		}
		for _, o := range pools {
			for _, f := range o.flavors {
				idle := f.nominal - f.use.n
				if idle > f.lendable {
					idle = f.lendable
				}
				if idle <= 0 {
					continue
				}
				n := min(idle, borrowed[f.name])
				out[f] = n
				borrowed[f.name] -= n
			}
		}
	}
	return out
}
