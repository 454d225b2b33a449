package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/internal/cli"
)

// `aiforge tenants admission set` and the keys' --admission-* flags set
// the policies the edge enforces; a new tenant blocks.
func TestAdmissionCommands(t *testing.T) {
	e := startCLIEdge(t)
	t.Setenv("AIFORGE_ADMIN_KEY", cliAdminKey)
	e.must(t, "tenants", "create", "acme")
	out := e.must(t, "tenants", "admission", "set", "acme", "--pii", "mask")
	if !strings.Contains(out, "admission block, pii mask") {
		t.Fatalf("set pii: %s", out)
	}
	out = e.must(t, "tenants", "admission", "set", "acme", "--mode", "flag", "--threshold", "0.7")
	if !strings.Contains(out, "admission flag, pii mask, threshold 0.70") {
		t.Fatalf("set mode: %s", out)
	}
	if _, _, err := e.aiforge(t, "tenants", "admission", "set", "acme", "--mode", "maybe"); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Fatalf("a bad mode: %v", err)
	}
	if _, _, err := e.aiforge(t, "tenants", "admission", "set", "acme"); err == nil {
		t.Fatal("set without a flag succeeded")
	}
	out = e.must(t, "keys", "create", "--tenant", "acme", "--admission-mode", "off")
	id := regexp.MustCompile(`key_[0-9a-f]+`).FindString(out)
	if id == "" {
		t.Fatalf("keys create: %s", out)
	}
	e.must(t, "keys", "update", id, "--admission-pii", "block")
	var k struct {
		Admission map[string]any `json:"admission"`
	}
	if err := (&cli.Client{BaseURL: e.url, Token: cliAdminKey}).Do(context.Background(), "GET", "/admin/v1/keys/"+id, nil, &k); err != nil {
		t.Fatal(err)
	}
	if k.Admission["mode"] != "off" || k.Admission["pii"] != "block" {
		t.Fatalf("key admission %v", k.Admission)
	}
}
