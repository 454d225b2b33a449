package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/natsutil"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/services/batch"
	"github.com/aiforge/aiforge/services/guardian"
	"github.com/aiforge/aiforge/services/guardian/bucket"
	sandboxsvc "github.com/aiforge/aiforge/services/sandbox"
	"github.com/aiforge/aiforge/services/usage"
	"github.com/aiforge/aiforge/services/worker"
)

type serveFlags struct {
	dataDir                       string
	listen                        string
	natsURL                       string
	natsListen                    string
	natsAuth                      natsAuthFlags
	listenTLS                     [3]string // the served bus's certificate, key and client CA
	credsDir                      string
	logLevel                      string
	grace                         time.Duration
	coldStartWait                 time.Duration
	drainDelay                    time.Duration
	idle                          time.Duration
	maxConns                      int
	consoleSecure                 bool
	holdTTL                       time.Duration
	classifierURL, classifierMode string
	cooldownN                     int
	cooldown                      time.Duration
	retention                     time.Duration
	responsesRetention            time.Duration
	dedup                         time.Duration
	replicas                      int
	hubURL                        string
	hubHosts                      []string
	oci                           ociFlags
	bucketPoll                    time.Duration
	index                         vectorIndexFlags
	batch                         batchFlags
	// sandbox is the sandbox service's configuration, filled by its own
	// flags (sandboxsvc.Config.RegisterFlags: --sandbox-...).
	sandbox sandboxsvc.Config
}

// batchFlags tune the batch service.
type batchFlags struct {
	window   time.Duration
	ackWait  time.Duration
	capacity int64
}

func (b *batchFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.DurationVar(&b.window, "batch-window", envDuration("AIFORGE_BATCH_WINDOW", batch.DefaultWindow), "batch: how long a batch's lines may run before they expire (at most the 24h OpenAI's completion_window names; shorter for tests)")
	fl.DurationVar(&b.ackWait, "batch-ack-wait", envDuration("AIFORGE_BATCH_ACK_WAIT", batch.DefaultAckWait), "batch: how long a line taken by a batch service that stopped answering for it waits before another takes it (at least 3s)")
	fl.Int64Var(&b.capacity, "batch-default-capacity", int64(envInt("AIFORGE_BATCH_DEFAULT_CAPACITY", batch.DefaultCapacity)), "batch: lines of a model in flight at once when its workers report no slots")
}

func (f *serveFlags) add(c *cobra.Command, embedded bool) {
	c.Flags().StringVar(&f.listen, "listen", env("AIFORGE_LISTEN", "127.0.0.1:8080"), "HTTP address of the API (edge)")
	c.Flags().StringVar(&f.logLevel, "log-level", env("AIFORGE_LOG_LEVEL", "info"), "debug, info, warn or error")
	c.Flags().DurationVar(&f.grace, "shutdown-grace", 30*time.Second, "how long open streams may finish on shutdown")
	c.Flags().DurationVar(&f.coldStartWait, "cold-start-wait", envDuration("AIFORGE_COLD_START_WAIT", worker.DefaultColdStartWait), "workers: how long a request waits for an engine scaled to zero (models register --idle-stop) to start; past it the answer is 503 model_warming with Retry-After, and the engine goes on starting")
	c.Flags().DurationVar(&f.drainDelay, "drain-delay", envDuration("AIFORGE_DRAIN_DELAY", 0), "edge: on shutdown, go on serving this long with readiness off and \"Connection: close\" on every response, so a load balancer and kept-alive clients leave it before it stops accepting (behind a load balancer: a few seconds)")
	c.Flags().DurationVar(&f.idle, "idle-timeout", 90*time.Second, "edge: close keep-alive connections idle this long")
	c.Flags().IntVar(&f.maxConns, "max-connections", 10000, "edge: client connections open at once; more are answered 503")
	c.Flags().BoolVar(&f.consoleSecure, "console-secure-cookies", env("AIFORGE_CONSOLE_SECURE_COOKIES", "") == "true", "edge: mark the web console's session cookie Secure on plain HTTP too (behind a TLS proxy that sends no X-Forwarded-Proto)")
	c.Flags().IntVar(&f.cooldownN, "cooldown-failures", envInt("AIFORGE_COOLDOWN_FAILURES", 3), "edge: consecutive retryable failures of an engine after which this edge skips it for --cooldown (negative: never)")
	c.Flags().DurationVar(&f.cooldown, "cooldown", envDuration("AIFORGE_COOLDOWN", 30*time.Second), "edge: how long an engine that failed --cooldown-failures times in a row is skipped")
	c.Flags().StringVar(&f.classifierURL, "admission-classifier-url", env("AIFORGE_ADMISSION_CLASSIFIER_URL", ""), "edge: an external prompt classifier over HTTP (for example Llama Prompt Guard 2 behind TEI: http://guard:8080/predict), combined with the built-in one")
	c.Flags().StringVar(&f.classifierMode, "admission-classifier-mode", env("AIFORGE_ADMISSION_CLASSIFIER_MODE", "max"), "edge: with --admission-classifier-url: max (the higher score of both per category) or external_only")
	c.Flags().DurationVar(&f.holdTTL, "reservation-ttl", envDuration("AIFORGE_RESERVATION_TTL", 15*time.Minute), "edge: how long a hard budget's reservation counts when its request never settles (an edge or worker killed mid-request); must exceed the longest request")
	c.Flags().DurationVar(&f.retention, "usage-retention", 0, "how long raw usage events are kept (0 = forever; the audit replays them)")
	c.Flags().DurationVar(&f.responsesRetention, "responses-retention", envDuration("AIFORGE_RESPONSES_RETENTION", 30*24*time.Hour), "edge: how long a stored response (/v1/responses with store true) can be read and chained onto")
	c.Flags().DurationVar(&f.dedup, "usage-dedup-horizon", usage.DefaultDedupHorizon, "usage: how long, in event time, the ledger remembers event ids to drop duplicates (memory: about 47 bytes per request in it)")
	c.Flags().IntVar(&f.replicas, "stream-replicas", envInt("AIFORGE_STREAM_REPLICAS", 1), "replicas of the streams and buckets (3 on a NATS cluster; the same value aiforge nats provision was given)")
	c.Flags().StringVar(&f.hubURL, "hub-url", env("AIFORGE_HUB_URL", guardian.DefaultHubURL), "guardian: the model hub the mirror pulls from (token from AIFORGE_HUB_TOKEN or HF_TOKEN)")
	c.Flags().StringSliceVar(&f.hubHosts, "hub-redirect-hosts", nil, "guardian: hosts hub downloads may be redirected to (default: the huggingface.co CDNs)")
	c.Flags().DurationVar(&f.bucketPoll, "bucket-poll", envDuration("AIFORGE_BUCKET_POLL", bucket.DefaultPollInterval), "guardian: how often each tenant's model bucket is listed for new model folders (a configuration change lists at once)")
	f.index.add(c)
	f.batch.add(c)
	f.oci.add(c)
	gofs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	f.sandbox.RegisterFlags(gofs)
	c.Flags().AddGoFlagSet(gofs)
	if embedded {
		c.Flags().StringVar(&f.dataDir, "data-dir", env("AIFORGE_DATA_DIR", "./aiforge-data"), "directory for the embedded JetStream store, the admin key, objects and served model files (made absolute at start)")
		c.Flags().StringVar(&f.natsListen, "nats-listen", env("AIFORGE_NATS_LISTEN", ""), "also expose the embedded NATS on this address (e.g. 127.0.0.1:4222) for \"aiforge run\" sidecars; clients authenticate with the nkeys in --nats-creds-dir")
		c.Flags().StringVar(&f.credsDir, "nats-creds-dir", env("AIFORGE_NATS_CREDS_DIR", ""), "where the embedded NATS keeps one nkey seed per service and admin (<name>.nk, mode 0600; created on first start; default <data-dir>/nats)")
	} else {
		c.Flags().StringVar(&f.natsURL, "nats-url", env("AIFORGE_NATS_URL", "nats://127.0.0.1:4222"), "external NATS with JetStream")
		c.Flags().StringVar(&f.dataDir, "data-dir", env("AIFORGE_DATA_DIR", ""), "directory for the shared object store (objects/, unless AIFORGE_S3_* is set), the retriever's embedded index, the workers' models and adapters, and the edge's admin.key when AIFORGE_ADMIN_KEY is unset (nats: the JetStream store)")
		c.Flags().StringVar(&f.natsListen, "nats-listen", env("AIFORGE_NATS_LISTEN", ""), "nats: the address to serve the bus on (default 0.0.0.0:4222)")
		c.Flags().StringVar(&f.credsDir, "nats-creds-dir", env("AIFORGE_NATS_CREDS_DIR", ""), "nats: where the served bus keeps one nkey seed per service and admin (<name>.nk, mode 0600; created on first start; default <data-dir>/nats)")
		f.natsAuth.add(c)
	}
	c.Flags().StringVar(&f.listenTLS[0], "nats-listen-tls-cert", env("AIFORGE_NATS_LISTEN_TLS_CERT", ""), "the served bus (--nats-listen): require TLS with this server certificate (PEM)")
	c.Flags().StringVar(&f.listenTLS[1], "nats-listen-tls-key", env("AIFORGE_NATS_LISTEN_TLS_KEY", ""), "the served bus: the certificate's key (PEM)")
	c.Flags().StringVar(&f.listenTLS[2], "nats-listen-tls-ca", env("AIFORGE_NATS_LISTEN_TLS_CA", ""), "the served bus: also require client certificates signed by this CA (mutual TLS)")
}

func (f *serveFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), nil
}

func (f *serveFlags) options(targets []string) (app.Options, error) {
	log, err := f.logger()
	if err != nil {
		return app.Options{}, err
	}
	o := app.Options{
		ParserCommand: parser,
		Targets:       targets, DataDir: f.dataDir, NATSURL: f.natsURL, NATSListen: f.natsListen,
		NATSCredsDir: f.credsDir, OnNATSListen: printNATSCreds,
		Listen: f.listen, AdminKey: os.Getenv("AIFORGE_ADMIN_KEY"), Logger: log,
		OnAdminKey: adminKeyReporter(os.Stderr, isTerminal(os.Stderr), log),
		// Paths, not keys: the files hold the key material.
		SecretsKeyFile:       os.Getenv("AIFORGE_SECRETS_KEY_FILE"),
		SecretsPublicKeyFile: os.Getenv("AIFORGE_SECRETS_PUBLIC_KEY_FILE"),
	}
	if o.NATS, err = f.natsAuth.options(); err != nil {
		return app.Options{}, err
	}
	if f.listenTLS[0] != "" || f.listenTLS[1] != "" {
		if o.NATSListenTLS, err = natsutil.ServerTLS(f.listenTLS[0], f.listenTLS[1], f.listenTLS[2]); err != nil {
			return app.Options{}, err
		}
	}
	o.Edge.ShutdownGrace = f.grace
	o.Edge.DrainDelay = f.drainDelay
	o.Edge.IdleTimeout = f.idle
	o.Edge.MaxConnections = f.maxConns
	o.Edge.ConsoleSecureCookies = f.consoleSecure
	o.Edge.ReservationTTL = f.holdTTL
	o.Edge.ClassifierURL, o.Edge.ClassifierMode = f.classifierURL, f.classifierMode
	o.Edge.CooldownFailures = f.cooldownN
	o.Edge.Cooldown = f.cooldown
	o.Edge.Streams.UsageMaxAge = f.retention
	o.Edge.ResponsesRetention = f.responsesRetention
	o.Usage.DedupHorizon = f.dedup
	o.Edge.Streams.Replicas = f.replicas
	o.WorkerDefaults.DrainTimeout = f.grace
	o.WorkerDefaults.ColdStartWait = f.coldStartWait
	s3, err := s3FromEnv()
	if err != nil {
		return app.Options{}, err
	}
	o.S3 = s3
	if o.Retriever, err = f.index.options(); err != nil {
		return app.Options{}, err
	}
	o.Batch.Window = f.batch.window
	o.Batch.AckWait = f.batch.ackWait
	o.Batch.DefaultCapacity = f.batch.capacity
	o.Sandbox = f.sandbox
	o.Guardian.HubURL = f.hubURL
	o.Guardian.HubRedirectHosts = f.hubHosts
	f.oci.apply(&o.Guardian)
	o.Guardian.Buckets.PollInterval = f.bucketPoll
	// The hub token comes from the environment only, never a flag (flags
	// show in process listings).
	o.Guardian.HubToken = os.Getenv("AIFORGE_HUB_TOKEN")
	if o.Guardian.HubToken == "" {
		o.Guardian.HubToken = os.Getenv("HF_TOKEN")
	}
	return o, nil
}

// adminKeyReporter reports a generated admin key. On a terminal it is shown
// once; anywhere else stderr is the JSON log stream, read by collectors, so
// only the key file's path is logged, never the key.
func adminKeyReporter(stderr io.Writer, terminal bool, log *slog.Logger) func(key, path string) {
	return func(key, path string) {
		if !terminal {
			log.Info("generated an admin key; read it from its file (mode 0600) or set AIFORGE_ADMIN_KEY", "key_file", path)
			return
		}
		fmt.Fprintf(stderr, "Generated an admin key (shown once; stored with mode 0600 in %s):\n\n    export AIFORGE_ADMIN_KEY=%s\n\n", path, key)
	}
}

// envInt is an integer from the environment, def when unset or not a
// number.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

// checkEnv reports the numbers and durations of the environment that do
// not parse (envInt and envDuration fall back to their defaults, so the
// root command checks them before running anything).
func checkEnv() error {
	var errs []error
	for _, name := range []string{"AIFORGE_STREAM_REPLICAS", "AIFORGE_BATCH_DEFAULT_CAPACITY"} {
		if v := os.Getenv(name); v != "" {
			if _, err := strconv.Atoi(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q is not a whole number", name, v))
			}
		}
	}
	for _, name := range []string{"AIFORGE_RESERVATION_TTL", "AIFORGE_BATCH_WINDOW", "AIFORGE_BATCH_ACK_WAIT", "AIFORGE_COLD_START_WAIT", "AIFORGE_BUCKET_POLL"} {
		if v := os.Getenv(name); v != "" {
			if _, err := time.ParseDuration(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q is not a duration (e.g. 15m)", name, v))
			}
		}
	}
	return errors.Join(errs...)
}

// envDuration is a duration from the environment, def when unset or not a
// duration (checkEnv reports the latter).
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

// natsAuthFlags are how `aiforge run` authenticates to an external NATS and
// secures the connection. Passwords and tokens come from the environment
// only, never from flags (flags show in process listings).
type natsAuthFlags struct {
	creds, nkey, user      string
	tlsCA, tlsCert, tlsKey string
	tlsFirst               bool
}

func (n *natsAuthFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&n.creds, "nats-creds", env("AIFORGE_NATS_CREDS", ""), "NATS credentials file (JWT + nkey seed, operator mode)")
	fl.StringVar(&n.nkey, "nats-nkey", env("AIFORGE_NATS_NKEY", ""), "NATS nkey seed file (aiforge nats config writes one per service: <service>.nk)")
	fl.StringVar(&n.user, "nats-user", env("AIFORGE_NATS_USER", ""), "NATS user name (the password from AIFORGE_NATS_PASSWORD only; a token from AIFORGE_NATS_TOKEN only)")
	fl.StringVar(&n.tlsCA, "nats-tls-ca", env("AIFORGE_NATS_TLS_CA", ""), "CA certificate (PEM) that signed the NATS server's certificate; enables TLS")
	fl.StringVar(&n.tlsCert, "nats-tls-cert", env("AIFORGE_NATS_TLS_CERT", ""), "client certificate (PEM) for mutual TLS with NATS")
	fl.StringVar(&n.tlsKey, "nats-tls-key", env("AIFORGE_NATS_TLS_KEY", ""), "the client certificate's private key (PEM)")
	fl.BoolVar(&n.tlsFirst, "nats-tls-first", env("AIFORGE_NATS_TLS_FIRST", "") != "", "TLS handshake before the NATS greeting (servers with handshake_first)")
}

func (n *natsAuthFlags) options() (natsutil.ConnectOptions, error) {
	o := natsutil.ConnectOptions{
		CredsFile: n.creds, NKeyFile: n.nkey, User: n.user,
		Password: os.Getenv("AIFORGE_NATS_PASSWORD"), Token: os.Getenv("AIFORGE_NATS_TOKEN"),
		TLSCA: n.tlsCA, TLSCert: n.tlsCert, TLSKey: n.tlsKey, TLSFirst: n.tlsFirst,
	}
	if o.User == "" && o.Password != "" {
		return o, fmt.Errorf("AIFORGE_NATS_PASSWORD is set: give the user with --nats-user or AIFORGE_NATS_USER")
	}
	_, err := o.Options() // check the files now, not at the first dial
	return o, err
}

// printNATSCreds tells the operator where the embedded server's
// credentials are and how to use them.
func printNATSCreds(url, dir string) {
	fmt.Fprintf(os.Stderr, "NATS on %s requires authentication: one nkey seed per service (mode 0600) in %s\n\n"+
		"    nats --server %s --nkey %s stream ls\n"+
		"    aiforge run worker --nats-url %s --nats-nkey %s ...\n\n",
		url, dir, url, filepath.Join(dir, "admin.nk"), url, filepath.Join(dir, "worker.nk"))
}

// s3FromEnv configures an S3 object store (shared by the services that keep
// blobs: edge, ingest, embedder, guardian, workers) from AIFORGE_S3_*; nil
// keeps blobs under the data dir. Credentials come from the environment
// only, never from flags.
func s3FromEnv() (*objstore.S3Config, error) {
	endpoint := os.Getenv("AIFORGE_S3_ENDPOINT")
	if endpoint == "" {
		return nil, nil
	}
	c := &objstore.S3Config{
		Endpoint:        endpoint,
		Region:          os.Getenv("AIFORGE_S3_REGION"),
		Bucket:          os.Getenv("AIFORGE_S3_BUCKET"),
		AccessKeyID:     os.Getenv("AIFORGE_S3_ACCESS_KEY_ID"),
		SecretAccessKey: os.Getenv("AIFORGE_S3_SECRET_ACCESS_KEY"),
		UseSSL:          env("AIFORGE_S3_INSECURE", "") == "",
		CreateBucket:    env("AIFORGE_S3_CREATE_BUCKET", "") != "",
	}
	if c.Bucket == "" || c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return nil, fmt.Errorf("AIFORGE_S3_ENDPOINT is set: AIFORGE_S3_BUCKET, AIFORGE_S3_ACCESS_KEY_ID and AIFORGE_S3_SECRET_ACCESS_KEY are required too")
	}
	return c, nil
}

// listenAPI binds the edge's HTTP address.
func listenAPI(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("the API cannot listen on %s (--listen or AIFORGE_LISTEN): %w", addr, err)
	}
	return ln, nil
}

func upCmd() *cobra.Command {
	var f serveFlags
	c := &cobra.Command{
		Use:   "up",
		Short: "Run every service in one process with an embedded NATS JetStream",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			defaultMemoryLimit("/sys/fs/cgroup")
			o, err := f.options([]string{"all"})
			if err != nil {
				return err
			}
			// Bind before saying where the API is: a busy port is an
			// error here, not a printed URL followed by a failure.
			stopTracing, err := setupTracing(cmd.Context(), &o, "aiforge")
			if err != nil {
				return err
			}
			defer stopTracing()
			ln, err := listenAPI(f.listen)
			if err != nil {
				return err
			}
			o.EdgeListener = ln
			a, err := app.New(o)
			if err != nil {
				_ = ln.Close()
				return err
			}
			fmt.Fprintf(os.Stderr, "aiforge up: API on http://%s (data in %s); Ctrl-C stops\n", ln.Addr(), a.DataDir())
			return a.Run(cmd.Context())
		},
	}
	f.add(c, true)
	return c
}

func runCmd() *cobra.Command {
	var f serveFlags
	var w worker.Config
	var engineKeyEnv, healthListen string
	c := &cobra.Command{
		Use:   "run TARGET",
		Short: "Run one service against an external NATS (targets: " + strings.Join(app.Targets(), ", ") + ")",
		Long: `Run one service against an external NATS cluster, for per-service scaling.

Targets: ` + strings.Join(app.Targets(), ", ") + `.

The services that keep blobs share one object store: a --data-dir they all use (objects/ under it)
or an S3 bucket (AIFORGE_S3_*). The guardian, ingest, embedder, retriever and batch do not start without
one; without one the edge answers storage_unavailable on its file and upload APIs, and the workers
serve no LoRA adapters.

The edge (targets edge and all) needs the admin key: set AIFORGE_ADMIN_KEY, the same value on every
edge replica, or give --data-dir, where the key is read from admin.key (or generated there, mode 0600,
and printed once on a terminal; elsewhere only its path is logged). The other targets need no admin key.

Engine API keys and webhook signing secrets are stored sealed: the workers and batch targets open them
with the private key in AIFORGE_SECRETS_KEY_FILE (or secrets.key in --data-dir, generated there with
secrets.pub on first start);
the edge seals them with the public key in AIFORGE_SECRETS_PUBLIC_KEY_FILE (or secrets.pub in --data-dir).

  export AIFORGE_ADMIN_KEY=ak-...   # e.g. openssl rand -base64 32, or the one aiforge up printed
  aiforge run edge    --nats-url nats://nats:4222 --listen 0.0.0.0:8080
  aiforge run workers --nats-url nats://nats:4222     # workers for every registered model
  aiforge run worker  --nats-url nats://nats:4222 --model chat-small \
      --engine-url http://127.0.0.1:8000/v1 --engine-model Qwen/Qwen2.5-7B-Instruct   # sidecar next to an engine`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defaultMemoryLimit("/sys/fs/cgroup")
			o, err := f.options([]string{args[0]})
			if err != nil {
				return err
			}
			if args[0] == "nats" {
				// The bus itself: embedded, listening for the other services.
				o.NATSURL = ""
				if o.NATSListen == "" {
					o.NATSListen = env("AIFORGE_NATS_LISTEN", "0.0.0.0:4222")
				}
				if o.DataDir == "" {
					o.DataDir = "./aiforge-data"
				}
			}
			if args[0] == "worker" {
				if engineKeyEnv != "" {
					w.Engine.APIKey = os.Getenv(engineKeyEnv)
				}
				o.Worker = w
				o.Worker.ColdStartWait = f.coldStartWait
			}
			stopTracing, err := setupTracing(cmd.Context(), &o, serviceName(args[0]))
			if err != nil {
				return err
			}
			defer stopTracing()
			if args[0] == "edge" || args[0] == "all" {
				ln, err := listenAPI(f.listen)
				if err != nil {
					return err
				}
				o.EdgeListener = ln
			}
			a, err := app.New(o)
			if err != nil {
				if o.EdgeListener != nil {
					_ = o.EdgeListener.Close()
				}
				return err
			}
			if healthListen != "" {
				log := o.Logger
				if log == nil {
					log = slog.Default()
				}
				_, stop, err := serveHealth(healthListen, a.Ready, a.Registry, log)
				if err != nil {
					if o.EdgeListener != nil {
						_ = o.EdgeListener.Close()
					}
					return err
				}
				defer stop()
			}
			return a.Run(cmd.Context())
		},
	}
	f.add(c, false)
	c.Flags().StringVar(&healthListen, "health-listen", env("AIFORGE_HEALTH_LISTEN", ""), "serve GET /healthz (alive), GET /readyz (every module of this process ready: 200, else 503) and GET /metrics (Prometheus) on this address, for probes of targets without an HTTP port (\"aiforge healthcheck\")")
	c.Flags().StringVar(&w.Model, "model", "", "worker: the served model name")
	c.Flags().StringVar(&w.Engine.BaseURL, "engine-url", "", "worker: the engine's OpenAI base URL, ending in /v1")
	c.Flags().StringVar(&w.Engine.Model, "engine-model", "", "worker: the model name the engine serves")
	c.Flags().IntVar(&w.Engine.MaxConcurrency, "max-concurrency", 0, "worker: requests sent to the engine at once (default: what the engine reports, llama-server's /props total_slots, else 64)")
	c.Flags().StringVar(&engineKeyEnv, "engine-api-key-env", "AIFORGE_ENGINE_API_KEY", "worker: environment variable holding the engine's API key")
	return c
}
