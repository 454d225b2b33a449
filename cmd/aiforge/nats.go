package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natsutil"
)

func natsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "nats",
		Short: "Bus identities and permissions: a nats-server configuration, provisioning",
		Long: `Every aiforge service authenticates to NATS with its own nkey and may publish and subscribe only what
it needs (pkg/busauth; ARCHITECTURE.md, "Trust boundaries"). "aiforge run nats" and "aiforge up" do all of
this themselves; these commands are for an external nats-server (Kubernetes, a managed cluster).

  aiforge nats config --out ./nats-creds > nats-server.conf   # one <service>.nk (0600) per service and admin
  nats-server -c nats-server.conf
  aiforge nats provision --nats-url nats://nats:4222 --nats-nkey ./nats-creds/admin.nk
  aiforge run edge --nats-url nats://nats:4222 --nats-nkey ./nats-creds/edge.nk`,
	}
	c.AddCommand(natsConfigCmd(), natsProvisionCmd(), natsLeadersCmd())
	return c
}

func natsConfigCmd() *cobra.Command {
	var out string
	var sc busauth.ServerConfig
	c := &cobra.Command{
		Use:   "config",
		Short: "Write one nkey seed per service (mode 0600) and print a nats-server configuration with their permissions",
		Long: `Writes <out>/<identity>.nk for every service identity and admin (kept when they exist, so running it
again prints the same users), writes <out>/nats-server.conf and prints it. The configuration holds only
public keys; mount each seed into its service only (a Kubernetes Secret per service, a compose secret).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ids, err := busauth.LoadOrCreate(out)
			if err != nil {
				return err
			}
			conf, err := busauth.ServerConf(ids, sc)
			if err != nil {
				return err
			}
			path := filepath.Join(out, "nats-server.conf")
			if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), conf)
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s and one nkey seed per identity (mode 0600): %s\n", path, filepath.Join(out, "<identity>.nk"))
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "./nats-creds", "directory for the seeds and nats-server.conf")
	c.Flags().StringVar(&sc.Listen, "listen", "0.0.0.0:4222", "the server's client listener")
	c.Flags().StringVar(&sc.StoreDir, "store-dir", "/data/jetstream", "JetStream's store directory")
	c.Flags().StringVar(&sc.ServerName, "server-name", "aiforge", "the server's name")
	c.Flags().StringVar(&sc.TLSCert, "tls-cert", "", "server certificate (PEM): require TLS of every client")
	c.Flags().StringVar(&sc.TLSKey, "tls-key", "", "the server certificate's key (PEM)")
	c.Flags().StringVar(&sc.TLSCA, "tls-ca", "", "CA of client certificates: require mutual TLS")
	return c
}

func natsProvisionCmd() *cobra.Command {
	var url string
	var auth natsAuthFlags
	var so events.StreamOptions
	c := &cobra.Command{
		Use:   "provision",
		Short: "Create the streams and KV buckets of the bus contract (with the admin identity)",
		Long: `Services may not create or change streams and buckets; this does, once per cluster and after an upgrade
that changes them. Give it the admin identity. Every stream and bucket gets --stream-replicas replicas,
including ones created earlier with another count (an R1 bus becomes R3 keeping its data, and back);
give every service the same value (AIFORGE_STREAM_REPLICAS), or it refuses to start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			co, err := auth.options()
			if err != nil {
				return err
			}
			nc, err := natsutil.Dial(url, "aiforge-provision", co)
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			if err := events.Ensure(ctx, js, so); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "provisioned %d streams and %d buckets with %d replicas on %s\n",
				len(events.Streams(so)), len(events.Buckets(so)), max(so.Replicas, 1), natsutil.RedactURL(url))
			return nil
		},
	}
	c.Flags().StringVar(&url, "nats-url", env("AIFORGE_NATS_URL", "nats://127.0.0.1:4222"), "NATS with JetStream")
	c.Flags().IntVar(&so.Replicas, "stream-replicas", envInt("AIFORGE_STREAM_REPLICAS", 1), "stream and bucket replicas (3 on a cluster; give the services the same)")
	c.Flags().DurationVar(&so.UsageMaxAge, "usage-retention", 0, "how long raw usage events are kept (0 = forever; must match the services' --usage-retention)")
	auth.add(c)
	return c
}
