package catalog

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
)

func open(t *testing.T) *Store {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVersionsAndVerdicts(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	v1, err := s.AddVersion(ctx, "acme/tiny", "", "", Version{Source: Source{Type: events.ModelSourceUpload}})
	if err != nil {
		t.Fatal(err)
	}
	if v1.Version != 1 || v1.Status != StatusUploading || v1.Prefix != "models/acme%2Ftiny/v1/" {
		t.Fatalf("v1 = %+v", v1)
	}
	v2, err := s.AddVersion(ctx, "acme/tiny", events.ModelKindModel, "", Version{Status: StatusScanning})
	if err != nil || v2.Version != 2 {
		t.Fatalf("v2 = %+v, %v", v2, err)
	}
	if _, err := s.AddVersion(ctx, "acme/tiny", events.ModelKindAdapter, "base", Version{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("changing kind: %v, want ErrConflict", err)
	}
	if _, err := s.AddVersion(ctx, "bad..name", "", "", Version{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := s.AddVersion(ctx, "lora", events.ModelKindAdapter, "", Version{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("adapter without base: %v", err)
	}

	verdict := events.ModelVerdictV1{Name: "acme/tiny", Version: 2, Status: events.VerdictPublished, License: "apache-2.0", Parameters: 42,
		Files: []events.ModelFile{{Path: "model.safetensors", Size: 10, SHA256: "ab"}}, ScannedAt: time.Now()}
	got, err := s.ApplyVerdict(ctx, verdict)
	if err != nil || got.Status != StatusPublished || got.Parameters != 42 {
		t.Fatalf("verdict: %+v, %v", got, err)
	}
	// Redelivered verdicts change nothing; a final version is final.
	verdict.Status, verdict.Reasons = events.VerdictRejected, []Reason{{Code: "x", Message: "y"}}
	if got, err := s.ApplyVerdict(ctx, verdict); err != nil || got.Status != StatusPublished {
		t.Fatalf("second verdict: %+v, %v", got, err)
	}
	if _, err := s.UpdateVersion(ctx, "acme/tiny", 2, func(v *Version) error { return nil }); !errors.Is(err, ErrConflict) {
		t.Fatalf("update of a final version: %v", err)
	}
	e, err := s.Get(ctx, "acme/tiny")
	if err != nil || len(e.Versions) != 2 || e.Versions[0].Version != 1 {
		t.Fatalf("entry %+v, %v", e, err)
	}
	if v, ok := e.LatestPublished(); !ok || v.Version != 2 {
		t.Fatalf("latest published %+v", v)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

// Concurrent writers never lose each other's versions.
func TestConcurrentAddVersion(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.AddVersion(ctx, "m", "", "", Version{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	e, err := s.Get(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, v := range e.Versions {
		seen[v.Version] = true
	}
	if len(e.Versions) != 16 || len(seen) != 16 {
		t.Fatalf("%d versions, %d distinct, want 16", len(e.Versions), len(seen))
	}
}

func TestDeployAndRollback(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		v, err := s.AddVersion(ctx, "cat", "", "", Version{Status: StatusScanning})
		if err != nil {
			t.Fatal(err)
		}
		status := events.VerdictPublished
		var reasons []Reason
		if i == 3 {
			status, reasons = events.VerdictRejected, []Reason{{Code: "code_bearing_pickle", Message: "no"}}
		}
		if _, err := s.ApplyVerdict(ctx, events.ModelVerdictV1{Name: "cat", Version: v.Version, Status: status, Reasons: reasons}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Deploy(ctx, "served", "cat", 3); !errors.Is(err, ErrConflict) {
		t.Fatalf("deploying a rejected version: %v", err)
	}
	d, err := s.Deploy(ctx, "served", "cat", 1)
	if err != nil || d.Version != 1 {
		t.Fatalf("deploy v1: %+v %v", d, err)
	}
	if _, err := s.Rollback(ctx, "served"); !errors.Is(err, ErrConflict) {
		t.Fatalf("rollback without history: %v", err)
	}
	d, err = s.Deploy(ctx, "served", "cat", 0) // latest published
	if err != nil || d.Version != 2 || len(d.History) != 1 {
		t.Fatalf("deploy latest: %+v %v", d, err)
	}
	if err := s.Delete(ctx, "cat"); !errors.Is(err, ErrConflict) {
		t.Fatalf("deleting a deployed model: %v", err)
	}
	d, err = s.Rollback(ctx, "served")
	if err != nil || d.Version != 1 || len(d.History) != 0 {
		t.Fatalf("rollback: %+v %v", d, err)
	}
	got, err := s.Deployment(ctx, "served")
	if err != nil || got.Version != 1 {
		t.Fatalf("deployment: %+v %v", got, err)
	}
	if err := s.Undeploy(ctx, "served"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "cat"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rollback(ctx, "served"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("rollback of nothing: %v", err)
	}
}

// TestOwnedVersions: a tenant's model takes versions from that tenant only;
// neither another tenant nor the platform (an admin upload) can add one,
// and a tenant cannot add one to the platform's model.
func TestOwnedVersions(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	v, err := s.AddOwnedVersion(ctx, "acme", "acme/tiny", "", "", Version{})
	if err != nil || v.Version != 1 {
		t.Fatalf("first owned version: %+v, %v", v, err)
	}
	if e, err := s.Get(ctx, "acme/tiny"); err != nil || e.Tenant != "acme" {
		t.Fatalf("entry = %+v, %v; want tenant acme", e, err)
	}
	if v, err := s.AddOwnedVersion(ctx, "acme", "acme/tiny", "", "", Version{}); err != nil || v.Version != 2 {
		t.Fatalf("owner's second version: %+v, %v", v, err)
	}
	if _, err := s.AddOwnedVersion(ctx, "globex", "acme/tiny", "", "", Version{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("another tenant's version: %v, want ErrConflict", err)
	}
	if _, err := s.AddVersion(ctx, "acme/tiny", "", "", Version{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a platform version of a tenant's model: %v, want ErrConflict", err)
	}
	if _, err := s.AddVersion(ctx, "shared", "", "", Version{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddOwnedVersion(ctx, "acme", "shared", "", "", Version{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a tenant's version of the platform's model: %v, want ErrConflict", err)
	}
	if e, _ := s.Get(ctx, "acme/tiny"); len(e.Versions) != 2 {
		t.Fatalf("refused additions changed the entry: %+v", e.Versions)
	}
}
