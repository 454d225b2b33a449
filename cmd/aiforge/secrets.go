package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/pkg/sealed"
)

func secretsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "secrets",
		Short: "The key pair that seals engine API keys and webhook secrets on the bus",
		Long: `Engine API keys and webhook signing secrets are stored on the bus sealed to one public key
(pkg/sealed). The edge holds only the public key (AIFORGE_SECRETS_PUBLIC_KEY_FILE) and seals; the workers and
the batch service hold the private key (AIFORGE_SECRETS_KEY_FILE) and open. Every replica of them must hold
the same private key: generate it once and mount it into those services only.`,
	}
	c.AddCommand(secretsKeygenCmd())
	return c
}

func secretsKeygenCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "keygen",
		Short: "Write secrets.key (mode 0600) and secrets.pub, or keep the ones there",
		Long: `Writes <out>/secrets.key, the private key (mode 0600: mount it into the workers, the batch service and the guardian
only), and <out>/secrets.pub, its public half (for the edges). A key already there is kept, so running it again
changes nothing. Prints the key id, which sealed values name.

  aiforge secrets keygen --out ./nats-creds
  kubectl -n aiforge create secret generic aiforge-secrets-key --from-file=secrets.key=./nats-creds/secrets.key
  kubectl -n aiforge create secret generic aiforge-secrets-pub --from-file=secrets.pub=./nats-creds/secrets.pub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, pub := filepath.Join(out, "secrets.key"), filepath.Join(out, "secrets.pub")
			key, created, tooOpen, err := sealed.LoadOrCreate(path, pub)
			if err != nil {
				return err
			}
			if tooOpen {
				return fmt.Errorf("%s can be read by other users: chmod 600 it", path)
			}
			if !created {
				// The public half is derived again, so a lost or stale
				// secrets.pub is mended.
				if err := sealed.WritePublicKeyFile(pub, key.Public()); err != nil {
					return err
				}
			}
			verb := "kept"
			if created {
				verb = "generated"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s the secrets key %s: %s (private, mode 0600), %s (public)\n", verb, key.Public().ID(), path, pub)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "./nats-creds", "directory for secrets.key and secrets.pub")
	return c
}
