package supervisor

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
)

// addModelVersion stores a model version's files and publishes it.
func (w *adapterWorld) addModelVersion(t *testing.T, name, weights string) catalog.Version {
	t.Helper()
	ctx := testCtx(t)
	v, err := w.cat.AddVersion(ctx, name, events.ModelKindModel, "", catalog.Version{Status: catalog.StatusScanning, Source: catalog.Source{Type: events.ModelSourceUpload}})
	if err != nil {
		t.Fatal(err)
	}
	var files []catalog.File
	for p, body := range map[string]string{"model.safetensors": weights, "config.json": `{"hidden_size":8}`} {
		info, err := w.objects.Put(ctx, v.Prefix+p, strings.NewReader(body), int64(len(body)), "")
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, catalog.File{Path: p, Size: info.Size, SHA256: info.SHA256})
	}
	v, err = w.cat.ApplyVerdict(ctx, events.ModelVerdictV1{Name: name, Version: v.Version, Status: events.VerdictPublished, Files: files, License: "mit", ScannedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitLink waits until the served model's current link shows weights.
func (w *adapterWorld) waitLink(t *testing.T, model, weights, status string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := os.ReadFile(filepath.Join(w.sup.CurrentLink(model), "model.safetensors"))
		if err == nil && string(got) == weights && w.sup.DeploymentStatus()[model] == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: current link holds %q (%v), status %q; want %q, %q\nlogs:\n%s", model, got, err, w.sup.DeploymentStatus()[model], weights, status, w.h.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The deployed version of a served model is materialised and linked as
// current; a new deployment and a rollback move the link.
func TestDeploymentsAreMaterialised(t *testing.T) {
	w := newAdapterWorld(t)
	ctx := testCtx(t)
	w.addModelVersion(t, "acme/tiny", "weights-one")
	w.addModelVersion(t, "acme/tiny", "weights-two")

	if _, err := w.cat.Deploy(ctx, "base", "acme/tiny", 1); err != nil {
		t.Fatal(err)
	}
	w.waitLink(t, "base", "weights-one", "ready acme/tiny v1")
	if _, err := w.cat.Deploy(ctx, "base", "acme/tiny", 2); err != nil {
		t.Fatal(err)
	}
	w.waitLink(t, "base", "weights-two", "ready acme/tiny v2")
	if _, err := w.cat.Rollback(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	w.waitLink(t, "base", "weights-one", "ready acme/tiny v1")
	target, err := os.Readlink(w.sup.CurrentLink("base"))
	if err != nil || target != filepath.Join(w.models, url.PathEscape("acme/tiny"), "v1") {
		t.Fatalf("current -> %q, %v", target, err)
	}

	// A model this supervisor does not run is left alone.
	if _, err := w.cat.Deploy(ctx, "elsewhere", "acme/tiny", 2); err != nil {
		t.Fatal(err)
	}
	if err := w.cat.Undeploy(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(w.sup.DeploymentStatus()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("statuses after undeploy: %v", w.sup.DeploymentStatus())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Lstat(w.sup.CurrentLink("elsewhere")); !os.IsNotExist(err) {
		t.Fatalf("a link was made for a model not served here: %v", err)
	}
}
