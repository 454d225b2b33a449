package bridge

import (
	"context"
	"sync"
)

// fairSlots are a server's handler slots. While slots are free a request
// takes one at once; when all are taken, requests wait, and a freed slot
// goes to the waiting tenant that holds the fewest slots (ties: the tenant
// whose oldest waiter came first), first come first served within a
// tenant. So a tenant that keeps many slots busy (slow-reading streams)
// cannot make another tenant's request wait behind its own queue.
type fairSlots struct {
	mu      sync.Mutex
	max     int
	running int
	seq     uint64
	// held counts the slots each tenant holds; queues are its waiters.
	held   map[string]int
	queues map[string][]*slotWaiter
	queued int
}

type slotWaiter struct {
	tenant  string
	seq     uint64
	granted chan struct{}
	done    bool // granted or withdrawn
}

func newFairSlots(max int) *fairSlots {
	return &fairSlots{max: max, held: make(map[string]int), queues: make(map[string][]*slotWaiter)}
}

// tryAcquire takes a slot for tenant when one is free and nobody waits.
// Otherwise it returns a waiter to pass to wait (full reports whether
// queuing would exceed maxQueue; then nothing is queued).
func (f *fairSlots) tryAcquire(tenant string, maxQueue int) (w *slotWaiter, ok, full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running < f.max && f.queued == 0 {
		f.running++
		f.held[tenant]++
		return nil, true, false
	}
	if f.queued >= maxQueue {
		return nil, false, true
	}
	f.seq++
	w = &slotWaiter{tenant: tenant, seq: f.seq, granted: make(chan struct{})}
	f.queues[tenant] = append(f.queues[tenant], w)
	f.queued++
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
		f.release(w.tenant)
		return false
	}
	w.done = true
	q := f.queues[w.tenant]
	for i, x := range q {
		if x == w {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(f.queues, w.tenant)
	} else {
		f.queues[w.tenant] = q
	}
	f.queued--
	f.mu.Unlock()
	return false
}

// release frees tenant's slot and grants it to the fairest waiter.
func (f *fairSlots) release(tenant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held[tenant]--; f.held[tenant] <= 0 {
		delete(f.held, tenant)
	}
	var next string
	var best *slotWaiter
	for t, q := range f.queues {
		w := q[0]
		if best == nil || f.held[t] < f.held[next] || (f.held[t] == f.held[next] && w.seq < best.seq) {
			next, best = t, w
		}
	}
	if best == nil {
		f.running--
		return
	}
	if q := f.queues[next][1:]; len(q) == 0 {
		delete(f.queues, next)
	} else {
		f.queues[next] = q
	}
	f.queued--
	f.held[next]++
	best.done = true
	close(best.granted)
}

// waiting is the number of queued requests.
func (f *fairSlots) waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queued
}
