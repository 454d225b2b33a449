package main

import (
	"strings"
	"testing"
)

// `aiforge tenants create --trace-content` and `tenants update
// --trace-content=false` against a real edge: the setting is shown by
// `tenants list`, off for a tenant created without the flag, and a
// budget-only update leaves it as it is.
func TestTenantsTraceContent(t *testing.T) {
	e := startCLIEdge(t)
	t.Setenv("AIFORGE_ADMIN_KEY", cliAdminKey)
	if out := e.must(t, "tenants", "create", "loud", "--trace-content"); !strings.Contains(out, "recorded in its traces") {
		t.Fatalf("create --trace-content: %q", out)
	}
	if out := e.must(t, "tenants", "create", "quiet"); strings.Contains(out, "traces") {
		t.Fatalf("create: %q", out)
	}
	col := func() map[string]string {
		lines := strings.Split(strings.TrimSpace(e.must(t, "tenants", "list")), "\n")
		if !strings.Contains(lines[0], "TRACE CONTENT") {
			t.Fatalf("list header: %q", lines[0])
		}
		at := strings.Index(lines[0], "TRACE CONTENT")
		got := map[string]string{}
		for _, l := range lines[1:] {
			got[strings.Fields(l)[0]] = strings.Fields(l[at:])[0]
		}
		return got
	}
	if got := col(); got["loud"] != "on" || got["quiet"] != "off" {
		t.Fatalf("list: %v", got)
	}
	e.must(t, "tenants", "update", "loud", "--max-budget-usd", "5")
	e.must(t, "tenants", "update", "quiet", "--trace-content")
	if got := col(); got["loud"] != "on" || got["quiet"] != "on" {
		t.Fatalf("after a budget update and --trace-content: %v", got)
	}
	e.must(t, "tenants", "update", "loud", "--trace-content=false")
	if got := col(); got["loud"] != "off" || got["quiet"] != "on" {
		t.Fatalf("after --trace-content=false: %v", got)
	}
}
