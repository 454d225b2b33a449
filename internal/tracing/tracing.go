// Package tracing builds the process's OpenTelemetry tracer provider from
// the standard OTEL_* environment: an OTLP exporter (gRPC or HTTP/protobuf)
// when an endpoint is configured, none otherwise.
//
// The variables read (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/):
//
//	OTEL_SDK_DISABLED                    true: a no-op provider (no spans, trace context still flows)
//	OTEL_TRACES_EXPORTER                 otlp (default) or none
//	OTEL_EXPORTER_OTLP_ENDPOINT          base endpoint; traces go to <it>/v1/traces over HTTP
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT   the traces endpoint itself (wins over the base)
//	OTEL_EXPORTER_OTLP_PROTOCOL          grpc or http/protobuf (default, as the spec says)
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL   the same, for traces only (wins)
//	OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, _INSECURE, _TIMEOUT, _COMPRESSION, _CERTIFICATE
//	                                     read by the exporters themselves
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG
//	                                     read by the SDK (default parentbased_always_on)
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
//	                                     the resource (default service.name: Config.ServiceName)
//	OTEL_BSP_*                           the batch span processor's queue and delays
//
// Without an endpoint nothing is exported and no exporter is built: spans
// are still created (with the configured sampler), so that the trace
// context aiforge passes on names aiforge's own spans, but they go nowhere.
// Header values may hold tokens: they are never logged.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Protocols of the OTLP exporter.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config says what Setup builds.
type Config struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME sets it, e.g.
	// "aiforge" or "aiforge-edge".
	ServiceName string
	// ServiceVersion is service.version, when known.
	ServiceVersion string
	// Getenv reads the environment; required (os.Getenv in main). The
	// exporters read their own variables (headers, TLS, timeouts) from
	// the process environment.
	Getenv func(string) string
	// Logger gets one line saying where traces go; never header values.
	Logger *slog.Logger
}

// Provider is the process's tracer provider and what it exports to.
type Provider struct {
	trace.TracerProvider
	// Exporting is true when spans are exported.
	Exporting bool
	// Protocol and Endpoint say where (Endpoint without credentials); empty
	// when not exporting.
	Protocol, Endpoint string
	shutdown           func(context.Context) error
}

// Shutdown flushes the spans not yet exported and stops the exporter;
// ctx bounds the wait. It is safe to call on a provider that exports
// nothing, and more than once.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.shutdown == nil {
		return nil
	}
	f := p.shutdown
	p.shutdown = nil
	return f(ctx)
}

// Setup builds the provider cfg and the environment describe.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.Getenv == nil {
		return nil, errors.New("tracing: Config.Getenv is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	env := func(k string) string { return strings.TrimSpace(cfg.Getenv(k)) }
	if v := env("OTEL_SDK_DISABLED"); v != "" {
		disabled, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTEL_SDK_DISABLED=%q is not a boolean", v)
		}
		if disabled {
			cfg.Logger.Info("tracing disabled (OTEL_SDK_DISABLED)")
			return &Provider{TracerProvider: noop.NewTracerProvider()}, nil
		}
	}
	exporter := strings.ToLower(env("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "", "otlp", "none":
	default:
		return nil, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q is not supported (otlp or none)", exporter)
	}
	endpoint := env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	protocol := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol == "" {
		protocol = ProtocolHTTP
	}
	if protocol != ProtocolGRPC && protocol != ProtocolHTTP {
		return nil, fmt.Errorf("tracing: OTLP protocol %q is not supported (grpc or http/protobuf)", protocol)
	}

	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(orDefault(cfg.ServiceName, "aiforge"))),
		resource.WithAttributes(versionAttrs(cfg.ServiceVersion)...),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	// The sampler is the SDK's default: OTEL_TRACES_SAMPLER and _ARG, else
	// parentbased_always_on.
	p := &Provider{}
	if exporter != "none" && endpoint != "" {
		var exp *otlptrace.Exporter
		switch protocol {
		case ProtocolGRPC:
			exp, err = otlptracegrpc.New(ctx)
		default:
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP %s exporter: %w", protocol, err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
		p.Exporting, p.Protocol, p.Endpoint = true, protocol, redact(endpoint)
	}
	tp := sdktrace.NewTracerProvider(opts...)
	p.TracerProvider, p.shutdown = tp, tp.Shutdown
	if p.Exporting {
		cfg.Logger.Info("tracing: exporting spans over OTLP", "protocol", p.Protocol, "endpoint", p.Endpoint,
			"sampler", orDefault(env("OTEL_TRACES_SAMPLER"), "parentbased_always_on"),
			"headers", headerNames(env("OTEL_EXPORTER_OTLP_TRACES_HEADERS"), env("OTEL_EXPORTER_OTLP_HEADERS")))
	}
	return p, nil
}

// ForceFlush exports the spans ended so far (tests, and before a process
// is killed).
func (p *Provider) ForceFlush(ctx context.Context) error {
	if tp, ok := p.TracerProvider.(*sdktrace.TracerProvider); ok {
		return tp.ForceFlush(ctx)
	}
	return nil
}

// ShutdownTimeout bounds the flush at shutdown.
const ShutdownTimeout = 5 * time.Second

func versionAttrs(v string) []attribute.KeyValue {
	if v == "" {
		return nil
	}
	return []attribute.KeyValue{semconv.ServiceVersion(v)}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// redact drops credentials and the query from an endpoint for the log.
func redact(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "(unparsable endpoint)"
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}

// headerNames lists the names, never the values, of OTLP headers
// ("k1=v1,k2=v2"), for the log.
func headerNames(lists ...string) []string {
	var names []string
	for _, l := range lists {
		for _, kv := range strings.Split(l, ",") {
			if k, _, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(k) != "" {
				names = append(names, strings.TrimSpace(k))
			}
		}
	}
	return names
}
