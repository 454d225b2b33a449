package main

import (
	"strings"
	"testing"
)

// `aiforge tenants model-bucket set|get|delete` against a real edge: the
// secret comes from the environment only, is never printed, and get shows
// the access key's last four characters.
func TestTenantsModelBucket(t *testing.T) {
	e := startCLIEdge(t)
	t.Setenv("AIFORGE_ADMIN_KEY", cliAdminKey)
	e.must(t, "tenants", "create", "acme")
	const secret = "cli-secret-never-printed-4f1e"
	t.Setenv("AIFORGE_MODEL_BUCKET_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, _, err := e.aiforge(t, "tenants", "model-bucket", "set", "acme", "--endpoint", "http://127.0.0.1:7070", "--bucket", "models", "--access-key-id", "AKIDCLI9"); err == nil || !strings.Contains(err.Error(), "SECRET_ACCESS_KEY") {
		t.Fatalf("set without a secret: %v", err)
	}
	t.Setenv("AIFORGE_MODEL_BUCKET_SECRET_ACCESS_KEY", secret)
	out := e.must(t, "tenants", "model-bucket", "set", "acme", "--endpoint", "http://127.0.0.1:7070", "--bucket", "models",
		"--prefix", "acme/", "--path-style", "--access-key-id", "AKIDCLI9")
	want := "model bucket of acme: http://127.0.0.1:7070 bucket models prefix acme/ (region -, path style true, access key …CLI9)\n"
	if out != want {
		t.Fatalf("set: %q, want %q", out, want)
	}
	if got := e.must(t, "tenants", "model-bucket", "get", "acme"); got != want || strings.Contains(got, secret) {
		t.Fatalf("get: %q", got)
	}
	if got := e.must(t, "tenants", "model-bucket", "delete", "acme"); got != "removed the model bucket of acme\n" {
		t.Fatalf("delete: %q", got)
	}
	if _, _, err := e.aiforge(t, "tenants", "model-bucket", "get", "acme"); err == nil || !strings.Contains(err.Error(), "no model bucket") {
		t.Fatalf("get after delete: %v", err)
	}
}
