package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestModelsStatus(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.EscapedPath())
		w.Header().Set("Content-Type", "application/json")
		locked := `{"name":"org/locked","engine":{"model":"up","api_key":"redacted"},"status":{"state":"unauthorized","servable_replicas":0,"replicas":[
			{"worker_id":"w-1","model":"org/locked","engine_id":"gpu-a","upstream_model":"up","upstream_verified":true,"key_verified":false,"state":"unauthorized",
			 "last_error":"worker org/locked: engine refused the engine API key: an authenticated POST http://e/v1/chat/completions answered 401","last_error_at":"2026-12-01T10:00:00Z","updated_at":"2026-12-01T10:00:00Z"}]}}`
		if strings.HasPrefix(r.URL.Path, "/admin/v1/models/") {
			_, _ = w.Write([]byte(locked))
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","data":[` + locked + `,
			{"name":"chat","engine":{"model":"up"},"status":{"state":"serving","servable_replicas":1,"replicas":[
			{"worker_id":"w-2","model":"chat","upstream_model":"up","upstream_verified":true,"state":"serving","max_concurrency":3,"max_concurrency_from":"engine",
			 "context_window":4096,"in_flight":2,"queued":1,"updated_at":"2026-12-01T10:00:00Z"}]}},
			{"name":"silent","engine":{"model":"up"},"status":{"state":"unknown","servable_replicas":0,"replicas":[]}}]}`))
	}))
	defer srv.Close()
	t.Setenv("AIFORGE_ADMIN_KEY", "ak-test")
	run := func(args ...string) []string {
		t.Helper()
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(append(args, "--url", srv.URL))
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	lines := run("models", "status")
	if len(lines) != 4 {
		t.Fatalf("output:\n%s", strings.Join(lines, "\n"))
	}
	for i, want := range [][]string{
		{"MODEL", "STATE", "REPLICA", "UPSTREAM", "KEY", "SLOTS", "CONTEXT", "LAST ERROR"},
		{"org/locked", "unauthorized", "w-1", "gpu-a", "up (verified)", "refused", "engine refused the engine API key", "401 ("},
		{"chat", "serving", "w-2", "up (verified)", "none", "2/1/3 (engine)", "4096"},
		{"silent", "unknown", "no worker reports on this model"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
	if strings.Contains(lines[1], "worker org/locked:") {
		t.Errorf("the row repeats the model in the error: %q", lines[1])
	}
	if lines := run("models", "status", "org/locked"); len(lines) != 2 || !strings.Contains(lines[1], "refused") {
		t.Fatalf("one model:\n%s", strings.Join(lines, "\n"))
	}
	if paths[len(paths)-1] != "/admin/v1/models/org/locked" {
		t.Fatalf("asked %v", paths)
	}
}

func TestModelsRegisterWait(t *testing.T) {
	state := "misnamed"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == "POST" {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"name":"chat","engine":{"base_url":"http://e/v1","model":"up"}}`))
			return
		}
		servable := 0
		if state == "serving" {
			servable = 1
		}
		_, _ = w.Write([]byte(`{"name":"chat","engine":{"model":"up"},"status":{"state":"` + state + `","servable_replicas":` + strconv.Itoa(servable) +
			`,"replicas":[{"worker_id":"w-1","model":"chat","state":"` + state + `","last_error":"worker chat: engine at http://e/v1 does not serve upstream model \"up\"; it lists [other]"}]}}`))
	}))
	defer srv.Close()
	t.Setenv("AIFORGE_ADMIN_KEY", "ak-test")
	register := func() (string, error) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs([]string{"models", "register", "chat", "--base-url", "http://e/v1", "--upstream", "up", "--wait", "10s", "--url", srv.URL})
		err := root.Execute()
		return out.String(), err
	}
	if _, err := register(); err == nil || !strings.Contains(err.Error(), "model chat is misnamed: engine at http://e/v1 does not serve upstream model") {
		t.Fatalf("register --wait on a misnamed engine: %v", err)
	}
	state = "serving"
	if out, err := register(); err != nil || !strings.Contains(out, "model chat is serving") {
		t.Fatalf("register --wait: %v %s", err, out)
	}
}
