package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

func enginesimCmd() *cobra.Command {
	var listen string
	var cfg enginesim.Config
	c := &cobra.Command{
		Use:   "enginesim",
		Short: "Run the engine simulator (a test and benchmark tool, not a model)",
		Long: `Run aiforge's engine simulator: an OpenAI-compatible HTTP server that answers
deterministically, at a settable speed. It is a test and benchmark tool that stands
in for vLLM, llama-server, Ollama or TEI; it holds no model.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			sim := enginesim.New(cfg)
			srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(os.Stderr, "enginesim (test tool) serving %v on http://%s/v1\n", sim.Models(), ln.Addr())
			go func() {
				<-cmd.Context().Done()
				_ = srv.Close()
			}()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:9000", "address to serve on")
	c.Flags().StringSliceVar(&cfg.Models, "model", []string{"sim-model"}, "model ids to serve")
	c.Flags().DurationVar(&cfg.TimeToFirstToken, "ttft", 0, "time to first token")
	c.Flags().Float64Var(&cfg.TokensPerSecond, "tokens-per-second", 0, "token rate (0 = unlimited)")
	c.Flags().IntVar(&cfg.DefaultMaxTokens, "max-tokens", 16, "tokens generated when the request sets none")
	c.Flags().IntVar(&cfg.EmbeddingDims, "embedding-dims", 8, "embedding dimensions")
	return c
}
