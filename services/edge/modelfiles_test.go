package edge_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/services/edge"
)

func modelFilePath(name string, version int, p string) string {
	return "/admin/v1/model-files?" + url.Values{"name": {name}, "version": {strconv.Itoa(version)}, "path": {p}}.Encode()
}

func TestModelFilesPublishedOnly(t *testing.T) {
	m := startModelEdge(t)
	name := "acme/fetch-me"
	files := map[string][]byte{"model.safetensors": blob(3*testPart+17, 4), "sub/config.json": []byte(`{"a":1}`)}
	u := m.open(name, files, nil)
	m.sendAll(u, files)
	if r := m.admin("POST", "/admin/v1/uploads/"+u.ID+"/complete", nil); r.status != http.StatusAccepted {
		t.Fatalf("complete: %d %s", r.status, r.body)
	}

	// Scanning: nothing leaves the catalog yet.
	apiError(t, m.admin("GET", modelFilePath(name, u.Version, "model.safetensors"), nil), http.StatusConflict, "model_not_published")

	m.verdict(name, u.Version, events.VerdictPublished)
	for p, want := range files {
		r := m.admin("GET", modelFilePath(name, u.Version, p), nil)
		if r.status != http.StatusOK || !bytes.Equal(r.body, want) {
			t.Fatalf("%s: %d, %d bytes (want %d)", p, r.status, len(r.body), len(want))
		}
		if got := r.header.Get(edge.HeaderModelFileSHA256); got != sum(want) {
			t.Fatalf("%s: sha256 header %q, want %q", p, got, sum(want))
		}
		if ct, cl := r.header.Get("Content-Type"), r.header.Get("Content-Length"); ct != "application/octet-stream" || cl != strconv.Itoa(len(want)) {
			t.Fatalf("%s: Content-Type %q Content-Length %q", p, ct, cl)
		}
		h := m.admin("HEAD", modelFilePath(name, u.Version, p), nil)
		if h.status != http.StatusOK || len(h.body) != 0 || h.header.Get(edge.HeaderModelFileSHA256) != sum(want) ||
			h.header.Get("Content-Length") != strconv.Itoa(len(want)) {
			t.Fatalf("HEAD %s: %d %v %q", p, h.status, h.header, h.body)
		}
	}

	apiError(t, m.admin("GET", modelFilePath(name, u.Version, "other.bin"), nil), http.StatusNotFound, "not_found")
	apiError(t, m.admin("GET", modelFilePath(name, u.Version+1, "model.safetensors"), nil), http.StatusNotFound, "not_found")
	apiError(t, m.admin("GET", modelFilePath("acme/none", 1, "model.safetensors"), nil), http.StatusNotFound, "not_found")
	apiError(t, m.admin("GET", "/admin/v1/model-files?name="+url.QueryEscape(name)+"&version=1", nil), http.StatusBadRequest, "missing_required_parameter")
	apiError(t, m.admin("GET", modelFilePath(name, -1, "model.safetensors"), nil), http.StatusBadRequest, "invalid_request")
	if r := m.do("GET", modelFilePath(name, u.Version, "model.safetensors"), "wrong-key", nil, nil); r.status != http.StatusUnauthorized {
		t.Fatalf("without the admin key: %d %s", r.status, r.body)
	}

	// A stored object that no longer matches the scanned file is refused.
	e, err := m.cat.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := e.Find(u.Version)
	evil := bytes.Repeat([]byte{'x'}, len(files["sub/config.json"]))
	if _, err := m.objs.Put(context.Background(), v.Prefix+"sub/config.json", bytes.NewReader(evil), int64(len(evil)), ""); err != nil {
		t.Fatal(err)
	}
	apiError(t, m.admin("GET", modelFilePath(name, u.Version, "sub/config.json"), nil), http.StatusInternalServerError, "model_file_corrupt")
}

func TestModelFilesRejectedNeverHandedOut(t *testing.T) {
	m := startModelEdge(t)
	name := "acme/bad"
	v := m.uploaded(name)
	m.verdict(name, v, events.VerdictRejected, events.ModelReason{Code: "code_bearing_pickle", Message: "pickle opcodes", File: "model.safetensors"})
	body := apiError(t, m.admin("GET", modelFilePath(name, v, "model.safetensors"), nil), http.StatusConflict, "model_not_published")
	if msg, _ := body["message"].(string); !strings.Contains(msg, catalog.StatusRejected) {
		t.Fatalf("message %q does not say the version is rejected", msg)
	}
	if r := m.admin("HEAD", modelFilePath(name, v, "model.safetensors"), nil); r.status != http.StatusConflict {
		t.Fatalf("HEAD of a rejected file: %d", r.status)
	}
}
