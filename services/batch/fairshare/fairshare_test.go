package fairshare

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/batch"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// running is a heap of lines in flight by end time.
type line struct {
	end    time.Time
	start  time.Time
	a      Admission
	tokens int64
}
type running []line

func (r running) Len() int            { return len(r) }
func (r running) Less(i, j int) bool  { return r[i].end.Before(r[j].end) }
func (r running) Swap(i, j int)       { r[i], r[j] = r[j], r[i] }
func (r *running) Push(x interface{}) { *r = append(*r, x.(line)) }
func (r *running) Pop() interface{} {
	old := *r
	x := old[len(old)-1]
	*r = old[:len(old)-1]
	return x
}

// sim drives a scheduler through simulated time: lines run for dur and
// release at their end; every event is followed by an admission loop.
type sim struct {
	t        *testing.T
	s        *Scheduler
	now      time.Time
	run      running
	dur      func(a Admission) time.Duration
	tokens   func(a Admission) int64
	caps     map[mfkey]int64
	inflight map[mfkey]int64
	lines    map[string]int     // completed lines per tenant
	lineSec  map[string]float64 // completed line-seconds per tenant
	admitted []Admission        // in order
}

func newSim(t *testing.T, s *Scheduler) *sim {
	return &sim{t: t, s: s, now: t0, caps: map[mfkey]int64{}, inflight: map[mfkey]int64{},
		lines: map[string]int{}, lineSec: map[string]float64{},
		dur: func(Admission) time.Duration { return time.Second }, tokens: func(Admission) int64 { return 0 }}
}

func (m *sim) capacity(model, flavor string, n int64) {
	m.caps[mfkey{model, flavor}] = n
	m.s.SetCapacity(model, flavor, n)
}

// admitAll admits until the scheduler says no, checking the capacity bound.
func (m *sim) admitAll() int {
	n := 0
	for {
		a, ok := m.s.Admit(m.now)
		if !ok {
			return n
		}
		n++
		k := mfkey{a.Model, a.Flavor}
		m.inflight[k]++
		if m.inflight[k] > m.caps[k] {
			m.t.Fatalf("%s on %q: %d lines in flight, capacity %d", a.Model, a.Flavor, m.inflight[k], m.caps[k])
		}
		m.admitted = append(m.admitted, a)
		heap.Push(&m.run, line{start: m.now, end: m.now.Add(m.dur(a)), a: a, tokens: m.tokens(a)})
	}
}

// step releases the next line to end (and any ending at the same time),
// then admits. It returns false when nothing runs.
func (m *sim) step() bool {
	if len(m.run) == 0 {
		return false
	}
	m.now = m.run[0].end
	for len(m.run) > 0 && !m.run[0].end.After(m.now) {
		l := heap.Pop(&m.run).(line)
		m.release(l)
	}
	m.admitAll()
	return true
}

func (m *sim) release(l line) {
	m.s.Release(l.a, l.tokens, true, m.now)
	m.inflight[mfkey{l.a.Model, l.a.Flavor}]--
	m.lines[l.a.Tenant]++
	m.lineSec[l.a.Tenant] += l.end.Sub(l.start).Seconds()
}

func (m *sim) runUntil(end time.Time) {
	m.admitAll()
	for len(m.run) > 0 && m.run[0].end.Before(end) {
		m.step()
	}
	m.now = end
}

func jain(x []float64) float64 {
	var sum, sq float64
	for _, v := range x {
		sum += v
		sq += v * v
	}
	return sum * sum / (float64(len(x)) * sq)
}

var weights = map[string]float64{"a": 1, "b": 2, "c": 3}

func threeTenants(t *testing.T) (*Scheduler, *sim) {
	s := New(Config{})
	s.SetConfig([]batch.Pool{{Name: "p", Models: []string{"m"}}}, nil, []batch.Queue{
		{Pool: "p", Tenant: "a", Weight: 1}, {Pool: "p", Tenant: "b", Weight: 2}, {Pool: "p", Tenant: "c", Weight: 3},
	})
	m := newSim(t, s)
	m.capacity("m", "", 6)
	for tenant := range weights {
		s.SetWaiting(tenant, "m", 1<<40)
	}
	return s, m
}

// checkShares asserts each tenant's part of got is within 10% of its
// weight's part and the Jain index of got/weight is above 0.99.
func checkShares(t *testing.T, what string, got map[string]float64) {
	t.Helper()
	var total float64
	for _, v := range got {
		total += v
	}
	var x []float64
	for _, tenant := range []string{"a", "b", "c"} {
		want := weights[tenant] / 6
		part := got[tenant] / total
		t.Logf("%s: tenant %s weight %v: %.1f (%.4f of the total, want %.4f)", what, tenant, weights[tenant], got[tenant], part, want)
		if math.Abs(part-want)/want > 0.10 {
			t.Errorf("%s: tenant %s has %.4f of the total, want %.4f ± 10%%", what, tenant, part, want)
		}
		x = append(x, got[tenant]/weights[tenant])
	}
	j := jain(x)
	t.Logf("%s: Jain index of share/weight %.8f", what, j)
	if j <= 0.99 {
		t.Errorf("%s: Jain index %.6f, want > 0.99", what, j)
	}
}

func TestWeightsEqualDurations(t *testing.T) {
	_, m := threeTenants(t)
	m.runUntil(t0.Add(time.Hour))
	lines := map[string]float64{}
	for k, v := range m.lines {
		lines[k] = float64(v)
	}
	checkShares(t, "lines", lines)
	checkShares(t, "line-seconds", m.lineSec)
}

func TestWeightsUnequalDurations(t *testing.T) {
	_, m := threeTenants(t)
	rng := rand.New(rand.NewPCG(1, 2))
	base := map[string]float64{"a": 4, "b": 1, "c": 0.5} // the light tenant's lines are the longest
	m.dur = func(a Admission) time.Duration {
		return time.Duration(base[a.Tenant] * (0.5 + rng.Float64()) * float64(time.Second))
	}
	m.runUntil(t0.Add(2 * time.Hour))
	checkShares(t, "line-seconds", m.lineSec)
}

func TestNewcomerGetsFreedSlotsAndNothingIsRevoked(t *testing.T) {
	s, m := threeTenants(t)
	m.runUntil(t0.Add(30 * time.Minute))
	before := map[string]int64{}
	for _, l := range m.run {
		before[l.a.Tenant]++
	}
	if len(m.run) != 6 {
		t.Fatalf("%d lines in flight, want 6", len(m.run))
	}
	s.SetConfig([]batch.Pool{{Name: "p", Models: []string{"m"}}}, nil, []batch.Queue{
		{Pool: "p", Tenant: "a", Weight: 1}, {Pool: "p", Tenant: "b", Weight: 2}, {Pool: "p", Tenant: "c", Weight: 3},
		{Pool: "p", Tenant: "d", Weight: 3},
	})
	s.SetWaiting("d", "m", 1<<40)
	st := s.Status(m.now)
	held := map[string]bool{}
	for _, q := range st.Queues {
		if q.Held {
			held[q.Tenant] = true
		}
		// Holding revokes nothing: every line in flight is still admitted.
		if q.Admitted != before[q.Tenant] {
			t.Errorf("queue %s: %d admitted, %d lines in flight", q.Tenant, q.Admitted, before[q.Tenant])
		}
	}
	for _, tenant := range []string{"a", "b", "c"} {
		if !held[tenant] {
			t.Errorf("queue %s is not held with a newcomer waiting: %+v", tenant, st.Queues)
		}
	}
	if held["d"] {
		t.Error("the newcomer is held")
	}
	if n := m.admitAll(); n != 0 {
		t.Fatalf("admitted %d lines with every slot busy", n)
	}
	// The next three freed slots, whoever frees them, go to the newcomer.
	from := len(m.admitted)
	for len(m.admitted) < from+3 {
		m.step()
	}
	for _, a := range m.admitted[from : from+3] {
		if a.Tenant != "d" {
			t.Errorf("a freed slot went to %s (held: %v), want the newcomer", a.Tenant, held[a.Tenant])
		}
	}
	// And in the long run the newcomer has its share.
	m.lines = map[string]int{}
	m.runUntil(m.now.Add(time.Hour))
	total := 0
	for _, n := range m.lines {
		total += n
	}
	if part := float64(m.lines["d"]) / float64(total); math.Abs(part-3.0/9)/(3.0/9) > 0.1 {
		t.Errorf("the newcomer has %.3f of the lines, want %.3f", part, 3.0/9)
	}
}

func TestEqualSharesDoNotFlap(t *testing.T) {
	s := New(Config{})
	m := newSim(t, s)
	m.capacity("m", "", 4)
	s.SetWaiting("x", "m", 1<<40)
	s.SetWaiting("y", "m", 1<<40)
	m.admitAll()
	for i := 0; i < 2000; i++ {
		m.step()
		for _, q := range s.Status(m.now).Queues {
			if q.Held {
				t.Fatalf("step %d: queue %s held at equal weights: %+v", i, q.Tenant, s.Status(m.now).Queues)
			}
		}
	}
	if d := m.lines["x"] - m.lines["y"]; d < -2 || d > 2 {
		t.Errorf("x ran %d lines, y %d", m.lines["x"], m.lines["y"])
	}
}

func TestHoldHysteresis(t *testing.T) {
	s := New(Config{HalfLife: time.Hour})
	s.SetCapacity("m", "", 10)
	s.SetWaiting("big", "m", 3)
	var big []Admission
	for range 3 {
		a, ok := s.Admit(t0)
		if !ok || a.Tenant != "big" {
			t.Fatalf("admit: %+v %v", a, ok)
		}
		big = append(big, a)
	}
	held := func() bool {
		for _, q := range s.Status(t0).Queues {
			if q.Tenant == "big" {
				return q.Held
			}
		}
		return false
	}
	s.SetWaiting("big", "m", 10)
	s.SetWaiting("small", "m", 10)
	// big at share 3, small at 0 (1 with one more line): 3 >= 1+1, held.
	if !held() {
		t.Fatal("big is not held three lines ahead")
	}
	s.Release(big[0], 0, true, t0)
	// big at 2: still held (2 >= 1+1).
	if !held() {
		t.Fatal("big is not held two lines ahead")
	}
	s.Release(big[1], 0, true, t0)
	// big at 1, small would be 1 after a line: released (1 <= 1).
	if held() {
		t.Fatal("big is still held one line ahead")
	}

	// Between the two thresholds a hold stays as it is: against a queue
	// of weight 2 (0.5 after one line), big is held from 1.5 and released
	// at 0.5, so at 1 it stays held on the way down.
	s.SetConfig(nil, nil, []batch.Queue{{Pool: "m", Tenant: "small", Weight: 2}})
	s.Release(big[2], 0, true, t0)
	s.SetWaiting("small", "m", 0)
	s.SetWaiting("big", "m", 0)
	s.SetWaiting("big", "m", 2)
	big = admitN(t, s, t0)
	s.SetWaiting("big", "m", 10)
	s.SetWaiting("small", "m", 10)
	if len(big) != 2 || !held() {
		t.Fatalf("big with %d lines against an idle queue of weight 2: held %v", len(big), held())
	}
	s.Release(big[0], 0, true, t0)
	if !held() {
		t.Fatal("big released from its hold above the release threshold")
	}
	s.Release(big[1], 0, true, t0)
	if held() {
		t.Fatal("big still held at the release threshold")
	}
}

func TestDecay(t *testing.T) {
	s := New(Config{HalfLife: 5 * time.Minute})
	m := newSim(t, s)
	m.capacity("m", "", 4)
	s.SetWaiting("busy", "m", 1<<40)
	m.runUntil(t0.Add(10 * time.Minute))
	s.SetWaiting("busy", "m", 0)
	for m.step() {
	}
	// Right away, the queue that ran a lot yields to one that did not.
	s.SetWaiting("busy", "m", 100)
	s.SetWaiting("idle", "m", 100)
	got := map[string]int{}
	var adm []Admission
	for {
		a, ok := s.Admit(m.now)
		if !ok {
			break
		}
		got[a.Tenant]++
		adm = append(adm, a)
	}
	if got["idle"] < 3 {
		t.Errorf("just after busy ran: idle got %d of 4 slots, want >= 3 (%v)", got["idle"], got)
	}
	for _, a := range adm {
		s.Release(a, 0, false, m.now)
	}
	// Twelve half-lives later the history has decayed: an even split.
	later := m.now.Add(time.Hour)
	s.SetWaiting("busy", "m", 100)
	s.SetWaiting("idle", "m", 100)
	got = map[string]int{}
	for {
		a, ok := s.Admit(later)
		if !ok {
			break
		}
		got[a.Tenant]++
	}
	if got["idle"] != 2 || got["busy"] != 2 {
		t.Errorf("an hour later: %v, want 2 each", got)
	}
}

func i64(v int64) *int64 { return &v }

func admitN(t *testing.T, s *Scheduler, now time.Time) []Admission {
	t.Helper()
	var out []Admission
	for {
		a, ok := s.Admit(now)
		if !ok {
			return out
		}
		out = append(out, a)
		if len(out) > 1000 {
			t.Fatal("admitted without end")
		}
	}
}

func count(as []Admission, f func(Admission) bool) int {
	n := 0
	for _, a := range as {
		if f(a) {
			n++
		}
	}
	return n
}

func TestCohortLendingAndBorrowing(t *testing.T) {
	s := New(Config{})
	s.SetConfig([]batch.Pool{
		{Name: "x", Models: []string{"mx"}, Cohort: "c", Quotas: []batch.Quota{{Flavor: "gpu", Lines: 4, LendingLimit: i64(2)}}},
		{Name: "y", Models: []string{"my"}, Cohort: "c", Quotas: []batch.Quota{{Flavor: "gpu", Lines: 2, BorrowingLimit: i64(3)}}},
	}, []batch.Cohort{{Name: "c"}}, nil)
	s.SetCapacity("mx", "gpu", 10)
	s.SetCapacity("my", "gpu", 10)
	if s.PoolOf("my") != "y" || s.PoolOf("other") != "other" {
		t.Fatalf("PoolOf: %q %q", s.PoolOf("my"), s.PoolOf("other"))
	}

	// y alone: its 2 lines, and 2 borrowed: x lends at most 2 (its
	// lending limit), under y's borrowing limit of 3.
	s.SetWaiting("t1", "my", 100)
	ys := admitN(t, s, t0)
	if len(ys) != 4 || count(ys, func(a Admission) bool { return a.Borrowed }) != 2 {
		t.Fatalf("y admitted %d lines, %d borrowed; want 4, 2 borrowed", len(ys), count(ys, func(a Admission) bool { return a.Borrowed }))
	}
	st := s.Status(t0)
	fx, fy := st.Pools[0].Flavors[0], st.Pools[1].Flavors[0]
	if fy.Borrowed != 2 || fy.InUse != 4 || fx.Lent != 2 || fx.Nominal != 4 {
		t.Errorf("status: x %+v, y %+v", fx, fy)
	}

	// x wants its quota: the 2 it does not lend at once, the rest only as
	// y's borrowed lines finish (nothing is cancelled).
	s.SetWaiting("t2", "mx", 100)
	xs := admitN(t, s, t0)
	if len(xs) != 2 || count(xs, func(a Admission) bool { return a.Pool == "x" && !a.Borrowed }) != 2 {
		t.Fatalf("x admitted %+v, want 2 of its own", xs)
	}
	var borrowed []Admission
	for _, a := range ys {
		if a.Borrowed {
			borrowed = append(borrowed, a)
		}
	}
	s.Release(borrowed[0], 0, true, t0)
	next := admitN(t, s, t0)
	if len(next) != 1 || next[0].Pool != "x" {
		t.Fatalf("after a borrowed line ended: %+v, want one line of x", next)
	}
	s.Release(borrowed[1], 0, true, t0)
	next = admitN(t, s, t0)
	if len(next) != 1 || next[0].Pool != "x" {
		t.Fatalf("after the second borrowed line ended: %+v, want one line of x", next)
	}
	// x at its nominal 4, y at its nominal 2: nothing left to lend.
	if next = admitN(t, s, t0); len(next) != 0 {
		t.Fatalf("admitted %+v beyond the cohort's quota", next)
	}
}

func TestBorrowingLimit(t *testing.T) {
	s := New(Config{})
	s.SetConfig([]batch.Pool{
		{Name: "x", Models: []string{"mx"}, Cohort: "c", Quotas: []batch.Quota{{Flavor: "", Lines: 6}}},
		{Name: "y", Models: []string{"my"}, Cohort: "c", Quotas: []batch.Quota{{Flavor: "", Lines: 1, BorrowingLimit: i64(1)}}},
		{Name: "z", Models: []string{"mz"}, Quotas: []batch.Quota{{Flavor: "", Lines: 1}}}, // no cohort: never borrows
	}, nil, nil)
	for _, m := range []string{"mx", "my", "mz"} {
		s.SetCapacity(m, "", 10)
	}
	s.SetWaiting("t", "my", 100)
	s.SetWaiting("t", "mz", 100)
	got := admitN(t, s, t0)
	if y := count(got, func(a Admission) bool { return a.Pool == "y" }); y != 2 {
		t.Errorf("y admitted %d, want 1 + borrowing limit 1", y)
	}
	if z := count(got, func(a Admission) bool { return a.Pool == "z" }); z != 1 {
		t.Errorf("z admitted %d, want its nominal 1", z)
	}
}

func TestBorrowingGoesToLowestDominantShare(t *testing.T) {
	s := New(Config{})
	s.SetConfig([]batch.Pool{
		{Name: "lender", Models: []string{"ml"}, Cohort: "c", Quotas: []batch.Quota{{Lines: 6}}},
		{Name: "p1", Models: []string{"m1"}, Cohort: "c", Quotas: []batch.Quota{{Lines: 1}}, Weight: 1},
		{Name: "p2", Models: []string{"m2"}, Cohort: "c", Quotas: []batch.Quota{{Lines: 1}}, Weight: 2},
	}, nil, nil)
	for _, m := range []string{"ml", "m1", "m2"} {
		s.SetCapacity(m, "", 20)
	}
	s.SetWaiting("t", "m1", 100)
	s.SetWaiting("t", "m2", 100)
	got := admitN(t, s, t0)
	b1 := count(got, func(a Admission) bool { return a.Pool == "p1" && a.Borrowed })
	b2 := count(got, func(a Admission) bool { return a.Pool == "p2" && a.Borrowed })
	if len(got) != 8 || b1 != 2 || b2 != 4 {
		t.Errorf("admitted %d: p1 borrowed %d, p2 %d; want 8, 2 and 4 (weights 1:2)", len(got), b1, b2)
	}
}

func TestCapacityBound(t *testing.T) {
	s := New(Config{})
	s.SetConfig([]batch.Pool{{Name: "p", Models: []string{"m", "n"}, Quotas: []batch.Quota{{Flavor: "gpu", Lines: 100}, {Flavor: "cpu"}}}}, nil, nil)
	m := newSim(t, s) // the sim fails the test if a model has more in flight than its capacity
	m.capacity("m", "gpu", 3)
	m.capacity("m", "cpu", 2)
	m.capacity("n", "gpu", 1)
	m.capacity("n", "other", 50) // a flavor the pool has no quota of
	rng := rand.New(rand.NewPCG(3, 4))
	m.dur = func(Admission) time.Duration { return time.Duration(rng.IntN(3000)+1) * time.Millisecond }
	s.SetWaiting("t1", "m", 1<<40)
	s.SetWaiting("t2", "n", 1<<40)
	if n := m.admitAll(); n != 6 {
		t.Fatalf("admitted %d, want 3+2+1", n)
	}
	for i := 0; i < 500; i++ {
		m.step()
	}
	// Capacity shrinks below what is in flight: nothing new until under it.
	m.capacity("m", "gpu", 1)
	for i := 0; i < 500; i++ {
		m.step()
	}
	if len(m.run) > 4 {
		t.Errorf("%d lines in flight after the capacity shrank to 1+2+1", len(m.run))
	}
	for _, ps := range s.Status(m.now).Pools {
		if ps.Name == "p" {
			for _, f := range ps.Flavors {
				if f.Flavor == "cpu" && f.Nominal != 2 {
					t.Errorf("cpu nominal %d, want the slots: 2", f.Nominal)
				}
			}
		}
	}
	// A model in no pool: an implicit pool whose quota is the slots.
	s.SetCapacity("solo", "", 2)
	s.SetWaiting("t3", "solo", 5)
	got := admitN(t, s, m.now)
	if len(got) != 2 || got[0].Pool != "solo" {
		t.Errorf("implicit pool admitted %+v", got)
	}
}

func TestTokenRate(t *testing.T) {
	s := New(Config{})
	s.SetConfig([]batch.Pool{{Name: "p", Models: []string{"m"}, Quotas: []batch.Quota{{TokensPerSecond: 100}}}}, nil, nil)
	m := newSim(t, s)
	m.capacity("m", "", 50)
	m.dur = func(Admission) time.Duration { return 200 * time.Millisecond }
	m.tokens = func(Admission) int64 { return 50 }
	s.SetWaiting("t", "m", 1<<40)
	// Token quota refills with time: admit on a 10ms tick too.
	end := t0.Add(2 * time.Minute)
	var admitted int64
	for m.now.Before(end) {
		admitted += int64(m.admitAll())
		tick := m.now.Add(10 * time.Millisecond)
		for len(m.run) > 0 && !m.run[0].end.After(tick) {
			m.now = m.run[0].end
			m.release(heap.Pop(&m.run).(line))
		}
		m.now = tick
		if len(m.run) > 3 {
			t.Fatalf("%d lines in flight: a rate of 100 tokens/s at 50 a line is 2 lines/s", len(m.run))
		}
	}
	secs := end.Sub(t0).Seconds()
	rate := float64(admitted*50) / secs
	t.Logf("token rate %.1f/s under a quota of 100/s (%d lines)", rate, admitted)
	if rate > 100*1.02+100/secs || rate < 90 {
		t.Errorf("token rate %.1f/s, want about 100/s", rate)
	}
	st := s.Status(m.now).Pools[0].Flavors[0]
	if st.TokensPerSecond != 100 || st.TokensRate < 80 || st.TokensRate > 110 {
		t.Errorf("status %+v", st)
	}
}

func TestReleaseUndispatchedAndTwice(t *testing.T) {
	s := New(Config{})
	s.SetCapacity("m", "", 1)
	s.SetWaiting("t", "m", 2)
	a, ok := s.Admit(t0)
	if !ok {
		t.Fatal("nothing admitted")
	}
	if _, ok := s.Admit(t0); ok {
		t.Fatal("admitted past the capacity")
	}
	s.Release(a, 0, false, t0)
	s.Release(a, 0, false, t0) // a second release must not free a second slot
	b, ok := s.Admit(t0)
	if !ok {
		t.Fatal("the slot was not freed")
	}
	s.SetWaiting("t", "m", 5)
	if _, ok := s.Admit(t0); ok {
		t.Fatal("a double release freed a slot")
	}
	s.Release(b, 10, true, t0)
	q := s.Status(t0).Queues[0]
	if q.Completed != 1 || q.Waiting != 5 || q.Admitted != 0 {
		t.Errorf("status %+v", q)
	}
	s.SetWaiting("t", "m", 0)
	if _, ok := s.Admit(t0); ok {
		t.Fatal("admitted without demand")
	}
}

func TestConfigMovesDemand(t *testing.T) {
	s := New(Config{})
	s.SetCapacity("m", "", 4)
	s.SetWaiting("t", "m", 3)
	a, _ := s.Admit(t0)
	if a.Pool != "m" {
		t.Fatalf("implicit pool %q", a.Pool)
	}
	s.SetConfig([]batch.Pool{{Name: "p", Models: []string{"m"}, Quotas: []batch.Quota{{Lines: 2}}}}, nil, []batch.Queue{{Pool: "p", Tenant: "t", Weight: 5}})
	got := admitN(t, s, t0)
	if len(got) != 2 || got[0].Pool != "p" {
		t.Fatalf("after the pool was configured: %+v", got)
	}
	s.Release(a, 0, true, t0) // the line of the implicit pool ends there
	for _, q := range s.Status(t0).Queues {
		if q.Pool == "p" && (q.Weight != 5 || q.Admitted != 2) {
			t.Errorf("queue %+v", q)
		}
		if q.Pool == "m" && q.Admitted != 0 {
			t.Errorf("queue %+v", q)
		}
	}
}

func BenchmarkAdmitRelease100Queues(b *testing.B) {
	s := New(Config{})
	qs := make([]batch.Queue, 100)
	for i := range qs {
		qs[i] = batch.Queue{Pool: "p", Tenant: fmt.Sprintf("t%d", i), Weight: float64(1 + i%3)}
	}
	s.SetConfig([]batch.Pool{{Name: "p", Models: []string{"m"}}}, nil, qs)
	s.SetCapacity("m", "", 64)
	for _, q := range qs {
		s.SetWaiting(q.Tenant, "m", 1<<50)
	}
	now := t0
	var inflight []Admission
	for {
		a, ok := s.Admit(now)
		if !ok {
			break
		}
		inflight = append(inflight, a)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Millisecond)
		s.Release(inflight[0], 100, true, now)
		inflight = inflight[1:]
		a, ok := s.Admit(now)
		if !ok {
			b.Fatal("nothing admitted")
		}
		inflight = append(inflight, a)
	}
}

func TestConcurrentUse(t *testing.T) {
	s := New(Config{})
	s.SetCapacity("m", "", 8)
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func(g int) {
			defer func() { done <- struct{}{} }()
			tenant := fmt.Sprintf("t%d", g)
			now := t0
			for i := 0; i < 500; i++ {
				now = now.Add(time.Millisecond)
				s.SetWaiting(tenant, "m", 10)
				if a, ok := s.Admit(now); ok {
					s.Release(a, 1, true, now)
				}
				_ = s.Status(now)
			}
		}(g)
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	var completed int64
	for _, q := range s.Status(t0).Queues {
		completed += q.Completed
		if q.Admitted != 0 {
			t.Errorf("queue %+v has lines in flight after every release", q)
		}
	}
	if completed == 0 {
		t.Error("nothing completed")
	}
}
