package bridge_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
)

// Tenant A fills every slot with slow streams and queues more; tenant B's
// request, queued after A's, is served as soon as a slot frees, before A's
// queued ones. Asserted by the order in which requests start.
func TestFairSlotsAcrossTenants(t *testing.T) {
	b := newBus(t)
	stop := b.stop
	started := make(chan string, 16)
	var mu sync.Mutex
	release := map[string]chan struct{}{}
	gate := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if release[id] == nil {
			release[id] = make(chan struct{})
		}
		return release[id]
	}
	srv, _ := b.server(bridge.ServerConfig{WorkerID: "w1", MaxConcurrency: 2}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		started <- req.ID
		select {
		case <-gate(req.ID):
		case <-ctx.Done():
			return
		case <-stop:
			return
		}
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte("ok"))
	})
	c := b.client(bridge.ClientConfig{})
	ctx := testCtx(t)
	errs := make(chan error, 8)
	send := func(tenant, id string) {
		r := newReq("{}")
		r.Tenant, r.ID = tenant, id
		go func() {
			_, err := c.Do(ctx, r, func([]byte) error { return nil })
			errs <- err
		}()
	}
	send("a", "a1")
	send("a", "a2")
	first := map[string]bool{recv(t, started, "a's first stream"): true, recv(t, started, "a's second stream"): true}
	if !first["a1"] || !first["a2"] {
		t.Fatalf("started %v, want a1 and a2", first)
	}
	send("a", "a3")
	eventually(t, 10*time.Second, func() bool { return srv.Waiting() == 1 }, "a3 queued")
	send("a", "a4")
	eventually(t, 10*time.Second, func() bool { return srv.Waiting() == 2 }, "a4 queued")
	send("b", "b1")
	eventually(t, 10*time.Second, func() bool { return srv.Waiting() == 3 }, "b1 queued")

	close(gate("a1"))
	if got := recv(t, started, "the next request"); got != "b1" {
		t.Fatalf("after a slot freed, %s started; want b1 (tenant b holds no slot, a holds 2)", got)
	}
	close(gate("b1"))
	if got := recv(t, started, "the next request"); got != "a3" {
		t.Fatalf("after b1, %s started; want a3 (a's queue in order)", got)
	}
	close(gate("a2"))
	if got := recv(t, started, "the next request"); got != "a4" {
		t.Fatalf("then %s started; want a4", got)
	}
	close(gate("a3"))
	close(gate("a4"))
	for range 5 {
		if err := recv(t, errs, "the requests to finish"); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func() bool { return srv.Waiting() == 0 && srv.Running() == 0 }, "the server to be idle")
}

// Every slot runs a batch line and more lines wait; a real-time request
// queued after them runs as soon as one line ends, before any waiting
// line, and the remaining lines follow. Asserted by the order in which
// requests start.
func TestRealtimeWinsSlotsOverBatch(t *testing.T) {
	b := newBus(t)
	stop := b.stop
	started := make(chan string, 16)
	var mu sync.Mutex
	release := map[string]chan struct{}{}
	gate := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if release[id] == nil {
			release[id] = make(chan struct{})
		}
		return release[id]
	}
	families := make(chan bridge.Family, 16)
	srv, _ := b.server(bridge.ServerConfig{WorkerID: "w1", MaxConcurrency: 2}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		families <- req.Family
		started <- req.ID
		select {
		case <-gate(req.ID):
		case <-ctx.Done():
			return
		case <-stop:
			return
		}
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte("ok"))
	})
	edge := b.client(bridge.ClientConfig{})
	batch := b.client(bridge.ClientConfig{Family: bridge.FamilyBatch})
	ctx := testCtx(t)
	errs := make(chan error, 8)
	send := func(c *bridge.Client, tenant, id string) {
		r := newReq("{}")
		r.Tenant, r.ID = tenant, id
		go func() {
			_, err := c.Do(ctx, r, func([]byte) error { return nil })
			errs <- err
		}()
	}
	slots := func(p bridge.Priority) [2]int64 {
		r, w := srv.Slots(p)
		return [2]int64{r, w}
	}
	send(batch, "a", "line1")
	send(batch, "a", "line2")
	first := map[string]bool{recv(t, started, "the first line"): true, recv(t, started, "the second line"): true}
	if !first["line1"] || !first["line2"] {
		t.Fatalf("started %v, want line1 and line2", first)
	}
	for range 2 {
		if f := recv(t, families, "a line's family"); f != bridge.FamilyBatch {
			t.Fatalf("a batch line came as family %v", f)
		}
	}
	send(batch, "a", "line3")
	eventually(t, 10*time.Second, func() bool { return slots(bridge.PriorityBatch) == [2]int64{2, 1} }, "line3 queued")
	send(batch, "b", "line4")
	eventually(t, 10*time.Second, func() bool { return slots(bridge.PriorityBatch) == [2]int64{2, 2} }, "line4 queued")
	send(edge, "c", "rt1")
	eventually(t, 10*time.Second, func() bool { return slots(bridge.PriorityRealtime) == [2]int64{0, 1} }, "rt1 queued")
	if srv.Waiting() != 3 {
		t.Fatalf("Waiting() = %d, want 3", srv.Waiting())
	}

	close(gate("line1"))
	if got := recv(t, started, "the next request"); got != "rt1" {
		t.Fatalf("after a line ended, %s started; want the real-time request rt1", got)
	}
	if f := recv(t, families, "rt1's family"); f != bridge.FamilyInfer {
		t.Fatalf("rt1 came as family %v", f)
	}
	if got := slots(bridge.PriorityRealtime); got != [2]int64{1, 0} {
		t.Fatalf("real-time slots %v, want 1 running and none waiting", got)
	}
	close(gate("rt1"))
	if got := recv(t, started, "the next request"); got != "line4" {
		t.Fatalf("after rt1, %s started; want line4 (b holds no batch slot, a holds one)", got)
	}
	close(gate("line2"))
	if got := recv(t, started, "the next request"); got != "line3" {
		t.Fatalf("then %s started; want line3", got)
	}
	close(gate("line3"))
	close(gate("line4"))
	for range 5 {
		if err := recv(t, errs, "the requests to finish"); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func() bool { return srv.Waiting() == 0 && srv.Running() == 0 }, "the server to be idle")
}
