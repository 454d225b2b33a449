package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spf13/cobra"
)

// healthcheckCmd is the probe of containers built FROM scratch, which have
// no curl: it GETs one URL and exits 0 on a 2xx answer, 1 otherwise.
func healthcheckCmd() *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "healthcheck URL",
		Short: "GET a health URL and exit 0 on a 2xx answer (the probe of the FROM-scratch image)",
		Long: `GET URL (http only, e.g. the edge's http://127.0.0.1:8080/readyz or the /readyz of --health-listen)
and exit 0 when it answers 2xx, 1 otherwise; for Docker and compose healthchecks, where the image has no curl:

  healthcheck: {test: ["CMD", "/aiforge", "healthcheck", "http://127.0.0.1:8081/readyz"]}`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return probe(cmd.Context(), args[0], timeout)
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long the whole request may take")
	return c
}

// probe GETs rawURL within timeout and reports a non-2xx answer as an error.
func probe(ctx context.Context, rawURL string, timeout time.Duration) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("healthcheck: %q is not an http:// URL", rawURL)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("healthcheck: %s answered %s", u.Redacted(), resp.Status)
	}
	return nil
}

// serveHealth serves GET /healthz (200 while the process runs), GET
// /readyz (200 when ready reports true, else 503) and, with a gatherer, GET
// /metrics (the process's Prometheus metrics, text exposition) on addr,
// for `aiforge run` targets that have no HTTP port of their own. It
// returns the bound address; the caller calls stop.
func serveHealth(addr string, ready func() bool, metrics prometheus.Gatherer, log *slog.Logger) (bound net.Addr, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--health-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	if metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{ErrorLog: slogErrorLog{log}}))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health listener stopped", "err", err)
		}
	}()
	return ln.Addr(), func() { _ = srv.Close() }, nil
}

// slogErrorLog is promhttp's error log on slog.
type slogErrorLog struct{ log *slog.Logger }

func (l slogErrorLog) Println(v ...any) { l.log.Warn("metrics: " + fmt.Sprint(v...)) }
