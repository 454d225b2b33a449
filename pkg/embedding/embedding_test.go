package embedding

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
)

func TestDecode(t *testing.T) {
	want := []float32{0.5, -1.25, 3}
	b := make([]byte, 12)
	for i, f := range want {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	for _, raw := range []string{`"` + base64.StdEncoding.EncodeToString(b) + `"`, `[0.5,-1.25,3]`} {
		got, err := Decode([]byte(raw))
		if err != nil || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("Decode(%s) = %v, %v", raw, got, err)
		}
	}
	for _, bad := range []string{`"AAA="`, `"!!"`, `{}`} {
		if _, err := Decode([]byte(bad)); !errors.Is(err, ErrRejected) {
			t.Fatalf("Decode(%s) err = %v", bad, err)
		}
	}
}

// TestEmbedOnTheEmbeddingFamily: Embed, through NewClient, asks the
// model's workers on events.Embed, for the embeddings endpoint, and
// decodes their answer.
func TestEmbedOnTheEmbeddingFamily(t *testing.T) {
	srv := natstest.Server(t)
	wnc := natstest.Conn(t, srv, "worker")
	const model = "embed.small"
	vec := []float32{1, 2}
	raw := make([]byte, 8)
	for i, f := range vec {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
	}
	got := make(chan *bridge.Request, 1)
	ws, err := bridge.NewServer(wnc, bridge.ServerConfig{Model: model, WorkerID: "w1"},
		func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
			got <- req
			body, _ := json.Marshal(map[string]any{"data": []map[string]any{{"index": 0, "embedding": base64.StdEncoding.EncodeToString(raw)}}})
			_ = w.Body(ctx, http.StatusOK, "application/json", body)
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Shutdown(context.Background()) })

	tap := natstest.Conn(t, srv, "tap")
	subj, err := tap.SubscribeSync(events.Embed(model))
	if err != nil {
		t.Fatal(err)
	}
	if err := tap.Flush(); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(natstest.Conn(t, srv, "embedder"), bridge.ClientConfig{Family: bridge.FamilyInfer})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	vecs, err := Embed(ctx, c, Request{Model: model, Tenant: "acme", KeyID: "system:embedder", Inputs: []string{"hello"}})
	if err != nil || len(vecs) != 1 || len(vecs[0]) != 2 || vecs[0][0] != 1 || vecs[0][1] != 2 {
		t.Fatalf("Embed = %v, %v", vecs, err)
	}
	if _, err := subj.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no request on %s: %v", events.Embed(model), err)
	}
	r := <-got
	if r.Endpoint != events.EndpointEmbeddings || r.Tenant != "acme" {
		t.Fatalf("request at the worker: %+v", r)
	}
}
