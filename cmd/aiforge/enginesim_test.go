package main

import (
	"testing"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

func parseEnginesim(t *testing.T, args ...string) (enginesim.Config, enginesim.Failure, error) {
	t.Helper()
	var f enginesimFlags
	c := &cobra.Command{Use: "enginesim"}
	f.register(c)
	if err := c.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return f.build(c.Flags().Changed)
}

func TestEnginesimFlags(t *testing.T) {
	cfg, fail, err := parseEnginesim(t, "--llama-like", "--context-size", "64", "--fail", "error-line",
		"--fail-after-tokens", "2", "--fail-count", "3", "--fail-status", "400", "--fail-context-overflow", "--answer-tokens", "5")
	if err != nil {
		t.Fatal(err)
	}
	want := enginesim.Failure{Mode: enginesim.FailErrorLine, AfterTokens: 2, Count: 3, Status: 400, ContextOverflow: true}
	if fail != want {
		t.Fatalf("failure %+v, want %+v", fail, want)
	}
	if !cfg.SplitWrites || !cfg.UsageOnLastChunk || !cfg.OpenModels || cfg.ErrorStyle != enginesim.StyleLlama ||
		cfg.ContextSize != 64 || cfg.AnswerTokens != 5 {
		t.Fatalf("config %+v", cfg)
	}
	cfg, _, err = parseEnginesim(t, "--llama-like", "--error-style", "vllm")
	if err != nil || cfg.ErrorStyle != enginesim.StyleVLLM || !cfg.SplitWrites {
		t.Fatalf("an explicit style over --llama-like: %+v %v", cfg, err)
	}
	t.Setenv("ENGINESIM_API_KEY", "from-env")
	cfg, fail, err = parseEnginesim(t, "--split-writes", "--usage-on-last-chunk", "--open-models", "--error-style", "ollama", "--fail", "hang")
	if err != nil || !cfg.SplitWrites || !cfg.UsageOnLastChunk || !cfg.OpenModels || cfg.ErrorStyle != enginesim.StyleOllama ||
		cfg.APIKey != "from-env" || fail.Mode != enginesim.FailHang {
		t.Fatalf("%+v %+v %v", cfg, fail, err)
	}
	for _, bad := range [][]string{{"--fail", "sometimes"}, {"--error-style", "tgi"}} {
		if _, _, err := parseEnginesim(t, bad...); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
	// Every failure mode has a name the flag takes.
	for m := enginesim.FailNone; m <= enginesim.FailErrorEvent; m++ {
		if _, fail, err := parseEnginesim(t, "--fail", m.String()); err != nil || fail.Mode != m {
			t.Fatalf("--fail %s: %v", m, err)
		}
	}
}
