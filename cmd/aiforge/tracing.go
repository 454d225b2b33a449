package main

import (
	"context"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/internal/tracing"
)

// setupTracing builds the process's tracer provider from the OTEL_*
// environment (internal/tracing) into o.Tracer; the returned stop flushes
// what is left to export, within tracing.ShutdownTimeout. service is
// service.name unless OTEL_SERVICE_NAME sets it.
func setupTracing(ctx context.Context, o *app.Options, service string) (stop func(), err error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	p, err := tracing.Setup(ctx, tracing.Config{ServiceName: service, Getenv: os.Getenv, Logger: log})
	if err != nil {
		return nil, err
	}
	if p.Exporting {
		// The SDK's own failures (a collector that does not answer) are
		// logged, not printed; they never carry header values.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: export", "err", err) }))
	}
	o.Tracer = p
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracing.ShutdownTimeout)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			log.Warn("tracing: flush at shutdown", "err", err)
		}
	}, nil
}

// serviceName is service.name for `aiforge run target`.
func serviceName(target string) string {
	if target == "all" {
		return "aiforge"
	}
	return "aiforge-" + target
}
