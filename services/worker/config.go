// Package worker binds one served model name to one OpenAI-compatible engine
// (vLLM, SGLang, llama.cpp's llama-server, Ollama, TEI) and serves the
// model's real-time requests from the bus: it takes them from the bridge
// queue group, forwards them to the engine, streams the answer back, and
// publishes one usage event per request.
//
// The engine client is internal/engine; package supervisor runs one worker
// per model registered in the registry, in one process.
package worker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker/internal/engine"
	"github.com/aiforge/aiforge/services/worker/internal/engineproc"
)

// Defaults.
const (
	DefaultMaxConcurrency    = 64
	DefaultSource            = "worker"
	DefaultHeartbeatInterval = time.Second
	DefaultHealthInterval    = 5 * time.Second
	DefaultRequestTimeout    = 10 * time.Minute
	DefaultDrainTimeout      = 30 * time.Second
	DefaultEngineWaitMax     = 5 * time.Second
	DefaultStateInterval     = 5 * time.Second
	DefaultColdStartWait     = 2 * time.Minute
	DefaultIdleCheckInterval = time.Second
)

// Config configures one worker.
type Config struct {
	// Model is the served model name: what clients ask for.
	Model string
	// Kind is the model's kind (registry.Model.Kind): a rerank model
	// (registry.ModelKindRerank) serves rerank only, in its engine's
	// RerankAPI protocol; other models never serve rerank.
	Kind string
	// Engine is where requests go: BaseURL (ends with /v1), Model (the
	// upstream name), APIKey (optional), MaxConcurrency (optional: what the
	// engine reports, else DefaultMaxConcurrency).
	Engine registry.Engine
	// DefaultMaxConcurrency is the replica's slot count when neither the
	// binding (Engine.MaxConcurrency) nor the engine (llama-server's
	// /props total_slots) says. Default 64.
	DefaultMaxConcurrency int
	// WorkerID identifies this replica. Default "w-" + 8 random hex digits.
	WorkerID string
	// Source names the reporter of usage events. Default "worker".
	Source string
	// HeartbeatInterval is the bridge heartbeat period. Default 1s.
	HeartbeatInterval time.Duration
	// HealthInterval is the engine health check period. Default 5s.
	HealthInterval time.Duration
	// RequestTimeout bounds one engine request. Default 10m.
	RequestTimeout time.Duration
	// DrainTimeout bounds how long a stopping worker waits for requests in
	// flight. Default 30s.
	DrainTimeout time.Duration
	// EngineWaitMax is the longest wait between identity checks while the
	// engine does not pass them (the wait doubles from 100ms). Default 5s.
	EngineWaitMax time.Duration
	// StateInterval is how often the replica refreshes its state in
	// events.BucketWorkers (registry.WorkerState), besides writing each
	// change; it must stay well inside events.WorkerStateTTL. Default 5s.
	StateInterval time.Duration
	// EngineDir is where supervised engines (Engine.Process) keep their
	// files: <EngineDir>/<model>[/<engine id>] holds an Ollama's models
	// and home, and the engine's log (engine.log). Default
	// os.TempDir()/aiforge-engines.
	EngineDir string
	// EngineProcess tunes the supervision of engine processes; zero fields
	// take engineproc's defaults (restart backoff from 100ms doubling to
	// 8 x RetryInterval (1s), 10 min to become healthy, 10 s between
	// SIGTERM and SIGKILL, a probe every 5 s).
	EngineProcess EngineProcessConfig
	// ColdStartWait bounds how long a request waits for a supervised
	// engine scaled to zero (EngineProcess.IdleStop) to start; past it the
	// request is answered 503 model_warming with a Retry-After, and the
	// engine goes on starting. Default 2m.
	ColdStartWait time.Duration
	// IdleCheckInterval is how often an engine with an idle stop is
	// checked for idleness (at most its idle stop). Default 1s.
	IdleCheckInterval time.Duration
}

// EngineProcessConfig tunes engine process supervision.
type EngineProcessConfig struct {
	RetryInterval time.Duration
	StartTimeout  time.Duration
	StopGrace     time.Duration
	ProbeInterval time.Duration
}

// Validate reports every problem of c at once; it never mutates c.
func (c Config) Validate() error {
	var errs []error
	if c.Model == "" {
		errs = append(errs, errors.New("the served model name (Model) is required"))
	}
	if p := c.Engine.Process; p != nil {
		if err := engineproc.Validate(*p); err != nil {
			errs = append(errs, fmt.Errorf("Engine.Process: %w", err))
		}
		if c.Engine.BaseURL != "" && (p.Port == 0 || strings.TrimRight(c.Engine.BaseURL, "/") != processBaseURL(p.Port)) {
			errs = append(errs, fmt.Errorf("Engine.BaseURL of a supervised engine is %s, from Engine.Process.Port; leave it empty", processBaseURL(p.Port)))
		}
	} else if err := validateBaseURL(c.Engine.BaseURL); err != nil {
		errs = append(errs, err)
	}
	if c.Engine.Model == "" {
		errs = append(errs, errors.New("Engine.Model (the upstream model name) is required"))
	}
	switch c.Kind {
	case registry.ModelKindGenerate, registry.ModelKindRerank:
	default:
		errs = append(errs, fmt.Errorf("worker config: kind %q is not a model kind", c.Kind))
	}
	if c.Engine.MaxConcurrency < 0 {
		errs = append(errs, errors.New("Engine.MaxConcurrency must not be negative"))
	}
	errs = append(errs, c.ValidateDefaults())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	return nil
}

// ValidateDefaults reports the problems of c's settings that apply to every
// worker of a supervisor: everything but Model and Engine.
func (c Config) ValidateDefaults() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"HeartbeatInterval", c.HeartbeatInterval},
		{"HealthInterval", c.HealthInterval},
		{"RequestTimeout", c.RequestTimeout},
		{"DrainTimeout", c.DrainTimeout},
		{"EngineWaitMax", c.EngineWaitMax},
		{"StateInterval", c.StateInterval},
		{"EngineProcess.RetryInterval", c.EngineProcess.RetryInterval},
		{"EngineProcess.StartTimeout", c.EngineProcess.StartTimeout},
		{"EngineProcess.StopGrace", c.EngineProcess.StopGrace},
		{"EngineProcess.ProbeInterval", c.EngineProcess.ProbeInterval},
		{"ColdStartWait", c.ColdStartWait},
		{"IdleCheckInterval", c.IdleCheckInterval},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
		}
	}
	if c.StateInterval > events.WorkerStateTTL/2 {
		errs = append(errs, fmt.Errorf("StateInterval must be at most %s (half the worker state's lifetime)", events.WorkerStateTTL/2))
	}
	if c.DefaultMaxConcurrency < 0 {
		errs = append(errs, errors.New("DefaultMaxConcurrency must not be negative"))
	}
	return errors.Join(errs...)
}

func validateBaseURL(s string) error {
	if s == "" {
		return errors.New("Engine.BaseURL is required")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("Engine.BaseURL %q must be an http(s) URL such as http://127.0.0.1:8000/v1", engine.RedactURL(s))
	}
	return nil
}

// withDefaults returns c with every default applied.
func (c Config) withDefaults() Config {
	c.Engine.BaseURL = strings.TrimRight(c.Engine.BaseURL, "/")
	if c.DefaultMaxConcurrency == 0 {
		c.DefaultMaxConcurrency = DefaultMaxConcurrency
	}
	if c.WorkerID == "" {
		c.WorkerID = NewWorkerID("w")
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = DefaultHealthInterval
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.EngineWaitMax == 0 {
		c.EngineWaitMax = DefaultEngineWaitMax
	}
	if c.StateInterval == 0 {
		c.StateInterval = DefaultStateInterval
	}
	if c.EngineDir == "" {
		c.EngineDir = filepath.Join(os.TempDir(), "aiforge-engines")
	}
	if c.ColdStartWait == 0 {
		c.ColdStartWait = DefaultColdStartWait
	}
	if c.IdleCheckInterval == 0 {
		c.IdleCheckInterval = DefaultIdleCheckInterval
	}
	return c
}

// processBaseURL is the OpenAI base URL of a supervised engine on port.
func processBaseURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) + "/v1" }

// NewWorkerID returns prefix, a dash and 8 random hex digits: a replica id
// (the default is NewWorkerID("w")).
func NewWorkerID(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// Deps are the worker's collaborators.
type Deps struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Logger *slog.Logger
	// Metrics is shared by all workers of a process; required (NewMetrics).
	Metrics *Metrics
	// Tracer is optional; the default is a no-op provider (no globals).
	Tracer trace.TracerProvider
	// HTTPClient is optional; the default has a transport tuned for many
	// concurrent long streams to one host, and no overall timeout.
	HTTPClient *http.Client
	// Hooks let a supervisor follow the worker's state; optional.
	Hooks Hooks
	// Now is the clock of idle stops (scale to zero); default time.Now.
	// Tests advance their own to put an engine to sleep.
	Now func() time.Time
}

// Hooks are called as a worker's state changes; every field is optional.
// They run on the worker's own goroutine and must not block.
type Hooks struct {
	// OnCheckFailed: the engine is unreachable; Run waits and checks again.
	OnCheckFailed func(error)
	// OnServing: the worker takes requests (after starting or recovering).
	OnServing func()
	// OnUnhealthy: a health check failed; the worker paused.
	OnUnhealthy func(error)
}

func (d Deps) validate() error {
	var errs []error
	if d.NC == nil {
		errs = append(errs, errors.New("Deps.NC is required"))
	}
	if d.JS == nil {
		errs = append(errs, errors.New("Deps.JS is required"))
	}
	if d.Metrics == nil {
		errs = append(errs, errors.New("Deps.Metrics is required (NewMetrics)"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker deps: %w", err)
	}
	return nil
}

// NewHTTPClient returns the default engine client: keep-alive connections
// for hundreds of concurrent streams to one engine, no compression (streams
// must not be buffered by a decompressor), and no overall timeout, because a
// stream may last minutes; requests are bounded by their context instead.
// Its connections ACK at once (TCP_QUICKACK on Linux): engines that write
// headers and body apart without TCP_NODELAY (llama-server) would otherwise
// make every non-streamed answer wait for a delayed ACK, about 40 ms, on a
// kept-alive connection.
func NewHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           engine.QuickAck((&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext),
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ReadBufferSize:        32 << 10,
		WriteBufferSize:       32 << 10,
	}}
}

// Bound returns the configuration of a worker serving model on eng with
// c's settings: c's Engine.MaxConcurrency (a process-wide setting) becomes
// the default slot count, used when neither eng nor its engine says, and
// WorkerID is fresh, prefixed by c's WorkerID when that is set (else the
// default).
func (c Config) Bound(model string, eng registry.Engine) Config {
	cfg := c
	cfg.Model = model
	cfg.Engine = eng
	if cfg.DefaultMaxConcurrency == 0 {
		cfg.DefaultMaxConcurrency = c.Engine.MaxConcurrency
	}
	cfg.WorkerID = ""
	if p := c.WorkerID; p != "" {
		cfg.WorkerID = NewWorkerID(p)
	}
	return cfg
}
