package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHealthListenerAndProbe(t *testing.T) {
	var ready atomic.Bool
	reg := prometheus.NewRegistry()
	served := prometheus.NewCounter(prometheus.CounterOpts{Name: "aiforge_test_probe_total", Help: "test"})
	reg.MustRegister(served)
	served.Add(3)
	addr, stop, err := serveHealth("127.0.0.1:0", ready.Load, reg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	base := "http://" + addr.String()
	ctx := context.Background()

	if err := probe(ctx, base+"/healthz", 5*time.Second); err != nil {
		t.Fatalf("/healthz of a running process: %v", err)
	}
	err = probe(ctx, base+"/readyz", 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("/readyz before ready: got %v, want a 503 error", err)
	}
	ready.Store(true)
	if err := probe(ctx, base+"/readyz", 5*time.Second); err != nil {
		t.Fatalf("/readyz once ready: %v", err)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "aiforge_test_probe_total 3") {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
	}
	err = probe(ctx, base+"/nothing", 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("unknown path: got %v, want a 404 error", err)
	}
}

func TestProbeRefusesWhatIsNotHTTP(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "https://127.0.0.1:8080/readyz", "file:///etc/passwd", "http:///readyz"} {
		err := probe(context.Background(), u, time.Second)
		if err == nil || !strings.Contains(err.Error(), "not an http:// URL") {
			t.Errorf("probe(%q) = %v, want a not-an-http-URL error", u, err)
		}
	}
}

func TestProbeFailsOnAClosedPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := probe(context.Background(), "http://"+addr+"/readyz", 5*time.Second); err == nil {
		t.Fatal("probe of a closed port succeeded")
	}
}

func TestHealthListenBusyAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, _, err = serveHealth(ln.Addr().String(), func() bool { return true }, nil, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "--health-listen") {
		t.Fatalf("busy address: got %v, want a --health-listen error", err)
	}
}
