package ingest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// acquireAsync sends tenant on got once it holds a slot (never released).
func acquireAsync(f *fairQueue, ctx context.Context, tenant string, got chan<- string) {
	go func() {
		release, err := f.acquire(ctx, tenant)
		if err != nil {
			got <- "cancelled:" + tenant
			return
		}
		got <- tenant
		_ = release
	}()
}

// A freed slot goes to the tenant with the fewest slots, the one served
// longest ago among equals; a tenant never holds more than its share; a
// waiter that gives up leaves the queue.
func TestFairQueue(t *testing.T) {
	f := newFairQueue(2, 1)
	ctx := context.Background()
	relA, err := f.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 8)
	// a's second file waits: a holds its share (1) although a slot is free
	cctx, cancel := context.WithCancel(ctx)
	acquireAsync(f, cctx, "a", got)
	waitWaiting(t, f, "a", 1)
	relB, err := f.acquire(ctx, "b") // b takes the free slot at once
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if g := <-got; g != "cancelled:a" {
		t.Fatalf("got %s", g)
	}
	waitWaiting(t, f, "a", 0)

	// a, then c queue behind the two busy slots: a's release lets c in
	// (never served, before a, served just now), b's release lets a in
	acquireAsync(f, ctx, "a", got)
	waitWaiting(t, f, "a", 1)
	acquireAsync(f, ctx, "c", got)
	waitWaiting(t, f, "c", 1)
	relA()
	if g := <-got; g != "c" {
		t.Fatalf("first freed slot went to %s, want c", g)
	}
	relB()
	if g := <-got; g != "a" {
		t.Fatalf("second freed slot went to %s, want a", g)
	}
	if _, err := f.acquire(canceled(), "d"); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a cancelled context = %v", err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// waitWaiting polls until tenant has n waiters.
func waitWaiting(t *testing.T, f *fairQueue, tenant string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		k := len(f.waiting[tenant])
		f.mu.Unlock()
		if k == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant %s has %d waiters, want %d", tenant, k, n)
		}
		time.Sleep(time.Millisecond)
	}
}
