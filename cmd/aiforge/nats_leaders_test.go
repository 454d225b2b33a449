package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

func TestNatsLeadersReadsJsz(t *testing.T) {
	info := server.JSInfo{
		Meta: &server.MetaClusterInfo{Leader: "nats-2", Replicas: []*server.PeerInfo{
			{Name: "nats-1", Current: true}, {Name: "nats-3", Offline: true},
		}},
		AccountDetails: []*server.AccountDetail{{Name: "A", Streams: []server.StreamDetail{
			{Name: "USAGE", Cluster: &server.ClusterInfo{Leader: "nats-1", Replicas: []*server.PeerInfo{
				{Name: "nats-2", Current: true}, {Name: "nats-3"},
			}}},
			{Name: "DOCS", Cluster: &server.ClusterInfo{}},
		}}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/jsz" || r.URL.Query().Get("streams") != "true" || r.URL.Query().Get("accounts") != "true" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(info)
	}))
	defer srv.Close()
	got, err := fetchJsz(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	lines := leaderLines(got, []string{"USAGE", "DOCS", "BATCH"})
	want := []string{"meta nats-2 nats-1:current nats-3:offline", "USAGE nats-1 nats-2:current nats-3:lagging", "DOCS -", "BATCH ?"}
	if !slices.Equal(lines, want) {
		t.Fatalf("lines = %q, want %q", lines, want)
	}
	if _, err := fetchJsz(context.Background(), srv.URL+"/nothing"); err == nil {
		t.Fatal("a 404 from /jsz is not an error")
	}
	if _, err := fetchJsz(context.Background(), "file:///etc"); err == nil {
		t.Fatal("a file URL is accepted")
	}
}
