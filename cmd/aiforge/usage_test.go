package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// usageServer answers the usage report's endpoints with one day of usage;
// sandboxes false answers the code_interpreter_sessions report 404, as an
// edge from before sandboxes does.
func usageServer(t *testing.T, sandboxes bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/organization/usage/completions":
			_, _ = w.Write([]byte(`{"object":"page","data":[{"object":"bucket","start_time":1764547200,"end_time":1764633600,"results":[` +
				`{"object":"organization.usage.completions.result","input_tokens":13,"output_tokens":31,"input_cached_tokens":0,"num_model_requests":4,"model":"chat-small"}]}],"has_more":false,"next_page":null}`))
		case "/v1/organization/costs":
			_, _ = w.Write([]byte(`{"object":"page","data":[],"has_more":false,"next_page":null}`))
		case "/v1/organization/usage/code_interpreter_sessions":
			if !sandboxes {
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"error":{"message":"Unknown request URL","type":"invalid_request_error","code":"unknown_url"}}`))
				return
			}
			if got := r.URL.Query()["group_by"]; len(got) != 1 || got[0] != "project_id" {
				t.Errorf("sandbox report grouped by %v, want project_id only (it has no models)", got)
			}
			_, _ = w.Write([]byte(`{"object":"page","data":[{"object":"bucket","start_time":1764547200,"end_time":1764633600,"results":[` +
				`{"object":"organization.usage.code_interpreter_sessions.result","num_sessions":2,"project_id":"acme","api_key_id":null,"num_execs":7,` +
				`"num_exec_errors":1,"wall_seconds":3.25,"cpu_seconds":1.5,"gb_seconds":1.625,"session_seconds":600,"session_gb_seconds":300},` +
				`{"object":"organization.usage.code_interpreter_sessions.result","num_sessions":0,"project_id":"idle","api_key_id":null,"num_execs":0}]}],"has_more":false,"next_page":null}`))
		default:
			t.Errorf("unexpected %s", r.URL.Path)
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func runUsage(t *testing.T, args ...string) string {
	t.Helper()
	t.Setenv("AIFORGE_ADMIN_KEY", "ak-test")
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		t.Fatalf("%v: %v (%s)", args, err, out.String())
	}
	return out.String()
}

// `aiforge usage report` adds the agent code sandboxes' table when they
// were used, and says nothing of them to an edge that has none.
func TestUsageReportShowsSandboxes(t *testing.T) {
	out := runUsage(t, "usage", "report", "--from", "1d", "--group-by", "project_id,model", "--url", usageServer(t, true).URL)
	if !strings.Contains(out, "code interpreter (agent code sandboxes)") {
		t.Fatalf("no sandbox table:\n%s", out)
	}
	var line string
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "2025-12-01") && strings.Contains(l, "acme") {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) != 8 || f[2] != "2" || f[3] != "7" || f[4] != "1" || f[5] != "3.250" || f[6] != "1.500" || f[7] != "1.625" {
		t.Fatalf("sandbox row %q in\n%s", line, out)
	}
	if strings.Contains(out, "idle") {
		t.Fatalf("a row without sandbox usage is shown:\n%s", out)
	}

	out = runUsage(t, "usage", "report", "--from", "1d", "--url", usageServer(t, false).URL)
	if strings.Contains(out, "code interpreter") || !strings.Contains(out, "chat-small") {
		t.Fatalf("an edge without sandboxes:\n%s", out)
	}

	out = runUsage(t, "usage", "report", "--from", "1d", "--kind", "code_interpreter_sessions", "--group-by", "project_id", "--csv", "--url", usageServer(t, true).URL)
	want := "bucket_start,project_id,api_key_id,sessions,execs,exec_errors,wall_seconds,cpu_seconds,gb_seconds,session_seconds,session_gb_seconds\n" +
		"2025-12-01T00:00:00Z,acme,,2,7,1,3.25,1.5,1.625,600,300\n" +
		"2025-12-01T00:00:00Z,idle,,0,0,0,0,0,0,0,0\n"
	if out != want {
		t.Fatalf("csv\n%s\nwant\n%s", out, want)
	}
}
