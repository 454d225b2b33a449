package bridge

import (
	"context"
	"sync"
)

// Priority is a request's slot priority class: a freed slot goes to a
// waiting request of the highest class before any of a lower one.
type Priority int

const (
	// PriorityRealtime is every family but FamilyBatch: tenants' real-time
	// inference and internal embedding calls.
	PriorityRealtime Priority = iota
	// PriorityBatch is FamilyBatch: Batch API lines, which wait behind any
	// real-time request for a slot, so a real-time request arriving while
	// every slot runs a batch line waits for one line to finish at most.
	PriorityBatch
	numPriorities
)

// PriorityOf is the slot priority of requests of family f.
func PriorityOf(f Family) Priority {
	if f == FamilyBatch {
		return PriorityBatch
	}
	return PriorityRealtime
}

func (p Priority) String() string {
	if p == PriorityBatch {
		return "batch"
	}
	return "realtime"
}

// fairSlots are a server's handler slots. While slots are free a request
// takes one at once; when all are taken, requests wait, and a freed slot
// goes to a waiter of the highest priority class with waiters; within a
// class, to the waiting tenant that holds the fewest slots of that class
// (ties: the tenant whose oldest waiter came first), first come first
// served within a tenant. So a tenant that keeps many slots busy
// (slow-reading streams) cannot make another tenant's request wait behind
// its own queue, and batch lines never make a real-time request wait
// behind them, only for a running one to end.
type fairSlots struct {
	mu      sync.Mutex
	max     int
	running int
	seq     uint64
	classes [numPriorities]slotClass
}

// slotClass is the accounting of one priority class.
type slotClass struct {
	running int
	// held counts the slots each tenant holds; queues are its waiters.
	held   map[string]int
	queues map[string][]*slotWaiter
	queued int
}

type slotWaiter struct {
	tenant  string
	prio    Priority
	seq     uint64
	granted chan struct{}
	done    bool // granted or withdrawn
}

func newFairSlots(max int) *fairSlots {
	f := &fairSlots{max: max}
	for i := range f.classes {
		f.classes[i] = slotClass{held: make(map[string]int), queues: make(map[string][]*slotWaiter)}
	}
	return f
}

func (f *fairSlots) queuedLocked() int {
	n := 0
	for i := range f.classes {
		n += f.classes[i].queued
	}
	return n
}

// tryAcquire takes a slot for tenant at priority p when one is free and
// nobody waits. Otherwise it returns a waiter to pass to wait (full
// reports whether queuing would exceed maxQueue waiters of priority p;
// then nothing is queued). Each class has its own bound, so queued batch
// lines never make a real-time request be refused.
func (f *fairSlots) tryAcquire(tenant string, p Priority, maxQueue int) (w *slotWaiter, ok, full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &f.classes[p]
	if f.running < f.max && f.queuedLocked() == 0 {
		f.running++
		c.running++
		c.held[tenant]++
		return nil, true, false
	}
	if c.queued >= maxQueue {
		return nil, false, true
	}
	f.seq++
	w = &slotWaiter{tenant: tenant, prio: p, seq: f.seq, granted: make(chan struct{})}
	c.queues[tenant] = append(c.queues[tenant], w)
	c.queued++
	return w, false, false
}

// wait blocks until w is granted a slot (true) or ctx ends (false; w is
// withdrawn, or its slot handed on when it was granted meanwhile).
func (f *fairSlots) wait(ctx context.Context, w *slotWaiter) bool {
	select {
	case <-w.granted:
		return true
	case <-ctx.Done():
	}
	f.mu.Lock()
	if w.done { // granted as ctx ended: hand the slot on
		f.mu.Unlock()
		f.release(w.tenant, w.prio)
		return false
	}
	w.done = true
	c := &f.classes[w.prio]
	q := c.queues[w.tenant]
	for i, x := range q {
		if x == w {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(c.queues, w.tenant)
	} else {
		c.queues[w.tenant] = q
	}
	c.queued--
	f.mu.Unlock()
	return false
}

// release frees the slot tenant held at priority p and grants it to the
// fairest waiter of the highest class with waiters.
func (f *fairSlots) release(tenant string, p Priority) {
	f.mu.Lock()
	defer f.mu.Unlock()
	from := &f.classes[p]
	from.running--
	if from.held[tenant]--; from.held[tenant] <= 0 {
		delete(from.held, tenant)
	}
	for i := range f.classes {
		c := &f.classes[i]
		var next string
		var best *slotWaiter
		for t, q := range c.queues {
			w := q[0]
			if best == nil || c.held[t] < c.held[next] || (c.held[t] == c.held[next] && w.seq < best.seq) {
				next, best = t, w
			}
		}
		if best == nil {
			continue
		}
		if q := c.queues[next][1:]; len(q) == 0 {
			delete(c.queues, next)
		} else {
			c.queues[next] = q
		}
		c.queued--
		c.running++
		c.held[next]++
		best.done = true
		close(best.granted)
		return
	}
	f.running--
}

// waiting is the number of queued requests.
func (f *fairSlots) waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queuedLocked()
}

// counts returns the slots held and the requests queued at priority p.
func (f *fairSlots) counts(p Priority) (running, queued int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.classes[p].running, f.classes[p].queued
}
