package runtime

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

// Config of the runtime. Zero values get defaults (documented on each field).
type Config struct {
	// Runsc is the path of runsc; default "runsc" looked up in PATH.
	Runsc string
	// Platform is runsc's --platform; default "ptrace".
	Platform string
	// StateDir is required: runsc's --root, the bundles and the
	// per-sandbox dirs live under it (created 0700).
	StateDir string
	// Python is the interpreter inside the sandbox; default "/usr/bin/python3".
	Python string
	// HostUsr is bind-mounted read-only as /usr; default "/usr".
	HostUsr string
	// CPUs is the CPU quota per sandbox; default 1.
	CPUs float64
	// Pids is the pids (tasks) limit per sandbox; default 128.
	Pids int
	// DiskBytes is the size of the sandbox's /mnt/data and of its /tmp
	// (tmpfs inside gVisor); default 256 MiB.
	DiskBytes int64
	// MaxOutputBytes caps stdout and stderr each per exec (beyond: the
	// Truncated flag, the rest discarded); default 1 MiB.
	MaxOutputBytes int64
	// StartTimeout bounds a cold start; default 10s.
	StartTimeout time.Duration
	// Log is the logger; default slog.Default().
	Log *slog.Logger
	// Egress configures the host-side proxy of allow-list sandboxes.
	Egress EgressConfig
}

// EgressConfig configures the egress proxy of allow-list sandboxes. The
// proxy resolves a name, checks every address (no loopback, link-local,
// private, CGNAT, multicast, unspecified), refuses denied ports, then dials
// the checked address, never the name.
type EgressConfig struct {
	// Resolve looks a host name up; default net.DefaultResolver's
	// LookupNetIP. Tests inject one to map names to chosen addresses.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to a checked address ("ip:port"); default a
	// net.Dialer. Tests inject one to reach a local server standing for
	// a checked public address.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DeniedPorts are refused whatever the address; default the NATS
	// ports 4222, 6222, 7422, 8222.
	DeniedPorts []int
	// DialTimeout bounds one upstream dial; default 10s.
	DialTimeout time.Duration
}

// Runtime starts and tracks sandboxes.
type Runtime struct{}

// New validates the config and checks that runsc runs (`runsc --version`);
// an error wraps ErrUnavailable when it does not.
func New(cfg Config) (*Runtime, error) {
	return nil, errNotImplemented
}

// Spec says what sandbox to start.
type Spec struct {
	// MemoryBytes is the cgroup memory limit (sandbox.MemoryBytes of the
	// container's memory_limit).
	MemoryBytes int64
	// Network is disabled (--network=none, nothing else) or an allow-list
	// (egress only through the host proxy).
	Network sandbox.NetworkPolicy
	// Labels are for logs only (tenant, container id); never put in the
	// sandbox.
	Labels map[string]string
}

// Start cold-starts a sandbox and returns once its resident interpreters
// answer.
func (r *Runtime) Start(ctx context.Context, spec Spec) (*Sandbox, error) {
	return nil, errNotImplemented
}

// Close kills every sandbox the runtime started.
func (r *Runtime) Close() error { return nil }
