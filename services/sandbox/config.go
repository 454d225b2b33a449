package sandbox

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/objstore"
	api "github.com/aiforge/aiforge/pkg/sandbox"
	"github.com/aiforge/aiforge/services/sandbox/runtime"
)

// Defaults.
const (
	DefaultPlatform               = "ptrace"
	DefaultMaxSandboxes           = 32
	DefaultMaxContainersPerTenant = 8
	DefaultExecTimeout            = api.DefaultTimeout
	DefaultMaxExecTimeout         = api.MaxTimeout
	DefaultMaxOutputBytes         = 1 << 20
	DefaultDiskBytes              = 256 << 20
	DefaultCPUs                   = 1
	DefaultPids                   = 128
	DefaultSweepInterval          = 30 * time.Second
	DefaultSource                 = "sandbox"
	// DefaultPool is the warm pool: two 1 GiB sandboxes without network.
	DefaultPool = "1g=2"
)

// Platforms runsc may run on. kvm needs /dev/kvm (and hangs on some
// hosts); ptrace runs everywhere; systrap is runsc's newer default.
var Platforms = []string{"ptrace", "systrap", "kvm"}

// Config configures a sandbox service replica. The zero value of every
// field but Node and StateDir selects its default.
type Config struct {
	// Node names this replica, stably across restarts (the pod or host
	// name): it is written in each container's record, and on start the
	// records of this node still marked running (their sandboxes died with
	// the previous process) are marked expired. Required.
	Node string
	// StateDir holds runsc's state, the bundles and the per-sandbox
	// directories. Required.
	StateDir string
	// Runsc is the runsc binary; default "runsc" from PATH.
	Runsc string
	// Platform is runsc's --platform; default ptrace.
	Platform string
	// HostUsr is the directory bind-mounted read-only as every sandbox's
	// /usr (the Python and Bash the code runs); default /usr. A service in
	// a container gives the host's /usr mounted elsewhere.
	HostUsr string
	// Python is the interpreter inside the sandbox; default
	// /usr/bin/python3.
	Python string
	// Pool is the warm pool: comma-separated "<memory_limit>[/allowlist]=<n>"
	// (for example "1g=2,4g=1,1g/allowlist=1"); default "1g=2". "none"
	// keeps no warm sandbox.
	Pool string
	// MaxSandboxes bounds the sandboxes this replica runs, warm ones
	// included; beyond, a create is answered 429 sandbox_capacity_exceeded.
	// Default 32.
	MaxSandboxes int
	// MaxContainersPerTenant bounds one tenant's live containers on this
	// replica (429). Default 8.
	MaxContainersPerTenant int
	// ExecTimeout is an exec's wall-clock limit when it names none;
	// default 30s. MaxExecTimeout bounds timeout_ms; default (and at most)
	// 10m.
	ExecTimeout    time.Duration
	MaxExecTimeout time.Duration
	// MaxOutputBytes caps an exec's stdout and its stderr each (the rest
	// is discarded and the result says truncated). Default 1 MiB.
	MaxOutputBytes int64
	// DiskBytes is a sandbox's /mnt/data (and /tmp) size. Default 256 MiB.
	DiskBytes int64
	// CPUs is the CPU quota of a sandbox. Default 1.
	CPUs float64
	// Pids bounds a sandbox's processes and threads. Default 128.
	Pids int
	// SweepInterval is how often idle containers are looked for and
	// expired. Default 30s.
	SweepInterval time.Duration
	// Source is the ce-source of the usage events. Default "sandbox".
	Source string
}

// RegisterFlags registers the configuration's flags on fs, each named
// "sandbox-..." and defaulting to c's current value, so `aiforge run
// sandbox --sandbox-max-sandboxes 64` sets c.MaxSandboxes (cobra: add fs
// with Flags().AddGoFlagSet).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Node, "sandbox-node", c.Node, "sandbox: this replica's stable name (pod or host name), written in its containers' records; required")
	fs.StringVar(&c.StateDir, "sandbox-state-dir", c.StateDir, "sandbox: directory of runsc's state and the sandboxes' bundles; required")
	fs.StringVar(&c.Runsc, "sandbox-runsc", c.Runsc, "sandbox: the runsc binary (default runsc from PATH)")
	fs.StringVar(&c.HostUsr, "sandbox-host-usr", c.HostUsr, "sandbox: directory bind-mounted read-only as each sandbox's /usr, with the Python and Bash the code runs (default /usr)")
	fs.StringVar(&c.Python, "sandbox-python", c.Python, "sandbox: the Python interpreter inside the sandbox (default /usr/bin/python3)")
	fs.StringVar(&c.Platform, "sandbox-platform", c.Platform, "sandbox: runsc --platform: ptrace (default), systrap or kvm")
	fs.StringVar(&c.Pool, "sandbox-pool", c.Pool, `sandbox: warm sandboxes kept per class, "<memory_limit>[/allowlist]=<n>,..." (default "1g=2"; "none" for no warm pool)`)
	fs.IntVar(&c.MaxSandboxes, "sandbox-max-sandboxes", c.MaxSandboxes, "sandbox: sandboxes this replica may run, warm ones included (default 32)")
	fs.IntVar(&c.MaxContainersPerTenant, "sandbox-max-containers-per-tenant", c.MaxContainersPerTenant, "sandbox: live containers one tenant may hold on this replica (default 8)")
	fs.DurationVar(&c.ExecTimeout, "sandbox-exec-timeout", c.ExecTimeout, "sandbox: an exec's wall-clock limit when it names none (default 30s)")
	fs.DurationVar(&c.MaxExecTimeout, "sandbox-max-exec-timeout", c.MaxExecTimeout, "sandbox: the longest timeout_ms an exec may ask (default and at most 10m)")
	fs.Int64Var(&c.MaxOutputBytes, "sandbox-max-output-bytes", c.MaxOutputBytes, "sandbox: cap of an exec's stdout and of its stderr (default 1 MiB)")
	fs.Int64Var(&c.DiskBytes, "sandbox-disk-bytes", c.DiskBytes, "sandbox: size of a sandbox's /mnt/data and /tmp (default 256 MiB)")
	fs.Float64Var(&c.CPUs, "sandbox-cpus", c.CPUs, "sandbox: CPU quota of one sandbox (default 1)")
	fs.IntVar(&c.Pids, "sandbox-pids", c.Pids, "sandbox: processes and threads one sandbox may run (default 128)")
	fs.DurationVar(&c.SweepInterval, "sandbox-sweep-interval", c.SweepInterval, "sandbox: how often idle containers are expired (default 30s)")
}

// Validate reports every problem of c; it never mutates c.
func (c Config) Validate() error {
	var errs []error
	if strings.TrimSpace(c.Node) == "" {
		errs = append(errs, errors.New("node is required (this replica's stable name, for example its pod name)"))
	} else if len(c.Node) > 128 || strings.ContainsAny(c.Node, " \t\r\n*>.") {
		errs = append(errs, fmt.Errorf("node %q must be at most 128 characters without spaces, dots or wildcards", c.Node))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("state dir is required"))
	}
	if c.Platform != "" && !slices.Contains(Platforms, c.Platform) {
		errs = append(errs, fmt.Errorf("platform %q is not one of %s", c.Platform, strings.Join(Platforms, ", ")))
	}
	if _, err := ParsePool(c.Pool); err != nil {
		errs = append(errs, fmt.Errorf("pool: %w", err))
	}
	for _, n := range []struct {
		name string
		v    int64
	}{
		{"MaxSandboxes", int64(c.MaxSandboxes)}, {"MaxContainersPerTenant", int64(c.MaxContainersPerTenant)},
		{"MaxOutputBytes", c.MaxOutputBytes}, {"DiskBytes", c.DiskBytes}, {"Pids", int64(c.Pids)},
	} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", n.name))
		}
	}
	if c.CPUs < 0 || c.CPUs > 256 {
		errs = append(errs, fmt.Errorf("cpus %g must be between 0 and 256", c.CPUs))
	}
	if c.DiskBytes != 0 && c.DiskBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("DiskBytes %d is below 1 MiB", c.DiskBytes))
	}
	if c.MaxOutputBytes != 0 && c.MaxOutputBytes < 1024 {
		errs = append(errs, fmt.Errorf("MaxOutputBytes %d is below 1 KiB", c.MaxOutputBytes))
	}
	if c.Pids != 0 && c.Pids < 8 {
		errs = append(errs, fmt.Errorf("pids %d is below 8 (the resident interpreters need some)", c.Pids))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ExecTimeout", c.ExecTimeout}, {"MaxExecTimeout", c.MaxExecTimeout}, {"SweepInterval", c.SweepInterval}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
		}
	}
	if c.MaxExecTimeout > api.MaxTimeout {
		errs = append(errs, fmt.Errorf("MaxExecTimeout %s is over the API's %s", c.MaxExecTimeout, api.MaxTimeout))
	}
	if c.ExecTimeout != 0 && c.ExecTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("ExecTimeout %s is below 1ms", c.ExecTimeout))
	}
	maxT := c.MaxExecTimeout
	if maxT == 0 {
		maxT = DefaultMaxExecTimeout
	}
	if c.ExecTimeout > maxT {
		errs = append(errs, fmt.Errorf("ExecTimeout %s is over MaxExecTimeout %s", c.ExecTimeout, maxT))
	}
	if c.SweepInterval != 0 && c.SweepInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("SweepInterval %s is below 10ms", c.SweepInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox config: %w", err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Platform == "" {
		c.Platform = DefaultPlatform
	}
	if c.Pool == "" {
		c.Pool = DefaultPool
	}
	if c.MaxSandboxes == 0 {
		c.MaxSandboxes = DefaultMaxSandboxes
	}
	if c.MaxContainersPerTenant == 0 {
		c.MaxContainersPerTenant = DefaultMaxContainersPerTenant
	}
	if c.ExecTimeout == 0 {
		c.ExecTimeout = DefaultExecTimeout
	}
	if c.MaxExecTimeout == 0 {
		c.MaxExecTimeout = DefaultMaxExecTimeout
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.DiskBytes == 0 {
		c.DiskBytes = DefaultDiskBytes
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.Pids == 0 {
		c.Pids = DefaultPids
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	return c
}

// ParsePool parses a warm pool description ("1g=2,4g/allowlist=1";
// "none" or "" for the default is the caller's business: "" parses as no
// class). Memory limits are pkg/sandbox's; counts are 0 to 64.
func ParsePool(s string) (map[runtime.Class]int, error) {
	out := map[runtime.Class]int{}
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		class, count, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not <memory_limit>[/allowlist]=<n>", part)
		}
		mem, network, _ := strings.Cut(class, "/")
		if network == "" {
			network = api.NetworkDisabled
		}
		if network != api.NetworkDisabled && network != api.NetworkAllowlist {
			return nil, fmt.Errorf("%q: network %q is not disabled or allowlist", part, network)
		}
		b, err := api.MemoryBytes(mem)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 0 || n > 64 {
			return nil, fmt.Errorf("%q: the count must be 0 to 64", part)
		}
		k := runtime.Class{MemoryBytes: b, Network: network}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%q: class named twice", part)
		}
		out[k] = n
	}
	return out, nil
}

// poolString is the inverse of ParsePool, for logs.
func poolString(m map[runtime.Class]int) string {
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%dMiB/%s=%d", k.MemoryBytes>>20, k.Network, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// Deps are the service's collaborators.
type Deps struct {
	NC *nats.Conn
	JS jetstream.JetStream
	// Objects holds the tenants' files (copied into containers), the
	// edge's uploads for containers and the copies of container files for
	// downloads.
	Objects objstore.Store
	Logger  *slog.Logger
	// Tracer creates a span per call (create, exec, ...); default no-op.
	Tracer trace.TracerProvider
	// Registerer receives the service's metrics (never the global one).
	Registerer prometheus.Registerer
	// Runtime runs the sandboxes; default one built from Config (when
	// runsc cannot run, the service still starts and answers creates 503
	// sandbox_unavailable). The service closes a runtime it built, never
	// an injected one.
	Runtime *runtime.Runtime
	// Now is the clock of expiry; default time.Now.
	Now func() time.Time
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
		return fmt.Errorf("sandbox deps: %w", err)
	}
	return nil
}
