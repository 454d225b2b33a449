// Command aiforge is the one binary of aiforge: `aiforge up` runs every
// service with an embedded NATS, `aiforge run <target>` runs one against an
// external NATS, and the other commands are clients of the API.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	parser = parserCommand()
	root := newRoot()
	if err := root.ExecuteContext(ctx); err != nil {
		var exit *exitCodeError
		if errors.As(err, &exit) {
			stop()
			os.Exit(exit.code) // the sandboxed code's own status
		}
		var ae *cli.APIError
		if errors.As(err, &ae) {
			fmt.Fprintln(os.Stderr, "error:", ae.Error())
		} else {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "aiforge",
		Short:         "aiforge: a sovereign AI inference platform on NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
		// A number or duration from the environment that does not parse is
		// an error, not a silent fallback to the default.
		PersistentPreRunE: func(*cobra.Command, []string) error { return checkEnv() },
	}
	root.AddCommand(upCmd(), runCmd(), tenantsCmd(), keysCmd(), modelsCmd(), routersCmd(), cacheCmd(), promptsCmd(), usageCmd(), batchesCmd(), sandboxCmd(), containersCmd(), evalCmd(), enginesimCmd(), benchCmd(), loadgenCmd(), natsCmd(), secretsCmd(), parseCmd(), healthcheckCmd())
	return root
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
