package batch

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/registry"
)

const (
	// fetchWait is how long one pull for a batch's lines waits.
	fetchWait = 2 * time.Second
	// pumpInterval re-runs admission when nothing else did (token quotas
	// free up with time).
	pumpInterval = 250 * time.Millisecond
)

type qkey struct{ tenant, model string }

// line is a batch line taken from the stream, held until it is answered.
type line struct {
	ev      events.BatchLineV1
	msg     jetstream.Msg
	fetched time.Time
}

// active is a batch whose lines are being dispatched.
type active struct {
	r       *runner
	id      string
	key     qkey
	created int64
	cons    jetstream.Consumer

	// Guarded by dispatcher.mu.
	buf      []*line
	held     map[int64]*line // buffered or in flight, by index
	inflight int
	stopped  bool
	idle     chan struct{} // closed once stopped with nothing in flight

	room chan struct{} // a line left the buffer
}

// group is where the lines of one model and flavor admitted together go.
type group struct {
	worker string
	n      int
	size   int
}

// dispatcher admits the lines of the active batches in the scheduler's
// order and sends them to the workers.
type dispatcher struct {
	s     *Service
	sched Scheduler
	kick  chan struct{}
	lines sync.WaitGroup

	mu          sync.Mutex
	queues      map[qkey][]*active
	dirty       map[qkey]bool
	waiting     map[qkey]int64
	workers     map[string]registry.WorkerState // by bucket key
	flavors     map[string]map[string]bool      // model → flavors given capacity
	models      map[string]int                  // model → active batches
	outstanding map[string]int                  // worker id → lines in flight from here
	pools       map[string]api.Pool
}

func newDispatcher(s *Service) *dispatcher {
	return &dispatcher{s: s, sched: s.deps.Scheduler, kick: make(chan struct{}, 1),
		queues: map[qkey][]*active{}, dirty: map[qkey]bool{}, waiting: map[qkey]int64{},
		workers: map[string]registry.WorkerState{}, flavors: map[string]map[string]bool{},
		models: map[string]int{}, outstanding: map[string]int{}, pools: map[string]api.Pool{}}
}

func (d *dispatcher) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *dispatcher) run(ctx context.Context) error {
	t := time.NewTicker(pumpInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			d.lines.Wait()
			return nil
		case <-d.kick:
		case <-t.C:
		}
		d.pump(ctx)
	}
}

func (d *dispatcher) status() api.QueuesReply { return d.sched.Status(time.Now()) }

// add starts dispatching a batch's lines.
func (d *dispatcher) add(r *runner, rec api.Record, model string, cons jetstream.Consumer) *active {
	a := &active{r: r, id: rec.ID, key: qkey{rec.Tenant, model}, created: rec.CreatedAt, cons: cons,
		held: map[int64]*line{}, idle: make(chan struct{}), room: make(chan struct{}, 1)}
	d.mu.Lock()
	q := append(d.queues[a.key], a)
	slices.SortStableFunc(q, func(x, y *active) int {
		if x.created != y.created {
			return int(x.created - y.created)
		}
		return strings.Compare(x.id, y.id)
	})
	d.queues[a.key] = q
	d.models[model]++
	d.capacity(model)
	d.mu.Unlock()
	go d.fetch(r.ctx, a)
	go d.keepAlive(r.ctx, a)
	return a
}

// stop ends a batch's dispatch: no line of it is admitted any more. Its
// buffered lines are handed back to JetStream when handBack (the service
// stops) and otherwise left (the batch ends; they are purged). The channel
// is closed once its lines in flight are answered.
func (d *dispatcher) stop(a *active, handBack bool) <-chan struct{} {
	d.mu.Lock()
	var buffered []*line
	if !a.stopped {
		a.stopped = true
		buffered = a.buf
		a.buf = nil
		for _, l := range buffered {
			delete(a.held, l.ev.Index)
		}
		q := d.queues[a.key]
		if i := slices.Index(q, a); i >= 0 {
			q = slices.Delete(q, i, i+1)
		}
		if len(q) == 0 {
			delete(d.queues, a.key)
		} else {
			d.queues[a.key] = q
		}
		d.setWaiting(a.key)
		if d.models[a.key.model]--; d.models[a.key.model] <= 0 {
			delete(d.models, a.key.model)
		}
		if a.inflight == 0 {
			close(a.idle)
		}
	}
	d.mu.Unlock()
	if handBack {
		for _, l := range buffered {
			_ = l.msg.Nak()
		}
	}
	d.poke()
	if d.s.onStop != nil {
		d.s.onStop(a.id)
	}
	return a.idle
}

// fetch keeps up to Prefetch lines of the batch buffered.
func (d *dispatcher) fetch(ctx context.Context, a *active) {
	for ctx.Err() == nil {
		d.mu.Lock()
		stopped, n := a.stopped, d.s.cfg.Prefetch-len(a.buf)
		d.mu.Unlock()
		if stopped {
			return
		}
		if n <= 0 {
			select {
			case <-a.room:
			case <-a.idle:
			case <-ctx.Done():
			}
			continue
		}
		batch, err := a.cons.Fetch(n, jetstream.FetchMaxWait(fetchWait))
		if err != nil {
			if ctx.Err() == nil {
				d.s.log.Warn("batch: fetch lines", "batch", a.id, "err", err)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		for msg := range batch.Messages() {
			d.take(a, msg)
		}
	}
}

// take buffers a line delivered by the batch's consumer.
func (d *dispatcher) take(a *active, msg jetstream.Msg) {
	_, ev, err := d.s.lineReg.Decode(msg.Headers(), msg.Data())
	if err != nil {
		d.s.log.Warn("batch: not a batch line; dropped", "batch", a.id, "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	l := ev.(*events.BatchLineV1)
	if l.BatchID != a.id || l.Index < 0 || l.Index >= a.r.total {
		_ = msg.Term()
		return
	}
	if a.r.isDone(l.Index) {
		_ = msg.Ack() // answered before a crash, acknowledged only now
		return
	}
	d.mu.Lock()
	if a.stopped {
		d.mu.Unlock()
		return
	}
	if _, held := a.held[l.Index]; held {
		d.mu.Unlock()
		return // a second copy; the one held answers for both
	}
	ln := &line{ev: *l, msg: msg, fetched: time.Now()}
	a.held[l.Index] = ln
	a.buf = append(a.buf, ln)
	d.dirty[a.key] = true
	d.mu.Unlock()
	d.poke()
}

// keepAlive acknowledges the batch's held lines as in progress, so that
// JetStream does not give them to another replica while they wait or run.
func (d *dispatcher) keepAlive(ctx context.Context, a *active) {
	t := time.NewTicker(d.s.cfg.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.idle:
			return
		case <-t.C:
		}
		d.mu.Lock()
		msgs := make([]jetstream.Msg, 0, len(a.held))
		for _, l := range a.held {
			msgs = append(msgs, l.msg)
		}
		d.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress()
		}
	}
}

// setWaiting tells the scheduler a queue's buffered lines. Called with mu.
func (d *dispatcher) setWaiting(k qkey) {
	var n int64
	for _, a := range d.queues[k] {
		n += int64(len(a.buf))
	}
	if n == 0 {
		delete(d.waiting, k)
	} else {
		d.waiting[k] = n
	}
	d.sched.SetWaiting(k.tenant, k.model, n)
	var model int64
	for k2, w := range d.waiting {
		if k2.model == k.model {
			model += w
		}
	}
	d.s.m.waiting.WithLabelValues(k.model).Set(float64(model))
}

// pop takes the next line of a queue: its oldest batch's first.
func (d *dispatcher) pop(k qkey) (*active, *line) {
	for _, a := range d.queues[k] {
		if len(a.buf) == 0 {
			continue
		}
		l := a.buf[0]
		a.buf[0] = nil
		a.buf = a.buf[1:]
		select {
		case a.room <- struct{}{}:
		default:
		}
		return a, l
	}
	return nil, nil
}

// pump admits and sends lines until the scheduler admits no more.
func (d *dispatcher) pump(ctx context.Context) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.dirty {
		d.setWaiting(k)
	}
	clear(d.dirty)
	groups := map[string]*group{}
	for ctx.Err() == nil {
		adm, ok := d.sched.Admit(now)
		if !ok {
			return
		}
		k := qkey{adm.Tenant, adm.Model}
		a, l := d.pop(k)
		if l == nil {
			d.sched.Release(adm, 0, false, now)
			d.setWaiting(k)
			continue
		}
		worker := d.pick(adm, groups)
		a.inflight++
		if worker != "" {
			d.outstanding[worker]++
		}
		d.setWaiting(k)
		d.s.m.wait.WithLabelValues(adm.Model).Observe(now.Sub(l.fetched).Seconds())
		d.lines.Add(1)
		go d.send(ctx, a, l, adm, worker)
	}
}

// pick chooses the replica a line goes to: the one its group goes to, or
// for a new group the replica of the admitted flavor with the most free
// slots; "" (the model's queue group) when no replica reports its state.
// Called with mu.
func (d *dispatcher) pick(adm Admission, groups map[string]*group) string {
	gk := adm.Model + "\x00" + adm.Flavor
	if g := groups[gk]; g != nil && g.n < g.size {
		g.n++
		return g.worker
	}
	best, bestFree := "", math.MinInt
	for _, w := range d.workers {
		if w.Model != adm.Model || !w.Servable() || w.Class != adm.Flavor {
			continue
		}
		free := max(w.MaxConcurrency, 1) - d.outstanding[w.WorkerID]
		if free > bestFree || (free == bestFree && w.WorkerID < best) {
			best, bestFree = w.WorkerID, free
		}
	}
	if best == "" {
		return ""
	}
	size := d.pools[adm.Pool].GroupSize
	if size <= 0 {
		size = max(bestFree, 1)
	}
	groups[gk] = &group{worker: best, n: 1, size: size}
	return best
}

// send runs one admitted line and releases its admission.
func (d *dispatcher) send(ctx context.Context, a *active, l *line, adm Admission, worker string) {
	defer d.lines.Done()
	tokens := d.s.serveLine(ctx, a.r, l, worker)
	d.mu.Lock()
	if a.held[l.ev.Index] == l {
		delete(a.held, l.ev.Index)
	}
	a.inflight--
	if worker != "" {
		if d.outstanding[worker]--; d.outstanding[worker] <= 0 {
			delete(d.outstanding, worker)
		}
	}
	d.sched.Release(adm, tokens, true, time.Now())
	if a.stopped && a.inflight == 0 {
		close(a.idle)
	}
	d.mu.Unlock()
	d.poke()
}

// onWorker follows events.BucketWorkers: each model's capacity per flavor
// is the slots of its serving replicas.
func (d *dispatcher) onWorker(c registry.Change[registry.WorkerState], initialDone bool) {
	if initialDone {
		return
	}
	d.mu.Lock()
	old, had := d.workers[c.Key]
	if c.Deleted || c.Err != nil {
		delete(d.workers, c.Key)
	} else {
		d.workers[c.Key] = c.Value
	}
	if had {
		d.capacity(old.Model)
	}
	if !c.Deleted && c.Err == nil && (!had || old.Model != c.Value.Model) {
		d.capacity(c.Value.Model)
	}
	d.mu.Unlock()
	d.poke()
}

// capacity tells the scheduler a model's slots per flavor. Called with mu.
func (d *dispatcher) capacity(model string) {
	if model == "" {
		return
	}
	slots := map[string]int64{}
	for _, w := range d.workers {
		if w.Model == model && w.Servable() {
			slots[w.Class] += int64(max(w.MaxConcurrency, 1))
		}
	}
	if len(slots) == 0 {
		slots[""] = d.s.cfg.DefaultCapacity
	}
	for f := range d.flavors[model] {
		if _, ok := slots[f]; !ok {
			d.sched.SetCapacity(model, f, 0)
		}
	}
	set := map[string]bool{}
	for f, n := range slots {
		d.sched.SetCapacity(model, f, n)
		set[f] = true
	}
	d.flavors[model] = set
}

// watchQueues follows the scheduler's configuration in
// events.BucketBatchQueues.
func (s *Service) watchQueues(ctx context.Context, b jetstream.KeyValue) error {
	pools := map[string]api.Pool{}
	cohorts := map[string]api.Cohort{}
	queues := map[string]api.Queue{}
	initial := true
	apply := func() {
		ps := make([]api.Pool, 0, len(pools))
		for _, p := range pools {
			ps = append(ps, p)
		}
		cs := make([]api.Cohort, 0, len(cohorts))
		for _, c := range cohorts {
			cs = append(cs, c)
		}
		qs := make([]api.Queue, 0, len(queues))
		for _, q := range queues {
			qs = append(qs, q)
		}
		slices.SortFunc(ps, func(a, b api.Pool) int { return strings.Compare(a.Name, b.Name) })
		slices.SortFunc(cs, func(a, b api.Cohort) int { return strings.Compare(a.Name, b.Name) })
		slices.SortFunc(qs, func(a, b api.Queue) int { return strings.Compare(a.Pool+"\x00"+a.Tenant, b.Pool+"\x00"+b.Tenant) })
		s.disp.sched.SetConfig(ps, cs, qs)
		s.disp.mu.Lock()
		s.disp.pools = maps(pools)
		s.disp.mu.Unlock()
		s.disp.poke()
	}
	return kv.Watch(ctx, b, func(c kv.Change[json.RawMessage], initialDone bool) {
		if initialDone {
			initial = false
			apply()
			return
		}
		bad := c.Err != nil
		switch {
		case strings.HasPrefix(c.Key, api.PoolPrefix):
			var p api.Pool
			if !c.Deleted && !bad && json.Unmarshal(c.Value, &p) == nil && p.Validate() == nil {
				pools[c.Key] = p
			} else {
				delete(pools, c.Key)
			}
		case strings.HasPrefix(c.Key, api.CohortPrefix):
			var co api.Cohort
			if !c.Deleted && !bad && json.Unmarshal(c.Value, &co) == nil && co.Name != "" {
				cohorts[c.Key] = co
			} else {
				delete(cohorts, c.Key)
			}
		case strings.HasPrefix(c.Key, api.QueuePrefix):
			var q api.Queue
			if !c.Deleted && !bad && json.Unmarshal(c.Value, &q) == nil && q.Validate() == nil {
				queues[c.Key] = q
			} else {
				delete(queues, c.Key)
			}
		default:
			return // flavors describe classes; nothing to schedule by
		}
		if !initial {
			apply()
		}
	})
}

// maps re-keys pools by name.
func maps(byKey map[string]api.Pool) map[string]api.Pool {
	out := make(map[string]api.Pool, len(byKey))
	for _, p := range byKey {
		out[p.Name] = p
	}
	return out
}
