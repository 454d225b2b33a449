package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/services/guardian"
	"github.com/aiforge/aiforge/services/worker"
)

type serveFlags struct {
	dataDir    string
	listen     string
	natsURL    string
	natsListen string
	logLevel   string
	grace      time.Duration
	idle       time.Duration
	maxConns   int
	retention  time.Duration
	hubURL     string
	hubHosts   []string
	index      vectorIndexFlags
}

func (f *serveFlags) add(c *cobra.Command, embedded bool) {
	c.Flags().StringVar(&f.listen, "listen", env("AIFORGE_LISTEN", "127.0.0.1:8080"), "HTTP address of the API (edge)")
	c.Flags().StringVar(&f.logLevel, "log-level", env("AIFORGE_LOG_LEVEL", "info"), "debug, info, warn or error")
	c.Flags().DurationVar(&f.grace, "shutdown-grace", 30*time.Second, "how long open streams may finish on shutdown")
	c.Flags().DurationVar(&f.idle, "idle-timeout", 90*time.Second, "edge: close keep-alive connections idle this long")
	c.Flags().IntVar(&f.maxConns, "max-connections", 10000, "edge: client connections open at once; more are answered 503")
	c.Flags().DurationVar(&f.retention, "usage-retention", 0, "how long raw usage events are kept (0 = forever; the audit replays them)")
	c.Flags().StringVar(&f.hubURL, "hub-url", env("AIFORGE_HUB_URL", guardian.DefaultHubURL), "guardian: the model hub the mirror pulls from (token from AIFORGE_HUB_TOKEN or HF_TOKEN)")
	c.Flags().StringSliceVar(&f.hubHosts, "hub-redirect-hosts", nil, "guardian: hosts hub downloads may be redirected to (default: the huggingface.co CDNs)")
	f.index.add(c)
	if embedded {
		c.Flags().StringVar(&f.dataDir, "data-dir", env("AIFORGE_DATA_DIR", "./aiforge-data"), "directory for the embedded JetStream store, the admin key, objects and served model files (made absolute at start)")
		c.Flags().StringVar(&f.natsListen, "nats-listen", env("AIFORGE_NATS_LISTEN", ""), "also expose the embedded NATS on this address (e.g. 127.0.0.1:4222) for \"aiforge run\" sidecars")
	} else {
		c.Flags().StringVar(&f.natsURL, "nats-url", env("AIFORGE_NATS_URL", "nats://127.0.0.1:4222"), "external NATS with JetStream")
		c.Flags().StringVar(&f.dataDir, "data-dir", env("AIFORGE_DATA_DIR", ""), "directory for the shared object store (objects/, unless AIFORGE_S3_* is set), the retriever's embedded index, the workers' models and adapters, and the edge's admin.key when AIFORGE_ADMIN_KEY is unset (nats: the JetStream store)")
		c.Flags().StringVar(&f.natsListen, "nats-listen", env("AIFORGE_NATS_LISTEN", ""), "nats: the address to serve the bus on (default 0.0.0.0:4222)")
	}
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
		Targets: targets, DataDir: f.dataDir, NATSURL: f.natsURL, NATSListen: f.natsListen,
		Listen: f.listen, AdminKey: os.Getenv("AIFORGE_ADMIN_KEY"), Logger: log,
		OnAdminKey: func(key, path string) {
			fmt.Fprintf(os.Stderr, "Generated an admin key (shown once; stored with mode 0600 in %s):\n\n    export AIFORGE_ADMIN_KEY=%s\n\n", path, key)
		},
	}
	o.Edge.ShutdownGrace = f.grace
	o.Edge.IdleTimeout = f.idle
	o.Edge.MaxConnections = f.maxConns
	o.Edge.Streams.UsageMaxAge = f.retention
	o.WorkerDefaults.DrainTimeout = f.grace
	s3, err := s3FromEnv()
	if err != nil {
		return app.Options{}, err
	}
	o.S3 = s3
	if o.Retriever, err = f.index.options(); err != nil {
		return app.Options{}, err
	}
	o.Guardian.HubURL = f.hubURL
	o.Guardian.HubRedirectHosts = f.hubHosts
	// The hub token comes from the environment only, never a flag (flags
	// show in process listings).
	o.Guardian.HubToken = os.Getenv("AIFORGE_HUB_TOKEN")
	if o.Guardian.HubToken == "" {
		o.Guardian.HubToken = os.Getenv("HF_TOKEN")
	}
	return o, nil
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
			o, err := f.options([]string{"all"})
			if err != nil {
				return err
			}
			// Bind before saying where the API is: a busy port is an
			// error here, not a printed URL followed by a failure.
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
	var engineKeyEnv string
	c := &cobra.Command{
		Use:   "run TARGET",
		Short: "Run one service against an external NATS (targets: " + strings.Join(app.Targets(), ", ") + ")",
		Long: `Run one service against an external NATS cluster, for per-service scaling.

Targets: ` + strings.Join(app.Targets(), ", ") + `.

The services that keep blobs share one object store: a --data-dir they all use (objects/ under it)
or an S3 bucket (AIFORGE_S3_*). The guardian, ingest, embedder and retriever do not start without
one; without one the edge answers storage_unavailable on its file and upload APIs, and the workers
serve no LoRA adapters.

The edge (targets edge and all) needs the admin key: set AIFORGE_ADMIN_KEY, the same value on every
edge replica, or give --data-dir, where the key is read from admin.key (or generated there, mode 0600,
and printed once). The other targets need no key.

  export AIFORGE_ADMIN_KEY=ak-...   # e.g. openssl rand -base64 32, or the one aiforge up printed
  aiforge run edge    --nats-url nats://nats:4222 --listen 0.0.0.0:8080
  aiforge run workers --nats-url nats://nats:4222     # workers for every registered model
  aiforge run worker  --nats-url nats://nats:4222 --model chat-small \
      --engine-url http://127.0.0.1:8000/v1 --engine-model Qwen/Qwen2.5-7B-Instruct   # sidecar next to an engine`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
			}
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
			return a.Run(cmd.Context())
		},
	}
	f.add(c, false)
	c.Flags().StringVar(&w.Model, "model", "", "worker: the served model name")
	c.Flags().StringVar(&w.Engine.BaseURL, "engine-url", "", "worker: the engine's OpenAI base URL, ending in /v1")
	c.Flags().StringVar(&w.Engine.Model, "engine-model", "", "worker: the model name the engine serves")
	c.Flags().IntVar(&w.Engine.MaxConcurrency, "max-concurrency", 0, "worker: requests sent to the engine at once (default 64)")
	c.Flags().StringVar(&engineKeyEnv, "engine-api-key-env", "AIFORGE_ENGINE_API_KEY", "worker: environment variable holding the engine's API key")
	return c
}
