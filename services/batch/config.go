package batch

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/sealed"
)

// Defaults.
const (
	DefaultWindow          = 24 * time.Hour
	DefaultAckWait         = 5 * time.Minute
	DefaultCapacity        = 8
	DefaultMaxAckPending   = 20_000
	DefaultPrefetch        = 256
	DefaultLineAttempts    = 10
	DefaultRetryBackoff    = time.Second
	DefaultMaxRetryBackoff = 30 * time.Second
	DefaultCountsInterval  = 500 * time.Millisecond
	DefaultMaxErrors       = 100
	DefaultWebhookTimeout  = 10 * time.Second
	DefaultWebhookAttempts = 8
	DefaultSource          = "batch"
	// DefaultQueueGroup is the queue group of the scheduler query
	// responder, so replicas share queries.
	DefaultQueueGroup = "batch"
)

// DefaultWebhookBackoff is the redelivery schedule of a webhook whose
// endpoint did not answer 2xx.
var DefaultWebhookBackoff = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}

// Config configures the batch service. The zero value of every field
// selects its default.
type Config struct {
	// Window bounds how long a batch runs: its lines expire at the
	// record's Expiry or CreatedAt+Window, whichever comes first. Default
	// 24h (OpenAI's only completion window); tests set seconds.
	Window time.Duration
	// AckWait is how long a line taken from the stream may go without an
	// in-progress acknowledgement before JetStream gives it to another
	// replica (a batch service killed mid-line). Lines held or running are
	// acknowledged in progress every AckWait/3. Default 5m.
	AckWait time.Duration
	// DefaultCapacity is the slots assumed for a model whose workers
	// report no state (events.BucketWorkers). Default 8.
	DefaultCapacity int64
	// MaxAckPending bounds the lines of one batch taken and not yet
	// acknowledged. Default 20000.
	MaxAckPending int
	// Prefetch is how many lines of one batch are held ready for dispatch.
	// Default 256.
	Prefetch int
	// LineAttempts is how many deliveries a line gets before a retryable
	// failure (no worker, overloaded, worker lost) becomes its answer.
	// Default 10 (with the default backoff, about 2.5 minutes of retries).
	LineAttempts int
	// RetryBackoff is the delay before a line's first retry, doubling up to
	// MaxRetryBackoff. Defaults 1s and 30s.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// CountsInterval is how often a batch's request_counts are written
	// while lines finish. Default 500ms.
	CountsInterval time.Duration
	// MaxErrors bounds the validation errors kept in a failed batch.
	// Default 100.
	MaxErrors int
	// WebhookTimeout bounds one webhook delivery. Default 10s.
	WebhookTimeout time.Duration
	// WebhookAttempts is how many deliveries a webhook gets before it is
	// dead-lettered. Default 8.
	WebhookAttempts int
	// WebhookBackoff is the redelivery schedule of a failed webhook.
	// Default 1s, 5s, 30s, 2m, 10m.
	WebhookBackoff []time.Duration
	// Source is the ce-source of the events published. Default "batch".
	Source string
	// QueueGroup is the queue group of the scheduler query responder.
	// Default "batch".
	QueueGroup string
	// TempDir holds the spool files of output files being written.
	// Default the system's.
	TempDir string
	// InlineBodyLimit is the largest answer body a result carries on the
	// bus; larger ones are kept in the object store until the batch's
	// files are written. Default the connection's max payload less 64 KiB.
	InlineBodyLimit int64
	// SchedulerHalfLife is the half-life of the fair-share scheduler's
	// historical usage. Default the scheduler's (5m).
	SchedulerHalfLife time.Duration
}

// Validate reports every problem of c; it never mutates c.
func (c Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"Window", c.Window}, {"AckWait", c.AckWait}, {"RetryBackoff", c.RetryBackoff}, {"MaxRetryBackoff", c.MaxRetryBackoff},
		{"CountsInterval", c.CountsInterval}, {"WebhookTimeout", c.WebhookTimeout}, {"SchedulerHalfLife", c.SchedulerHalfLife},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
		}
	}
	if c.AckWait != 0 && c.AckWait < 3*time.Second {
		errs = append(errs, fmt.Errorf("AckWait %s is below 3s", c.AckWait))
	}
	for _, n := range []struct {
		name string
		v    int64
	}{
		{"DefaultCapacity", c.DefaultCapacity}, {"MaxAckPending", int64(c.MaxAckPending)}, {"Prefetch", int64(c.Prefetch)},
		{"LineAttempts", int64(c.LineAttempts)}, {"InlineBodyLimit", c.InlineBodyLimit}, {"MaxErrors", int64(c.MaxErrors)}, {"WebhookAttempts", int64(c.WebhookAttempts)},
	} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", n.name))
		}
	}
	for i, d := range c.WebhookBackoff {
		if d < 0 {
			errs = append(errs, fmt.Errorf("WebhookBackoff[%d] must not be negative", i))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("batch config: %w", err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	defI := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defD(&c.Window, DefaultWindow)
	defD(&c.AckWait, DefaultAckWait)
	defD(&c.RetryBackoff, DefaultRetryBackoff)
	defD(&c.MaxRetryBackoff, DefaultMaxRetryBackoff)
	defD(&c.CountsInterval, DefaultCountsInterval)
	defD(&c.WebhookTimeout, DefaultWebhookTimeout)
	if c.DefaultCapacity == 0 {
		c.DefaultCapacity = DefaultCapacity
	}
	defI(&c.MaxAckPending, DefaultMaxAckPending)
	defI(&c.Prefetch, DefaultPrefetch)
	defI(&c.LineAttempts, DefaultLineAttempts)
	defI(&c.MaxErrors, DefaultMaxErrors)
	defI(&c.WebhookAttempts, DefaultWebhookAttempts)
	if len(c.WebhookBackoff) == 0 {
		c.WebhookBackoff = DefaultWebhookBackoff
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if c.QueueGroup == "" {
		c.QueueGroup = DefaultQueueGroup
	}
	return c
}

// Deps are the service's collaborators.
type Deps struct {
	NC *nats.Conn
	JS jetstream.JetStream
	// Objects holds batch input files, output and error files.
	Objects objstore.Store
	// SecretsKey opens the tenants' sealed webhook secrets; without it a
	// webhook is not delivered (it is retried, then dead-lettered).
	SecretsKey *sealed.PrivateKey
	Logger     *slog.Logger
	// Registerer receives the service's metrics (never the global one).
	Registerer prometheus.Registerer
	// Scheduler orders admission; default the fair-share scheduler.
	Scheduler Scheduler
	// Tracer creates a span per line attempt (the parent of the worker's);
	// default no-op.
	Tracer trace.TracerProvider
}

func (d Deps) validate() error {
	var errs []error
	if d.NC == nil {
		errs = append(errs, errors.New("Deps.NC is required"))
	}
	if d.JS == nil {
		errs = append(errs, errors.New("Deps.JS is required"))
	}
	if d.Objects == nil {
		errs = append(errs, errors.New("Deps.Objects is required"))
	}
	if d.Registerer == nil {
		errs = append(errs, errors.New("Deps.Registerer is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("batch deps: %w", err)
	}
	return nil
}
