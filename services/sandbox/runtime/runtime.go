package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

//go:embed agent.py
var agentScript []byte

// statxShim is preloaded into every sandbox on amd64: it drops
// AT_NO_AUTOMOUNT from statx(2), which gVisor before 2023 refuses with
// EINVAL, breaking coreutils' ls, stat, cp -a and find (statxshim/statx.c).
//
//go:embed statxshim/statx-amd64.so
var statxShim []byte

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
	// Pids is the processes (tasks) limit per sandbox, RLIMIT_NPROC inside
	// (the host cgroup's pids limit is a looser backstop); default 128.
	Pids int
	// DiskBytes is the size of the sandbox's /mnt/data and of its /tmp
	// (tmpfs inside gVisor, counted in its memory); default 256 MiB.
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

func (c *Config) defaults() error {
	var errs []error
	if c.StateDir == "" {
		errs = append(errs, errors.New("StateDir is required"))
	} else if !filepath.IsAbs(c.StateDir) {
		errs = append(errs, errors.New("StateDir must be an absolute path"))
	}
	if c.Runsc == "" {
		c.Runsc = "runsc"
	}
	if c.Platform == "" {
		c.Platform = "ptrace"
	}
	if c.Python == "" {
		c.Python = "/usr/bin/python3"
	}
	if c.HostUsr == "" {
		c.HostUsr = "/usr"
	}
	if c.CPUs == 0 {
		c.CPUs = 1
	}
	if c.Pids == 0 {
		c.Pids = 128
	}
	if c.DiskBytes == 0 {
		c.DiskBytes = 256 << 20
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = 1 << 20
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 10 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.CPUs < 0.01 || c.CPUs > 256 {
		errs = append(errs, errors.New("cpus must be between 0.01 and 256"))
	}
	if c.Pids < 8 || c.Pids > 1<<16 {
		errs = append(errs, errors.New("pids must be between 8 and 65536"))
	}
	if c.DiskBytes < 1<<20 {
		errs = append(errs, errors.New("disk bytes must be at least 1 MiB"))
	}
	if c.MaxOutputBytes < 1<<10 || c.MaxOutputBytes > 64<<20 {
		errs = append(errs, errors.New("max output bytes must be between 1 KiB and 64 MiB"))
	}
	if !filepath.IsAbs(c.Python) || !strings.HasPrefix(c.Python, "/usr/") {
		errs = append(errs, errors.New("python must be an absolute path under /usr"))
	}
	if c.Egress.Resolve == nil {
		c.Egress.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if c.Egress.Dial == nil {
		d := &net.Dialer{}
		c.Egress.Dial = d.DialContext
	}
	if c.Egress.DeniedPorts == nil {
		c.Egress.DeniedPorts = []int{4222, 6222, 7422, 8222}
	}
	if c.Egress.DialTimeout == 0 {
		c.Egress.DialTimeout = 10 * time.Second
	}
	return errors.Join(errs...)
}

// Runtime starts and tracks sandboxes.
type Runtime struct {
	cfg     Config
	log     *slog.Logger
	runsc   string
	version string

	mu        sync.Mutex
	sandboxes map[string]*Sandbox
	closed    bool
}

// New validates the config and checks that runsc runs (`runsc --version`);
// an error wraps ErrUnavailable when it does not. It removes the sandboxes
// a crashed previous process left under StateDir.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("sandbox runtime config: %w", err)
	}
	path, err := exec.LookPath(cfg.Runsc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%w: runsc --version: %v", ErrUnavailable, err)
	}
	if _, err := os.Stat(cfg.Python); err != nil && cfg.HostUsr == "/usr" {
		return nil, fmt.Errorf("%w: python: %v", ErrUnavailable, err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: state dir: %v", ErrUnavailable, err)
	}
	r := &Runtime{
		cfg:       cfg,
		log:       cfg.Log,
		runsc:     path,
		version:   strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]),
		sandboxes: map[string]*Sandbox{},
	}
	r.removeStale()
	if err := r.prepareShared(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return r, nil
}

func (r *Runtime) runscRoot() string { return filepath.Join(r.cfg.StateDir, "runsc") }

// runscCmd runs one runsc management command (list, kill, delete).
func (r *Runtime) runscCmd(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	full := append([]string{"--root=" + r.runscRoot()}, args...)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, r.runsc, full...)
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	b := out.Bytes()
	if len(b) > 4096 {
		b = b[:4096]
	}
	return b, err
}

// removeStale deletes the sandboxes and directories a previous process
// left under StateDir.
func (r *Runtime) removeStale() {
	out, err := r.runscCmd(context.Background(), "list", "-quiet")
	if err == nil {
		for _, id := range strings.Fields(string(out)) {
			if !validID(id) {
				continue
			}
			_, _ = r.runscCmd(context.Background(), "kill", id, "KILL")
			if b, err := r.runscCmd(context.Background(), "delete", "-force", id); err != nil {
				r.log.Warn("sandbox runtime: removing a stale sandbox", "sandbox", id, "err", err, "out", string(b))
			} else {
				r.log.Info("sandbox runtime: removed a stale sandbox", "sandbox", id)
			}
			removeCgroups(id)
		}
	}
	_ = os.RemoveAll(filepath.Join(r.cfg.StateDir, "sandboxes"))
}

func validID(id string) bool {
	if !strings.HasPrefix(id, "sb-") || len(id) > 64 {
		return false
	}
	for _, c := range id[3:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func newID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

// Spec says what sandbox to start.
type Spec struct {
	// MemoryBytes is the cgroup memory limit (sandbox.MemoryBytes of the
	// container's memory_limit); default 1 GiB.
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
	if spec.MemoryBytes == 0 {
		spec.MemoryBytes = 1 << 30
	}
	if spec.MemoryBytes < 64<<20 {
		return nil, &Error{Code: sandbox.CodeInvalidRequest, Message: "memory limit under 64 MiB"}
	}
	switch spec.Network.Type {
	case "", sandbox.NetworkDisabled:
		spec.Network.Type = sandbox.NetworkDisabled
	case sandbox.NetworkAllowlist:
	default:
		return nil, &Error{Code: sandbox.CodeInvalidRequest, Message: "network type must be disabled or allowlist"}
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, &Error{Code: sandbox.CodeSandboxUnavailable, Message: "the sandbox runtime is closed"}
	}
	r.mu.Unlock()
	s, err := r.start(ctx, spec)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = s.Close()
		return nil, &Error{Code: sandbox.CodeSandboxUnavailable, Message: "the sandbox runtime is closed"}
	}
	r.sandboxes[s.id] = s
	r.mu.Unlock()
	return s, nil
}

func (r *Runtime) forget(id string) {
	r.mu.Lock()
	delete(r.sandboxes, id)
	r.mu.Unlock()
}

// Close kills every sandbox the runtime started.
func (r *Runtime) Close() error {
	r.mu.Lock()
	r.closed = true
	all := make([]*Sandbox, 0, len(r.sandboxes))
	for _, s := range r.sandboxes {
		all = append(all, s)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Close() }()
	}
	wg.Wait()
	return nil
}
