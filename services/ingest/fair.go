package ingest

import (
	"context"
	"sync"
)

// fairQueue hands out a fixed number of worker slots fairly across
// tenants: a freed slot goes to a waiting tenant with the fewest slots in
// use, the tenant served longest ago first among equals; each tenant's
// waiters are served in arrival order. So one tenant's slow or huge files
// take at most the slots no other tenant is waiting for, and no tenant
// holds more than perTenant slots, so with perTenant below the slot count
// another tenant's file never waits for one of them to finish.
type fairQueue struct {
	mu      sync.Mutex
	free    int
	cap     int // slots one tenant may hold
	running map[string]int
	waiting map[string][]chan struct{}
	order   []string          // tenants with waiters, in the order they began waiting
	served  map[string]uint64 // when each tenant was last given a slot (seq)
	seq     uint64
}

func newFairQueue(slots, perTenant int) *fairQueue {
	return &fairQueue{free: slots, cap: perTenant, running: map[string]int{}, waiting: map[string][]chan struct{}{}, served: map[string]uint64{}}
}

// acquire waits for a slot for tenant; release gives it back.
func (f *fairQueue) acquire(ctx context.Context, tenant string) (release func(), err error) {
	ch := make(chan struct{})
	f.mu.Lock()
	if len(f.waiting[tenant]) == 0 {
		f.order = append(f.order, tenant)
	}
	f.waiting[tenant] = append(f.waiting[tenant], ch)
	f.dispatch()
	f.mu.Unlock()
	release = func() {
		f.mu.Lock()
		f.free++
		if f.running[tenant]--; f.running[tenant] == 0 {
			delete(f.running, tenant)
		}
		f.dispatch()
		f.mu.Unlock()
	}
	select {
	case <-ch:
		return release, nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		select {
		case <-ch: // granted meanwhile: give it back
			f.mu.Unlock()
			release()
			f.mu.Lock()
		default:
			f.remove(tenant, ch)
		}
		return nil, ctx.Err()
	}
}

// dispatch grants free slots; f.mu is held.
func (f *fairQueue) dispatch() {
	for f.free > 0 && len(f.order) > 0 {
		best := 0
		for i, t := range f.order {
			b := f.order[best]
			if f.running[t] < f.running[b] || f.running[t] == f.running[b] && f.served[t] < f.served[b] {
				best = i
			}
		}
		t := f.order[best]
		if f.running[t] >= f.cap {
			return // every waiting tenant holds its share
		}
		q := f.waiting[t]
		close(q[0])
		f.free--
		f.running[t]++
		f.seq++
		f.served[t] = f.seq
		f.order = append(f.order[:best], f.order[best+1:]...)
		if len(q) > 1 {
			f.waiting[t] = q[1:]
			f.order = append(f.order, t)
		} else {
			delete(f.waiting, t)
		}
	}
}

// remove drops a waiter that gave up; f.mu is held.
func (f *fairQueue) remove(tenant string, ch chan struct{}) {
	q := f.waiting[tenant]
	for i, c := range q {
		if c == ch {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) > 0 {
		f.waiting[tenant] = q
		return
	}
	delete(f.waiting, tenant)
	for i, t := range f.order {
		if t == tenant {
			f.order = append(f.order[:i], f.order[i+1:]...)
			break
		}
	}
}
