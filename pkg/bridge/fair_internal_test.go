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
		if _, ok, _ := f.tryAcquire(tenant, 10); !ok {
			t.Fatal("a free slot was not taken")
		}
	}
	var order []string
	var ws []*slotWaiter
	for _, tenant := range []string{"a", "a", "a", "b", "b"} {
		w, ok, full := f.tryAcquire(tenant, 10)
		if ok || full {
			t.Fatalf("tryAcquire with no free slot: ok %v full %v", ok, full)
		}
		ws = append(ws, w)
	}
	if _, _, full := f.tryAcquire("c", 5); !full {
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
		f.release(holder[0])
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
	if f.running != 0 || f.queued != 0 || len(f.held) != 0 || len(f.queues) != 0 {
		t.Fatalf("not idle after all releases: %+v", f)
	}
}
