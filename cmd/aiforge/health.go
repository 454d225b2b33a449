package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// healthHandler answers the probes of a service without an HTTP API of its
// own (every `aiforge run` target but the edge, whose API serves the same
// paths): /healthz while the process runs, /readyz once every module it
// runs is ready (ready reports App.Ready).
func healthHandler(ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// serveHealth binds addr (--health-listen) and serves healthHandler on it
// until ctx ends.
func serveHealth(ctx context.Context, addr string, ready func() bool) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("the health endpoint cannot listen on %s (--health-listen or AIFORGE_HEALTH_LISTEN): %w", addr, err)
	}
	srv := &http.Server{Handler: healthHandler(ready), ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // ErrServerClosed once stopped
	}()
	return func() { _ = srv.Close(); <-done }, nil
}
