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

// enginesimFlags are the flags of `aiforge enginesim`: every simulator
// setting and every failure the Go API can inject.
type enginesimFlags struct {
	cfg       enginesim.Config
	fail      enginesim.Failure
	llamaLike bool
	style     string
	failMode  string
}

func (f *enginesimFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringSliceVar(&f.cfg.Models, "model", []string{"sim-model"}, "model ids to serve")
	fl.DurationVar(&f.cfg.TimeToFirstToken, "ttft", 0, "time to first token")
	fl.Float64Var(&f.cfg.TokensPerSecond, "tokens-per-second", 0, "token rate (0 = unlimited)")
	fl.IntVar(&f.cfg.DefaultMaxTokens, "max-tokens", 16, "tokens generated when the request sets none")
	fl.IntVar(&f.cfg.AnswerTokens, "answer-tokens", 0, "tokens after which an answer stops by itself (0 = always max_tokens)")
	fl.IntVar(&f.cfg.EmbeddingDims, "embedding-dims", 8, "embedding dimensions")
	fl.StringVar(&f.cfg.APIKey, "api-key", "", "require this engine API key (Bearer) on /v1/*; default $ENGINESIM_API_KEY")
	fl.BoolVar(&f.cfg.OpenModels, "open-models", false, "leave GET /v1/models open while the key is required elsewhere (as llama-server)")
	fl.BoolVar(&f.cfg.SplitWrites, "split-writes", false, "TCP_NODELAY off, headers written apart from the body (as llama-server)")
	fl.BoolVar(&f.cfg.UsageOnLastChunk, "usage-on-last-chunk", false, "put a stream's usage on its last chunk with choices (llama-server's layout)")
	fl.StringVar(&f.style, "error-style", "openai", "shape of error bodies: openai, llama (numeric codes), vllm, ollama")
	fl.IntVar(&f.cfg.ContextSize, "context-size", 0, "context window in tokens: longer prompts are refused (0 = none)")
	fl.BoolVar(&f.llamaLike, "llama-like", false, "behave like llama-server: --split-writes --usage-on-last-chunk --open-models --error-style llama")
	fl.StringVar(&f.failMode, "fail", "none", "inject a failure: none, before-first-token, after-first-token, hang, disconnect, error-line, error-event")
	fl.IntVar(&f.fail.AfterTokens, "fail-after-tokens", 0, "tokens streamed before the failure strikes")
	fl.IntVar(&f.fail.Count, "fail-count", 0, "requests the failure applies to (0 = every request)")
	fl.IntVar(&f.fail.Status, "fail-status", 0, "HTTP status (and numeric code) of the injected error (default 500; 400 with --fail-context-overflow)")
	fl.BoolVar(&f.fail.ContextOverflow, "fail-context-overflow", false, "make the injected error a context overflow")
}

// build returns the simulator's configuration and failure; changed reports
// whether a flag was set.
func (f *enginesimFlags) build(changed func(string) bool) (enginesim.Config, enginesim.Failure, error) {
	cfg, fail := f.cfg, f.fail
	st, err := enginesim.ParseErrorStyle(f.style)
	if err != nil {
		return cfg, fail, err
	}
	if fail.Mode, err = enginesim.ParseFailureMode(f.failMode); err != nil {
		return cfg, fail, err
	}
	if f.llamaLike {
		cfg = enginesim.LlamaLike(cfg)
	}
	if !f.llamaLike || changed("error-style") {
		cfg.ErrorStyle = st
	}
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv("ENGINESIM_API_KEY")
	}
	return cfg, fail, nil
}

func enginesimCmd() *cobra.Command {
	var listen string
	var f enginesimFlags
	c := &cobra.Command{
		Use:   "enginesim",
		Short: "Run the engine simulator (a test and benchmark tool, not a model)",
		Long: `Run aiforge's engine simulator: an OpenAI-compatible HTTP server that answers
deterministically, at a settable speed. It is a test and benchmark tool that stands
in for vLLM, llama-server, Ollama or TEI; it holds no model.

It can behave like llama-server (--llama-like) and inject the failures real engines
show (--fail and the --fail-* flags).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, fail, err := f.build(cmd.Flags().Changed)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			sim := enginesim.New(cfg)
			sim.SetFailure(fail)
			srv := sim.NewServer()
			srv.ReadHeaderTimeout = 10 * time.Second
			fmt.Fprintf(os.Stderr, "enginesim (test tool) serving %v on http://%s/v1\n", sim.Models(), ln.Addr())
			if fail.Mode != enginesim.FailNone {
				fmt.Fprintf(os.Stderr, "enginesim: injecting %s (count %d, 0 = every request)\n", fail.Mode, fail.Count)
			}
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
	f.register(c)
	return c
}
