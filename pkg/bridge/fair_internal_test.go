package bridge

import (
	"context"
	"testing"
)

// Two tenants with queues take freed slots in turn; a waiter whose context
// ends leaves the queue and a later release skips it.
func TestFairSlotsAlternate(t *testing.T) {
	f := newFairSlots(2)
	for _, tenant := range []string{"a", "a"} {
		if _, ok, _ := f.tryAcquire(tenant, PriorityRealtime, 10); !ok {
			t.Fatal("a free slot was not taken")
		}
	}
	var order []string
	var ws []*slotWaiter
	for _, tenant := range []string{"a", "a", "a", "b", "b"} {
		w, ok, full := f.tryAcquire(tenant, PriorityRealtime, 10)
		if ok || full {
			t.Fatalf("tryAcquire with no free slot: ok %v full %v", ok, full)
		}
		ws = append(ws, w)
	}
	if _, _, full := f.tryAcquire("c", PriorityRealtime, 5); !full {
		t.Fatal("the queue bound was not applied")
	}
	// Withdraw a's second waiter.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if f.wait(ctx, ws[1]) {
		t.Fatal("a canceled waiter was granted")
	}
	holder := []string{"a", "a"}
	for len(holder) > 0 {
		f.release(holder[0], PriorityRealtime)
		holder = holder[1:]
		for _, w := range ws {
			select {
			case <-w.granted:
				if !w.done {
					t.Fatal("granted waiter not marked done")
				}
				order = append(order, w.tenant)
				holder = append(holder, w.tenant)
				w.granted = make(chan struct{}) // seen
			default:
			}
		}
	}
	// Slots were held a,a: b (holds 0) first, then a (1 vs b's 1, older), ...
	want := []string{"b", "a", "b", "a"}
	if len(order) != len(want) {
		t.Fatalf("grant order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("grant order %v, want %v", order, want)
		}
	}
	assertIdle(t, f)
}

func assertIdle(t *testing.T, f *fairSlots) {
	t.Helper()
	if f.running != 0 || f.queuedLocked() != 0 {
		t.Fatalf("not idle after all releases: %+v", f)
	}
	for p, c := range f.classes {
		if c.running != 0 || c.queued != 0 || len(c.held) != 0 || len(c.queues) != 0 {
			t.Fatalf("class %v not idle after all releases: %+v", Priority(p), c)
		}
	}
}

// Real-time waiters take freed slots before any batch waiter, whichever
// came first; batch waiters share among tenants by the batch slots each
// holds; each class has its own queue bound.
func TestFairSlotsPriority(t *testing.T) {
	f := newFairSlots(2)
	// Both slots run batch lines of tenant a.
	for range 2 {
		if _, ok, _ := f.tryAcquire("a", PriorityBatch, 10); !ok {
			t.Fatal("a free slot was not taken")
		}
	}
	type held struct {
		tenant string
		prio   Priority
	}
	queue := func(tenant string, p Priority) *slotWaiter {
		t.Helper()
		w, ok, full := f.tryAcquire(tenant, p, 3)
		if ok || full {
			t.Fatalf("tryAcquire with no free slot: ok %v full %v", ok, full)
		}
		return w
	}
	// Batch lines queued first, then real-time requests.
	ba := queue("a", PriorityBatch)
	bb := queue("b", PriorityBatch)
	bc := queue("a", PriorityBatch)
	if _, _, full := f.tryAcquire("c", PriorityBatch, 3); !full {
		t.Fatal("the batch queue bound was not applied")
	}
	rx := queue("x", PriorityRealtime) // the batch queue is full; real-time is not
	ry := queue("y", PriorityRealtime)
	if r, q := f.counts(PriorityBatch); r != 2 || q != 3 {
		t.Fatalf("batch counts: running %d queued %d, want 2 and 3", r, q)
	}
	if r, q := f.counts(PriorityRealtime); r != 0 || q != 2 {
		t.Fatalf("real-time counts: running %d queued %d, want 0 and 2", r, q)
	}
	granted := func(w *slotWaiter) bool {
		select {
		case <-w.granted:
			return true
		default:
			return false
		}
	}
	pending := []*slotWaiter{ba, bb, bc, rx, ry}
	next := func(what string, rel held) *slotWaiter {
		t.Helper()
		f.release(rel.tenant, rel.prio)
		var got *slotWaiter
		for i, w := range pending {
			if granted(w) {
				if got != nil {
					t.Fatalf("%s: one release granted two waiters", what)
				}
				got = w
				pending = append(pending[:i:i], pending[i+1:]...)
			}
		}
		if got == nil {
			t.Fatalf("%s: a release granted nobody", what)
		}
		return got
	}
	// One batch line ends: the oldest real-time waiter (x) gets its slot,
	// though three batch lines waited longer.
	if w := next("first release", held{"a", PriorityBatch}); w != rx {
		t.Fatalf("first freed slot went to %s/%v, want x's real-time request", w.tenant, w.prio)
	}
	if w := next("second release", held{"a", PriorityBatch}); w != ry {
		t.Fatalf("second freed slot went to %s/%v, want y's real-time request", w.tenant, w.prio)
	}
	// No real-time waiter is left: batch lines, fair among tenants. Neither
	// a nor b holds a batch slot now; a's line came first ...
	if w := next("third release", held{"x", PriorityRealtime}); w != ba {
		t.Fatalf("third freed slot went to %s/%v, want a's oldest batch line", w.tenant, w.prio)
	}
	// ... then b's, as b holds no batch slot while a holds one.
	if w := next("fourth release", held{"y", PriorityRealtime}); w != bb {
		t.Fatalf("fourth freed slot went to %s/%v, want b's batch line", w.tenant, w.prio)
	}
	if r, q := f.counts(PriorityBatch); r != 2 || q != 1 {
		t.Fatalf("batch counts: running %d queued %d, want 2 and 1", r, q)
	}
	// A real-time request arriving now waits, and wins the next slot.
	rz := queue("z", PriorityRealtime)
	pending = append(pending, rz)
	if w := next("fifth release", held{"a", PriorityBatch}); w != rz {
		t.Fatalf("fifth freed slot went to %s/%v, want z's real-time request", w.tenant, w.prio)
	}
	if w := next("sixth release", held{"b", PriorityBatch}); w != bc {
		t.Fatalf("sixth freed slot went to %s/%v, want a's last batch line", w.tenant, w.prio)
	}
	f.release("z", PriorityRealtime)
	f.release("a", PriorityBatch)
	assertIdle(t, f)
}
