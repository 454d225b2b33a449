package edge_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
)

// verdict records the guardian's verdict directly in the catalog.
func (m *modelEdge) verdict(name string, version int, status string, reasons ...events.ModelReason) {
	m.t.Helper()
	_, err := m.cat.ApplyVerdict(context.Background(), events.ModelVerdictV1{
		Name: name, Version: version, Status: status, Reasons: reasons, License: "apache-2.0",
		Parameters: 1234, Format: "safetensors", ScannedAt: time.Now().UTC(),
	})
	if err != nil {
		m.t.Fatal(err)
	}
}

// uploaded runs a whole one-file upload of name and returns its version.
func (m *modelEdge) uploaded(name string) int {
	m.t.Helper()
	files := map[string][]byte{"model.safetensors": blob(100, 9)}
	u := m.open(name, files, nil)
	m.sendAll(u, files)
	if r := m.admin("POST", "/admin/v1/uploads/"+u.ID+"/complete", nil); r.status != http.StatusAccepted {
		m.t.Fatalf("complete: %d %s", r.status, r.body)
	}
	return u.Version
}

func TestCatalogAPIShape(t *testing.T) {
	m := startModelEdge(t)
	name := "acme/chat-7b"
	v1 := m.uploaded(name)
	v2 := m.uploaded(name)
	m.verdict(name, v1, events.VerdictPublished)
	m.verdict(name, v2, events.VerdictRejected, events.ModelReason{Code: "code_bearing_pickle", Message: "pickle opcodes", File: "x.bin"})
	m.open(name, map[string][]byte{"a": {1}}, nil) // v3 still uploading

	r := m.admin("GET", "/admin/v1/catalog/"+name, nil)
	if r.status != http.StatusOK {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "kind", "versions"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("entry lacks %q: %s", k, r.body)
		}
	}
	var versions []map[string]json.RawMessage
	if err := json.Unmarshal(raw["versions"], &versions); err != nil || len(versions) != 3 {
		t.Fatalf("versions %s: %v", raw["versions"], err)
	}
	wantStatus := []string{"published", "rejected", "uploading"}
	for i, v := range versions {
		for _, k := range []string{"version", "status", "reasons", "files", "parameters"} {
			if _, ok := v[k]; !ok {
				t.Fatalf("version %d lacks %q", i+1, k)
			}
		}
		if string(v["reasons"]) == "null" || string(v["files"]) == "null" {
			t.Fatalf("version %d has null lists: %s", i+1, r.body)
		}
		var n int
		var st string
		_ = json.Unmarshal(v["version"], &n)
		_ = json.Unmarshal(v["status"], &st)
		if n != i+1 || st != wantStatus[i] {
			t.Fatalf("version %d: number %d status %q", i+1, n, st)
		}
	}
	var lic string
	var params int64
	_ = json.Unmarshal(versions[0]["license"], &lic)
	_ = json.Unmarshal(versions[0]["parameters"], &params)
	if lic != "apache-2.0" || params != 1234 {
		t.Fatalf("v1 license %q parameters %d", lic, params)
	}
	var reasons []map[string]string
	_ = json.Unmarshal(versions[1]["reasons"], &reasons)
	if len(reasons) != 1 || reasons[0]["code"] != "code_bearing_pickle" || reasons[0]["file"] != "x.bin" || reasons[0]["message"] == "" {
		t.Fatalf("v2 reasons %+v", reasons)
	}
	var files []map[string]any
	_ = json.Unmarshal(versions[0]["files"], &files)
	if len(files) != 1 || files[0]["path"] != "model.safetensors" || files[0]["sha256"] != sum(blob(100, 9)) || files[0]["size"] != float64(100) {
		t.Fatalf("v1 files %+v", files)
	}

	r = m.admin("GET", "/admin/v1/catalog", nil)
	var list struct {
		Object string          `json:"object"`
		Data   []catalog.Entry `json:"data"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || list.Object != "list" || len(list.Data) != 1 || list.Data[0].Name != name {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	apiError(t, m.admin("GET", "/admin/v1/catalog/acme/nope", nil), http.StatusNotFound, "not_found")
	apiError(t, m.admin("DELETE", "/admin/v1/catalog/acme/nope", nil), http.StatusNotFound, "not_found")

	if r := m.admin("DELETE", "/admin/v1/catalog/"+name, nil); r.status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	apiError(t, m.admin("GET", "/admin/v1/catalog/"+name, nil), http.StatusNotFound, "not_found")
	if left := m.keys("models/"); len(left) != 0 {
		t.Fatalf("files left after delete: %v", left)
	}
}

func TestDeployAndRollback(t *testing.T) {
	m := startModelEdge(t)
	name := "acme/chat"
	v1, v2 := m.uploaded(name), m.uploaded(name)
	v3 := m.uploaded(name)
	m.verdict(name, v1, events.VerdictPublished)
	m.verdict(name, v2, events.VerdictPublished)

	type dep struct {
		Model   string `json:"model"`
		Catalog string `json:"catalog"`
		Version int    `json:"version"`
	}
	deploy := func(body map[string]any) dep {
		t.Helper()
		r := m.admin("POST", "/admin/v1/deployments", body)
		if r.status != http.StatusOK {
			t.Fatalf("deploy %v: %d %s", body, r.status, r.body)
		}
		var d dep
		_ = json.Unmarshal(r.body, &d)
		return d
	}
	if d := deploy(map[string]any{"model": "chat", "catalog": name, "version": v1}); d.Version != v1 || d.Catalog != name {
		t.Fatalf("deployed %+v", d)
	}
	// Version 0 is the latest published: v2 (v3 is still scanning).
	if d := deploy(map[string]any{"model": "chat", "catalog": name}); d.Version != v2 {
		t.Fatalf("latest deployed %+v", d)
	}
	apiError(t, m.admin("POST", "/admin/v1/deployments", map[string]any{"model": "chat", "catalog": name, "version": v3}), http.StatusConflict, "conflict")
	apiError(t, m.admin("POST", "/admin/v1/deployments", map[string]any{"model": "chat", "catalog": name, "version": 99}), http.StatusNotFound, "not_found")
	apiError(t, m.admin("POST", "/admin/v1/deployments", map[string]any{"model": "chat", "catalog": "acme/none"}), http.StatusNotFound, "not_found")
	apiError(t, m.admin("POST", "/admin/v1/deployments", map[string]any{"catalog": name}), http.StatusBadRequest, "missing_required_parameter")

	r := m.admin("GET", "/admin/v1/deployments/chat", nil)
	var got dep
	if err := json.Unmarshal(r.body, &got); err != nil || got.Version != v2 {
		t.Fatalf("get deployment: %d %s", r.status, r.body)
	}
	r = m.admin("POST", "/admin/v1/deployments/rollback", map[string]string{"model": "chat"})
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != http.StatusOK || got.Version != v1 {
		t.Fatalf("rollback: %d %s", r.status, r.body)
	}
	apiError(t, m.admin("POST", "/admin/v1/deployments/rollback", map[string]string{"model": "chat"}), http.StatusConflict, "conflict")
	apiError(t, m.admin("POST", "/admin/v1/deployments/rollback", map[string]string{"model": "none"}), http.StatusNotFound, "not_found")

	r = m.admin("GET", "/admin/v1/deployments", nil)
	var list struct {
		Object string `json:"object"`
		Data   []dep  `json:"data"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || list.Object != "list" || len(list.Data) != 1 || list.Data[0].Version != v1 {
		t.Fatalf("list deployments: %d %s", r.status, r.body)
	}
	// A deployed entry cannot be deleted.
	apiError(t, m.admin("DELETE", "/admin/v1/catalog/"+name, nil), http.StatusConflict, "conflict")
	if r := m.admin("DELETE", "/admin/v1/deployments/chat", nil); r.status != http.StatusOK {
		t.Fatalf("undeploy: %d %s", r.status, r.body)
	}
	apiError(t, m.admin("GET", "/admin/v1/deployments/chat", nil), http.StatusNotFound, "not_found")
	apiError(t, m.admin("DELETE", "/admin/v1/deployments/chat", nil), http.StatusNotFound, "not_found")
	if r := m.admin("DELETE", "/admin/v1/catalog/"+name, nil); r.status != http.StatusOK {
		t.Fatalf("delete after undeploy: %d %s", r.status, r.body)
	}
}

func TestRequestPull(t *testing.T) {
	m := startModelEdge(t)
	sub, err := m.nc.SubscribeSync(events.Subject(events.TypeModelPullRequestedV1, "acme/small"))
	if err != nil {
		t.Fatal(err)
	}
	r := m.admin("POST", "/admin/v1/catalog/pulls", map[string]any{"repo": "acme/small"})
	if r.status != http.StatusAccepted {
		t.Fatalf("pull: %d %s", r.status, r.body)
	}
	ans := r.json(t)
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ev events.ModelPullRequestedV1
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.PullID != ans["pull_id"] || ev.Name != "acme/small" || ev.Repo != "acme/small" || ev.Revision != "main" || ev.Kind != events.ModelKindModel {
		t.Fatalf("event %+v answer %v", ev, ans)
	}
	// The pull's record is there before the guardian takes it up.
	pr := m.admin("GET", "/admin/v1/pulls/"+ev.PullID, nil)
	if pr.status != http.StatusOK {
		t.Fatalf("pull record: %d %s", pr.status, pr.body)
	}
	if rec := pr.json(t); rec["status"] != "requested" || rec["repo"] != "acme/small" || rec["name"] != "acme/small" {
		t.Fatalf("pull record %v", rec)
	}
	if r := m.admin("GET", "/admin/v1/pulls/pull_missing", nil); r.status != http.StatusNotFound {
		t.Fatalf("missing pull: %d %s", r.status, r.body)
	}
	for _, bad := range []map[string]any{
		{"repo": "not-a-repo"},
		{"repo": "a/b/c"},
		{"repo": "acme/x", "revision": "../x"},
		{"repo": "acme/x", "token": "hf_secret"},
		{"repo": "acme/x", "kind": "adapter"},
		{"repo": "oci://ghcr.io/acme/lora"},
		{"repo": "oci://ghcr.io/acme/lora", "revision": "sha256:abc"},
		{"repo": "oci://ghcr.io/Acme/lora", "revision": "v1"},
		{"repo": "oci://ghcr.io/acme/lora:v1", "revision": "v2"},
		{"repo": "oci://ghcr.io/acme/../lora", "revision": "v1"},
		{"repo": "oci://user:pw@ghcr.io/acme/lora", "revision": "v1"},
	} {
		r := m.admin("POST", "/admin/v1/catalog/pulls", bad)
		if r.status != http.StatusBadRequest {
			t.Fatalf("pull %v: %d %s", bad, r.status, r.body)
		}
	}
}

// An OCI pull names oci://REGISTRY/REPO and a tag or digest; the kind is
// left to the artifact, the name defaults to the repository path.
func TestRequestPullOCI(t *testing.T) {
	m := startModelEdge(t)
	sub, err := m.nc.SubscribeSync(events.Subject(events.TypeModelPullRequestedV1, "acme/lora"))
	if err != nil {
		t.Fatal(err)
	}
	r := m.admin("POST", "/admin/v1/catalog/pulls", map[string]any{"repo": "oci://ghcr.io/acme/lora", "revision": "v1", "base_model": "base-chat"})
	if r.status != http.StatusAccepted {
		t.Fatalf("pull: %d %s", r.status, r.body)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ev events.ModelPullRequestedV1
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Name != "acme/lora" || ev.Repo != "oci://ghcr.io/acme/lora" || ev.Revision != "v1" || ev.Kind != "" || ev.BaseModel != "base-chat" {
		t.Fatalf("event %+v", ev)
	}
}
