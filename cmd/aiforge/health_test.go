package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

func TestHealthHandler(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(healthHandler(ready.Load))
	defer srv.Close()
	get := func(path string) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("/healthz"); c != http.StatusOK {
		t.Fatalf("/healthz: %d", c)
	}
	if c := get("/readyz"); c != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before ready: %d, want 503", c)
	}
	ready.Store(true)
	if c := get("/readyz"); c != http.StatusOK {
		t.Fatalf("/readyz when ready: %d", c)
	}
	if c := get("/metrics"); c != http.StatusNotFound {
		t.Fatalf("/metrics: %d, want 404", c)
	}
}

func TestServeHealthBadAddress(t *testing.T) {
	if _, err := serveHealth(context.Background(), "256.0.0.1:1", func() bool { return true }); err == nil {
		t.Fatal("a bad address was accepted")
	}
}
