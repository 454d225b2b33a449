// Package app assembles aiforge's services into one process. Every runnable
// component is a module in one table with its dependencies; "all" (what
// `aiforge up` runs) is only a group of the others. The differences of the
// all-in-one preset are applied once, in Options, never as branches inside
// the services.
package app

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natsutil"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	batchsvc "github.com/aiforge/aiforge/services/batch"
	"github.com/aiforge/aiforge/services/edge"
	"github.com/aiforge/aiforge/services/embedder"
	"github.com/aiforge/aiforge/services/guardian"
	"github.com/aiforge/aiforge/services/ingest"
	"github.com/aiforge/aiforge/services/retriever"
	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded"
	"github.com/aiforge/aiforge/services/retriever/index/qdrant"
	sandboxsvc "github.com/aiforge/aiforge/services/sandbox"
	"github.com/aiforge/aiforge/services/usage"
	"github.com/aiforge/aiforge/services/worker"
	"github.com/aiforge/aiforge/services/worker/supervisor"
)

// Options configure a process. Zero values are the laptop defaults.
type Options struct {
	// Targets are the modules to run; "all" runs every service.
	Targets []string
	// DataDir holds the embedded JetStream store and the admin key file.
	DataDir string
	// NATSURL is an external NATS; empty starts an embedded server.
	NATSURL string
	// NATS authenticates the connection to NATSURL (creds, nkey, user,
	// token) and secures it (TLS).
	NATS natsutil.ConnectOptions
	// NATSListen exposes the embedded server to other processes
	// ("127.0.0.1:4222"); empty keeps it in-process only, "127.0.0.1:-1"
	// picks a free port. The embedded server always requires
	// authentication: every identity of pkg/busauth, its nkey seed in
	// NATSCredsDir.
	NATSListen string
	// NATSCredsDir holds the embedded server's identities (<name>.nk,
	// mode 0600), created on first start. Default DataDir/nats.
	NATSCredsDir string
	// NATSListenTLS, when set, is required of every client of the embedded
	// server's listener (natsutil.ServerTLS).
	NATSListenTLS *tls.Config
	// OnNATSListen is told the embedded server's client URL and the
	// credentials dir once it listens.
	OnNATSListen func(url, credsDir string)
	// Listen is the edge's HTTP address.
	Listen string
	// EdgeListener, when set, is served instead of Listen (tests).
	EdgeListener net.Listener
	// AdminKey authorises the admin API. Empty: read DataDir/admin.key or
	// generate one there (mode 0600) and report it through OnAdminKey.
	AdminKey   string
	OnAdminKey func(key, path string)
	// SecretsKeyFile is the workers' private key, which opens the engine
	// API keys sealed in the registry. Empty: DataDir/secrets.key,
	// generated (mode 0600, with its public half in secrets.pub) on the
	// first start of a process that runs the workers. A file named here is
	// never generated. Only the workers read it.
	SecretsKeyFile string
	// SecretsPublicKeyFile is the public half, which the edge seals engine
	// API keys with. Empty: the public half of the private key when this
	// process has it (aiforge up), else DataDir/secrets.pub if it exists.
	SecretsPublicKeyFile string

	// S3, when set, stores blobs in an S3 bucket instead of DataDir/objects.
	S3 *objstore.S3Config
	// Usage tunes the usage service.
	Usage usage.Config
	// Batch tunes the batch service (completion window, line ack wait,
	// default capacity).
	Batch batchsvc.Config
	// Sandbox tunes the sandbox service (runsc, the warm pool, limits).
	// Node defaults to the host name and StateDir to DataDir/sandbox.
	Sandbox sandboxsvc.Config
	// Worker is the engine binding for the "worker" target.
	Worker worker.Config
	// Guardian configures the model scanner and hub mirror (its HubToken
	// comes from the environment only).
	Guardian guardian.Config
	// Retriever chooses the retriever's vector index.
	Retriever RetrieverOptions
	// Edge and WorkerDefaults tune the services.
	Edge           edge.Config
	WorkerDefaults worker.Config

	// ParserCommand is the command line that starts this binary as the
	// ingest service's parser child ("<aiforge> __parse"; cmd/aiforge sets
	// it). Empty (test binaries, which cannot be re-executed as the parser):
	// ingest parses in process, bounded by the extraction limits and the
	// per-document time budget but not by the child's memory limit.
	ParserCommand []string

	Logger *slog.Logger
	// Tracer creates every module's spans (internal/tracing.Setup builds
	// one from the OTEL_* environment). Nil: an SDK provider that exports
	// nothing, so aiforge's spans still name the trace context it passes
	// on. The caller shuts down a provider it gave (flushing its spans)
	// after Run returns.
	Tracer trace.TracerProvider
}

// Vector indexes the retriever can use.
const (
	// IndexEmbedded keeps the index in DataDir/index, inside the retriever. The directory is locked: exactly one
	// retriever replica serves it.
	IndexEmbedded = "embedded"
	// IndexQdrant keeps the index in a Qdrant collection. Retrievers are then stateless: run as many replicas as
	// the load needs, queries are shared through the queue group and indexing through the durable consumer.
	IndexQdrant = "qdrant"
)

// RetrieverOptions choose and configure the retriever's vector index.
type RetrieverOptions struct {
	// Index is IndexEmbedded (default) or IndexQdrant.
	Index string
	// QdrantURL is Qdrant's gRPC endpoint (see qdrant.ParseURL: host:port, http://, https:// for TLS; port 6334
	// by default). Required with IndexQdrant.
	QdrantURL string
	// Qdrant tunes the adapter: Collection, Dim (the embedding models' dimension, needed to create the
	// collection), APIKey, timeouts. Addr and TLS come from QdrantURL.
	Qdrant qdrant.Config
}

// module is one component of a process: a service that runs, or shared
// infrastructure (the bus, the object store) that services are given.
type module struct {
	// deps must be set up before the module: what it cannot work without.
	deps []string
	// after orders the module behind others when they run in the same
	// process, without needing them: the edge starts after the services it
	// routes to (so it is ready only when they are) and stops before them
	// (so it drains its open streams while the workers still serve them).
	after []string
	// service is false for shared infrastructure, which `aiforge run`
	// does not offer as a target of its own.
	service bool
	// build sets the module up and returns its Run and readiness; run is
	// nil for infrastructure that only provides something to others.
	build func(a *App) (run func(context.Context) error, ready func() bool, err error)
}

// The services the edge routes requests and queries to.
var routedBehindEdge = []string{"usage", "retriever", "embedder", "ingest", "guardian", "workers", "worker", "batch", "sandbox"}

// modules is the table of everything a process can set up and what each
// needs. "bus" is the NATS connection (the embedded server, or an external
// one), set up before everything else; "objects" is the one object store
// (S3 when configured, else DataDir/objects) every service that reads or
// writes blobs shares.
var modules = map[string]module{
	"bus":       {},
	"objects":   {build: (*App).buildObjects},
	"nats":      {deps: []string{"bus"}, service: true, build: (*App).buildNATS},
	"edge":      {deps: []string{"bus", "objects"}, after: routedBehindEdge, service: true, build: (*App).buildEdge},
	"workers":   {deps: []string{"bus", "objects"}, service: true, build: (*App).buildSupervisor},
	"worker":    {deps: []string{"bus"}, service: true, build: (*App).buildWorker},
	"usage":     {deps: []string{"bus"}, service: true, build: (*App).buildUsage},
	"ingest":    {deps: []string{"bus", "objects"}, service: true, build: (*App).buildIngest},
	"embedder":  {deps: []string{"bus", "objects"}, service: true, build: (*App).buildEmbedder},
	"retriever": {deps: []string{"bus", "objects"}, service: true, build: (*App).buildRetriever},
	"guardian":  {deps: []string{"bus", "objects"}, service: true, build: (*App).buildGuardian},
	"batch":     {deps: []string{"bus", "objects"}, service: true, build: (*App).buildBatch},
	"sandbox":   {deps: []string{"bus", "objects"}, service: true, build: (*App).buildSandbox},
}

// groups name sets of modules; "all" is what `aiforge up` runs. The start
// order comes from the table (deps, then after), not from a group.
var groups = map[string][]string{
	"all": {"usage", "retriever", "embedder", "ingest", "guardian", "workers", "batch", "sandbox", "edge"},
}

// Targets lists what `aiforge run` accepts.
func Targets() []string {
	var out []string
	for k, m := range modules {
		if m.service {
			out = append(out, k)
		}
	}
	for k := range groups {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// App is a running process: the bus connection and the started modules.
type App struct {
	opts Options
	log  *slog.Logger

	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	// ids are the embedded server's identities; each module connects
	// in-process as its service (conns), so the permission table is in
	// force inside one process too.
	ids   map[string]busauth.Identity
	conns map[string]*nats.Conn

	Registry *prometheus.Registry
	// metrics registers with Registry, keeping the descriptors
	// (MetricNames).
	metrics *describingRegisterer
	Tracer  trace.TracerProvider
	// ownTracer is the provider New built (Options.Tracer nil), shut down
	// with the bus.
	ownTracer *sdktrace.TracerProvider

	edge  *edge.Service
	wm    *worker.Metrics
	store objstore.Store // the "objects" module: nil without a data dir or S3

	mu     sync.Mutex
	states []*state

	secretsOnce sync.Once
	secrets     secretsResult
}

type state struct {
	name  string
	run   func(context.Context) error
	ready func() bool
}

// New resolves the targets and prepares (but does not start) the process.
func New(opts Options) (*App, error) {
	if len(opts.Targets) == 0 {
		opts.Targets = []string{"all"}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if _, err := order(opts.Targets); err != nil {
		return nil, err
	}
	if opts.Edge.BatchWindow == 0 {
		// One batch window for the edge (which sets expires_at) and the
		// batch service (which expires the lines).
		opts.Edge.BatchWindow = opts.Batch.Window
	}
	if opts.DataDir != "" {
		// Absolute from the start: the paths under it travel to other
		// processes (an engine loads models/<model>/current and the LoRA
		// adapters by path, from its own working directory), and a
		// relative symlink target would dangle there.
		abs, err := filepath.Abs(opts.DataDir)
		if err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		opts.DataDir = abs
	}
	reg := prometheus.NewRegistry()
	dr := &describingRegisterer{reg: reg}
	dr.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a := &App{opts: opts, log: opts.Logger, Registry: reg, metrics: dr, Tracer: opts.Tracer}
	if a.Tracer == nil {
		a.ownTracer = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
		a.Tracer = a.ownTracer
	}
	return a, nil
}

// order expands groups and sorts the modules to set up: every module after
// its deps, and after the modules it is ordered behind when they are also
// set up; ties in name order, so the order is the same on every start.
func order(targets []string) ([]string, error) {
	want := map[string]bool{}
	var add func(string)
	add = func(n string) {
		if want[n] {
			return
		}
		want[n] = true
		for _, d := range modules[n].deps {
			add(d)
		}
	}
	for _, t := range targets {
		if g, ok := groups[t]; ok {
			for _, n := range g {
				add(n)
			}
			continue
		}
		if m, ok := modules[t]; !ok || !m.service {
			return nil, fmt.Errorf("unknown target %q (known: %s)", t, strings.Join(Targets(), ", "))
		}
		add(t)
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(string) error
	visit = func(n string) error {
		switch state[n] {
		case 1:
			return fmt.Errorf("module %s depends on itself", n)
		case 2:
			return nil
		}
		state[n] = 1
		m := modules[n]
		before := append(slices.Clone(m.deps), m.after...)
		slices.Sort(before)
		for _, d := range before {
			if !want[d] {
				continue // ordered behind, but not set up in this process
			}
			if err := visit(d); err != nil {
				return err
			}
		}
		state[n] = 2
		out = append(out, n)
		return nil
	}
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DataDir is the data directory, absolute ("" when there is none).
func (a *App) DataDir() string { return a.opts.DataDir }

// moduleError names the module an error came from, unless the error already
// starts with that name (services prefix their own errors: "edge: listen:
// ..." must not become "edge: edge: listen: ...").
func moduleError(name string, err error) error {
	msg := err.Error()
	if strings.HasPrefix(msg, name+":") || strings.HasPrefix(msg, name+" ") {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

// Edge returns the edge service when it runs in this process.
func (a *App) Edge() *edge.Service {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.edge
}

// NATS returns the process's bus connection (after Run started).
func (a *App) NATS() *nats.Conn { return a.nc }

// NATSServer returns the embedded server, if any.
func (a *App) NATSServer() *server.Server { return a.srv }

// Ready reports whether every module is ready.
func (a *App) Ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.states) == 0 {
		return false
	}
	for _, s := range a.states {
		if s.ready != nil && !s.ready() {
			return false
		}
	}
	return true
}

// Run starts the bus and every module in dependency order and blocks until
// ctx ends or a module fails; then it stops the modules in reverse order,
// each draining its work, and closes the bus last.
func (a *App) Run(ctx context.Context) error {
	names, _ := order(a.opts.Targets)
	if err := a.startBus(); err != nil {
		return err
	}
	defer a.stopBus()
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := events.Ensure(setupCtx, a.js, a.opts.Edge.Streams)
	cancel()
	if err != nil {
		return err
	}

	for _, n := range names {
		m := modules[n]
		if m.build == nil {
			continue
		}
		run, ready, err := m.build(a)
		if err != nil {
			return moduleError(n, err)
		}
		if run == nil {
			continue // infrastructure, set up for the modules after it
		}
		a.mu.Lock()
		a.states = append(a.states, &state{name: n, run: run, ready: ready})
		a.mu.Unlock()
	}

	type exit struct {
		name string
		err  error
	}
	exits := make(chan exit, len(a.states))
	cancels := make([]context.CancelFunc, len(a.states))
	dones := make([]chan struct{}, len(a.states))
	for i, s := range a.states {
		mctx, mcancel := context.WithCancel(context.Background())
		cancels[i] = mcancel
		dones[i] = make(chan struct{})
		go func(i int, s *state) {
			defer close(dones[i])
			err := s.run(mctx)
			exits <- exit{s.name, err}
		}(i, s)
		a.log.Info("module started", "module", s.name)
	}

	var failure error
	select {
	case <-ctx.Done():
		a.log.Info("shutting down")
	case e := <-exits:
		if e.err != nil {
			failure = moduleError(e.name, e.err)
		} else {
			failure = fmt.Errorf("%s stopped unexpectedly", e.name)
		}
		a.log.Error("module failed; stopping everything", "module", e.name, "err", failure)
	}
	for i := len(a.states) - 1; i >= 0; i-- {
		cancels[i]()
		<-dones[i]
		a.log.Info("module stopped", "module", a.states[i].name)
	}
	return failure
}

func (a *App) startBus() error {
	if a.opts.NATSURL != "" {
		opts := []nats.Option{natsutil.LogAsyncErrors(a.log)}
		if id := a.identity(); id != "" {
			opts = append(opts, nats.CustomInboxPrefix(busauth.InboxPrefix(id)))
		}
		nc, err := natsutil.Dial(a.opts.NATSURL, "aiforge", a.opts.NATS, opts...)
		if err != nil {
			return err
		}
		a.log.Info("connected to NATS", "url", natsutil.RedactURL(a.opts.NATSURL), "auth", a.opts.NATS.Method())
		a.nc = nc
	} else {
		if a.opts.DataDir == "" {
			return errors.New("a data dir is required for the embedded bus")
		}
		dir := a.CredsDir()
		ids, err := busauth.LoadOrCreate(dir)
		if err != nil {
			return err
		}
		users, err := busauth.ServerUsers(ids)
		if err != nil {
			return err
		}
		a.ids = ids
		cfg := natsutil.EmbeddedConfig{StoreDir: filepath.Join(a.opts.DataDir, "jetstream"), DontListen: true, Users: users, TLS: a.opts.NATSListenTLS}
		if a.opts.NATSListen != "" {
			host, port, err := net.SplitHostPort(a.opts.NATSListen)
			if err != nil {
				return fmt.Errorf("nats listen address: %w", err)
			}
			cfg.DontListen = false
			cfg.Host = host
			if _, err := fmt.Sscanf(port, "%d", &cfg.Port); err != nil {
				return fmt.Errorf("nats listen port: %w", err)
			}
		}
		srv, err := natsutil.StartEmbedded(cfg)
		if err != nil {
			return err
		}
		a.srv = srv
		// The process's own connection (provisioning, in-process tools)
		// is the admin identity.
		nc, err := natsutil.ConnectInProcess(srv, "aiforge", ids[busauth.Admin].Option(), natsutil.LogAsyncErrors(a.log))
		if err != nil {
			srv.Shutdown()
			return err
		}
		a.nc = nc
		if !cfg.DontListen {
			a.log.Info("NATS listening; clients authenticate with the nkeys in the credentials dir", "url", srv.ClientURL(), "credentials", dir)
			if a.opts.OnNATSListen != nil {
				a.opts.OnNATSListen(srv.ClientURL(), dir)
			}
		}
	}
	js, err := jetstream.New(a.nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	a.js = js
	return nil
}

// CredsDir is where the embedded server keeps its identities.
func (a *App) CredsDir() string {
	if a.opts.NATSCredsDir != "" {
		return a.opts.NATSCredsDir
	}
	if a.opts.DataDir == "" {
		return ""
	}
	return filepath.Join(a.opts.DataDir, "nats")
}

// identity is the one service identity every target of the process runs
// as, or "" when they differ (then the process needs a credential allowed
// everything its targets do, such as admin).
func (a *App) identity() string {
	names, _ := order(a.opts.Targets)
	id := ""
	for _, n := range names {
		s := busauth.ServiceOf(n)
		if s == "" {
			continue
		}
		if id != "" && s != id {
			return ""
		}
		id = s
	}
	return id
}

// bus is the connection a module uses: with the embedded server, its own
// in-process connection as its service's identity (so a permission the
// table lacks fails here as it would across the network); with an
// external NATS, the process's connection.
func (a *App) bus(module string) (*nats.Conn, jetstream.JetStream, error) {
	id := busauth.ServiceOf(module)
	if a.srv == nil || id == "" {
		return a.nc, a.js, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conns == nil {
		a.conns = map[string]*nats.Conn{}
	}
	nc := a.conns[module]
	if nc == nil {
		var err error
		nc, err = natsutil.ConnectInProcess(a.srv, "aiforge-"+module, a.ids[id].Option(), natsutil.LogAsyncErrors(a.log.With("module", module)))
		if err != nil {
			return nil, nil, err
		}
		a.conns[module] = nc
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

func (a *App) stopBus() {
	a.mu.Lock()
	conns := make([]*nats.Conn, 0, len(a.conns)+1)
	for _, nc := range a.conns {
		conns = append(conns, nc)
	}
	a.mu.Unlock()
	if a.nc != nil {
		conns = append(conns, a.nc) // last: the admin connection
	}
	for _, nc := range conns {
		_ = nc.Drain()
		for nc.IsDraining() {
			time.Sleep(5 * time.Millisecond)
		}
		nc.Close()
	}
	if a.srv != nil {
		a.srv.Shutdown()
		a.srv.WaitForShutdown()
	}
	if a.ownTracer != nil {
		_ = a.ownTracer.Shutdown(context.Background())
	}
}

func (a *App) tracer() trace.TracerProvider { return a.Tracer }

func (a *App) adminKey() (string, error) {
	if a.opts.AdminKey != "" {
		return a.opts.AdminKey, nil
	}
	if a.opts.DataDir == "" {
		return "", errors.New("an admin key is required (AIFORGE_ADMIN_KEY) when there is no data dir")
	}
	path := filepath.Join(a.opts.DataDir, "admin.key")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	key := "ak-" + base64.RawURLEncoding.EncodeToString(raw[:])
	if err := os.MkdirAll(a.opts.DataDir, 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("store admin key: %w", err)
	}
	if a.opts.OnAdminKey != nil {
		a.opts.OnAdminKey(key, path)
	}
	return key, nil
}

func (a *App) buildEdge() (func(context.Context) error, func() bool, error) {
	nc, js, err := a.bus("edge")
	if err != nil {
		return nil, nil, err
	}
	cfg := a.opts.Edge
	cfg.Listen = a.opts.Listen
	key, err := a.adminKey()
	if err != nil {
		return nil, nil, err
	}
	cfg.AdminKey = key
	if _, cfg.SecretsKey, err = a.secretsKeys(); err != nil {
		return nil, nil, err
	}
	objects := a.store
	e, err := edge.New(cfg, edge.Deps{
		NC: nc, JS: js, Logger: a.log, Registerer: a.metrics, Gatherer: a.Registry,
		Tracer: a.tracer(), Listener: a.opts.EdgeListener, Ready: a.Ready, Objects: objects,
	})
	if err != nil {
		return nil, nil, err
	}
	a.mu.Lock()
	a.edge = e
	a.mu.Unlock()
	// The edge's own readiness includes a.Ready; report only its part here.
	return e.Run, func() bool { return e.Addr() != "" }, nil
}

// buildObjects opens the process's one object store: S3 when configured,
// else a directory in the data dir; none (the Files API and uploads answer
// storage_unavailable) when neither is available.
func (a *App) buildObjects() (func(context.Context) error, func() bool, error) {
	var err error
	switch {
	case a.opts.S3 != nil:
		a.store, err = objstore.NewS3(context.Background(), *a.opts.S3)
	case a.opts.DataDir != "":
		a.store, err = objstore.NewLocal(objstore.LocalConfig{Dir: filepath.Join(a.opts.DataDir, "objects")})
	}
	return nil, nil, err
}

// workerMetrics is shared by every worker of the process.
func (a *App) workerMetrics() (*worker.Metrics, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wm == nil {
		m, err := worker.NewMetrics(a.metrics)
		if err != nil {
			return nil, err
		}
		a.wm = m
	}
	return a.wm, nil
}

// buildNATS serves the bus alone: the embedded nats-server with JetStream,
// listening for other processes (`aiforge run nats`, a NATS for compose
// stacks that has no image to pull).
func (a *App) buildNATS() (func(context.Context) error, func() bool, error) {
	if a.srv == nil {
		return nil, nil, errors.New("the nats target runs the embedded server: give it a data dir and no NATS URL")
	}
	return func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	}, a.srv.Running, nil
}

func (a *App) buildSupervisor() (func(context.Context) error, func() bool, error) {
	nc, js, err := a.bus("workers")
	if err != nil {
		return nil, nil, err
	}
	m, err := a.workerMetrics()
	if err != nil {
		return nil, nil, err
	}
	// With an object store the workers also serve the catalog's published
	// LoRA adapters, materialised under DataDir/adapters, and materialise
	// each served model's deployed version under DataDir/models.
	objects := a.store
	scfg := supervisor.Config{WorkerDefaults: a.opts.WorkerDefaults}
	if scfg.SecretsKey, _, err = a.secretsKeys(); err != nil {
		return nil, nil, err
	}
	if a.opts.DataDir != "" {
		scfg.AdapterDir = filepath.Join(a.opts.DataDir, "adapters")
		scfg.ModelsDir = filepath.Join(a.opts.DataDir, "models")
		if scfg.WorkerDefaults.EngineDir == "" {
			// Supervised engines keep their files (an Ollama's models, the
			// engine log) with the process's data.
			scfg.WorkerDefaults.EngineDir = filepath.Join(a.opts.DataDir, "engines")
		}
	}
	sup, err := supervisor.New(scfg,
		supervisor.Deps{NC: nc, JS: js, Logger: a.log, Metrics: m, Tracer: a.tracer(), Objects: objects})
	if err != nil {
		return nil, nil, err
	}
	return sup.Run, nil, nil
}

func (a *App) buildWorker() (func(context.Context) error, func() bool, error) {
	nc, js, err := a.bus("worker")
	if err != nil {
		return nil, nil, err
	}
	m, err := a.workerMetrics()
	if err != nil {
		return nil, nil, err
	}
	w, err := worker.New(a.opts.Worker, worker.Deps{NC: nc, JS: js, Logger: a.log, Metrics: m, Tracer: a.tracer()})
	if err != nil {
		return nil, nil, err
	}
	return w.Run, w.Ready, nil
}

func (a *App) buildUsage() (func(context.Context) error, func() bool, error) {
	nc, js, err := a.bus("usage")
	if err != nil {
		return nil, nil, err
	}
	cfg := a.opts.Usage
	cfg.Streams = a.opts.Edge.Streams
	u, err := usage.New(cfg, usage.Deps{NC: nc, JS: js, Logger: a.log, Registerer: a.metrics})
	if err != nil {
		return nil, nil, err
	}
	return u.Run, u.Ready, nil
}

// requireObjects is the object store of a service that cannot work
// without one.
func (a *App) requireObjects() (objstore.Store, error) {
	if a.store == nil {
		return nil, errors.New("an object store is needed: a data dir or S3")
	}
	return a.store, nil
}

func (a *App) buildIngest() (func(context.Context) error, func() bool, error) {
	nc, js, err := a.bus("ingest")
	if err != nil {
		return nil, nil, err
	}
	objects, err := a.requireObjects()
	if err != nil {
		return nil, nil, err
	}
	deps := ingest.Deps{NC: nc, JS: js, Objects: objects, Logger: a.log, Tracer: a.tracer(), Registerer: a.metrics}
	if len(a.opts.ParserCommand) > 0 {
		deps.Parser = &ingest.ChildProcess{Command: a.opts.ParserCommand}
	}
	s, err := ingest.New(ingest.Config{}, deps)
	if err != nil {
		return nil, nil, err
	}
	return s.Run, nil, nil
}

func (a *App) buildEmbedder() (func(context.Context) error, func() bool, error) {
	nc, js, err := a.bus("embedder")
	if err != nil {
		return nil, nil, err
	}
	objects, err := a.requireObjects()
	if err != nil {
		return nil, nil, err
	}
	s, err := embedder.New(embedder.Config{}, embedder.Deps{NC: nc, JS: js, Objects: objects, Logger: a.log, Tracer: a.tracer(), Registerer: a.metrics})
	if err != nil {
		return nil, nil, err
	}
	return s.Run, nil, nil
}

func (a *App) buildRetriever() (func(context.Context) error, func() bool, error) {
	nc, js, err := a.bus("retriever")
	if err != nil {
		return nil, nil, err
	}
	objects, err := a.requireObjects()
	if err != nil {
		return nil, nil, err
	}
	idx, err := a.openIndex()
	if err != nil {
		return nil, nil, err
	}
	s, err := retriever.New(retriever.Config{}, retriever.Deps{NC: nc, JS: js, Objects: objects, Index: idx, Logger: a.log, Tracer: a.tracer(), Registerer: a.metrics})
	if err != nil {
		_ = idx.Close()
		return nil, nil, err
	}
	return func(ctx context.Context) error {
		defer func() { _ = idx.Close() }()
		return s.Run(ctx)
	}, nil, nil
}

// openIndex opens the vector index chosen by Options.Retriever; a Qdrant that cannot be reached fails the start.
func (a *App) openIndex() (index.Index, error) {
	o := a.opts.Retriever
	switch o.Index {
	case "", IndexEmbedded:
		if a.opts.DataDir == "" {
			return nil, errors.New("the embedded vector index needs a data dir (or choose --vector-index qdrant)")
		}
		return embedded.Open(embedded.Config{Dir: filepath.Join(a.opts.DataDir, "index"), Logger: a.log})
	case IndexQdrant:
		if o.QdrantURL == "" {
			return nil, errors.New("--vector-index qdrant needs the address of Qdrant's gRPC API: --qdrant-url (or AIFORGE_QDRANT_URL), e.g. http://qdrant:6334")
		}
		cfg := o.Qdrant
		addr, useTLS, err := qdrant.ParseURL(o.QdrantURL)
		if err != nil {
			return nil, err
		}
		cfg.Addr, cfg.TLS = addr, useTLS || cfg.TLS
		if cfg.StatsRefresh == 0 {
			// Other replicas write to the same collection: pick up their BM25 statistics.
			cfg.StatsRefresh = time.Minute
		}
		if cfg.Logger == nil {
			cfg.Logger = a.log
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return qdrant.New(ctx, cfg)
	default:
		return nil, fmt.Errorf("unknown vector index %q (want %s or %s)", o.Index, IndexEmbedded, IndexQdrant)
	}
}

func (a *App) buildGuardian() (func(context.Context) error, func() bool, error) {
	_, js, err := a.bus("guardian")
	if err != nil {
		return nil, nil, err
	}
	objects, err := a.requireObjects()
	if err != nil {
		return nil, nil, err
	}
	cfg := a.opts.Guardian
	if cfg.ScratchDir == "" && a.opts.DataDir != "" {
		cfg.ScratchDir = filepath.Join(a.opts.DataDir, "scratch")
		if err := os.MkdirAll(cfg.ScratchDir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("guardian scratch dir: %w", err)
		}
	}
	// The private key opens the sealed credentials of the tenants' model
	// buckets; without one they are not watched (each is reported).
	priv, _, err := a.secretsKeys()
	if err != nil {
		return nil, nil, err
	}
	s, err := guardian.New(cfg, guardian.Deps{JS: js, Objects: objects, Logger: a.log, Registerer: a.metrics, SecretsKey: priv})
	if err != nil {
		return nil, nil, err
	}
	return s.Run, nil, nil
}

// buildBatch runs the batch service: batch validation, dispatch of their
// lines to the workers, output files, webhooks. The webhook signing
// secrets are sealed to the secrets key, so it needs the private key as
// the workers do.
func (a *App) buildBatch() (func(context.Context) error, func() bool, error) {
	nc, js, err := a.bus("batch")
	if err != nil {
		return nil, nil, err
	}
	objects, err := a.requireObjects()
	if err != nil {
		return nil, nil, err
	}
	priv, _, err := a.secretsKeys()
	if err != nil {
		return nil, nil, err
	}
	s, err := batchsvc.New(a.opts.Batch, batchsvc.Deps{NC: nc, JS: js, Objects: objects, SecretsKey: priv, Logger: a.log, Registerer: a.metrics, Tracer: a.tracer()})
	if err != nil {
		return nil, nil, err
	}
	return s.Run, s.Ready, nil
}

// buildSandbox runs the sandbox service: agent code containers in gVisor.
// Without runsc it still runs and answers creates 503 sandbox_unavailable,
// so `aiforge up` works on a machine without gVisor.
func (a *App) buildSandbox() (func(context.Context) error, func() bool, error) {
	nc, js, err := a.bus("sandbox")
	if err != nil {
		return nil, nil, err
	}
	objects, err := a.requireObjects()
	if err != nil {
		return nil, nil, err
	}
	cfg := a.opts.Sandbox
	if cfg.Node == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "sandbox"
		}
		cfg.Node = events.Token(host)
	}
	if cfg.StateDir == "" {
		if a.opts.DataDir == "" {
			return nil, nil, errors.New("sandbox: a data dir or --sandbox-state-dir is required")
		}
		cfg.StateDir = filepath.Join(a.opts.DataDir, "sandbox")
	}
	s, err := sandboxsvc.New(cfg, sandboxsvc.Deps{NC: nc, JS: js, Objects: objects, Logger: a.log, Registerer: a.metrics, Tracer: a.tracer()})
	if err != nil {
		return nil, nil, err
	}
	return s.Run, s.Ready, nil
}

// Store opens the registry on the process's bus (for in-process tools).
func (a *App) Store(ctx context.Context) (*registry.Store, error) { return registry.Open(ctx, a.js) }
