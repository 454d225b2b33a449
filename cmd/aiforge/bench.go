package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/bench"
)

func benchCmd() *cobra.Command {
	var o bench.Options
	var engine string
	var soak bench.SoakOptions
	var batchRun, admissionRun bool
	var bo bench.BatchOptions
	var cacheRun bool
	var co bench.CacheOptions
	var sandboxRun bool
	var so bench.SandboxOptions
	var scaleRun bool
	var sco bench.ScaleOptions
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure what aiforge adds over calling an engine directly (engine simulator, same run)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Progress = os.Stderr
			if scaleRun {
				sco.Progress = os.Stderr
				rep, err := bench.RunScale(cmd.Context(), sco)
				if err != nil {
					return err
				}
				rep.Print(cmd.OutOrStdout())
				return nil
			}
			if sandboxRun {
				so.Progress = os.Stderr
				rep, err := bench.RunSandbox(cmd.Context(), so)
				if err != nil {
					return err
				}
				rep.Print(cmd.OutOrStdout())
				return nil
			}
			if admissionRun {
				rep, err := bench.RunAdmission(cmd.Context(), bench.AdmissionOptions{Requests: o.Requests / 2, Tokens: o.Tokens, Progress: os.Stderr})
				if err != nil {
					return err
				}
				rep.Print(cmd.OutOrStdout())
				return nil
			}
			if batchRun {
				bo.Progress = os.Stderr
				rep, err := bench.RunBatch(cmd.Context(), bo)
				if err != nil {
					return err
				}
				rep.Print(cmd.OutOrStdout())
				return nil
			}
			if cacheRun {
				co.Progress, co.Tokens = os.Stderr, o.Tokens
				if cmd.Flags().Changed("requests") {
					co.Requests = o.Requests
				}
				rep, err := bench.RunCache(cmd.Context(), co)
				if err != nil {
					return err
				}
				rep.Print(cmd.OutOrStdout())
				return nil
			}
			if soak.Duration > 0 {
				soak.Progress, soak.Tokens = os.Stderr, o.Tokens
				_, err := bench.Soak(cmd.Context(), soak, cmd.OutOrStdout())
				return err
			}
			switch engine {
			case "sim":
			case bench.EngineLlamaLike:
				if !cmd.Flags().Changed("requests") {
					o.Requests = 200
				}
				rep, err := bench.RunLlama(cmd.Context(), o)
				if err != nil {
					return err
				}
				rep.Print(cmd.OutOrStdout())
				return nil
			default:
				return fmt.Errorf("--engine %q: want sim or %s", engine, bench.EngineLlamaLike)
			}
			rep, err := bench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			rep.Print(cmd.OutOrStdout())
			return nil
		},
	}
	c.Flags().IntVar(&o.Requests, "requests", 2000, "requests per latency series at concurrency 1")
	c.Flags().IntVar(&o.Concurrency, "concurrency", 32, "concurrency of the throughput runs")
	c.Flags().DurationVar(&o.Duration, "duration", 5*time.Second, "length of each throughput run")
	c.Flags().IntVar(&o.Tokens, "tokens", 16, "tokens per answer")
	c.Flags().StringVar(&engine, "engine", "sim", "engine simulator mode: sim, or llama-like (headers and body in separate writes without TCP_NODELAY; non-streamed latency, direct vs aiforge; default 200 requests)")
	soak.AddFlags(c.Flags())
	c.Flags().BoolVar(&admissionRun, "admission", false, "measure the admission step alone (p50/p99 at 1, 4 and 16 KB prompts), then the edge overhead with admission off and on in the same run (--requests/2 each)")
	c.Flags().BoolVar(&batchRun, "batch", false, "measure lines/s through the batch tier against the simulator's direct capacity (--batch-lines, --batch-slots, --batch-line-latency)")
	c.Flags().IntVar(&bo.Lines, "batch-lines", 4000, "with --batch: lines in the batch, and requests of the direct run")
	c.Flags().IntVar(&bo.Slots, "batch-slots", 16, "with --batch: the worker's slots, and the direct run's concurrency")
	c.Flags().DurationVar(&bo.LineLatency, "batch-line-latency", 50*time.Millisecond, "with --batch: the simulator's time per line")
	c.Flags().BoolVar(&cacheRun, "cache", false, "measure the semantic cache: a miss, an exact hit and a similar hit, plain and streamed, interleaved (--requests per path, default 300; --cache-ttft)")
	c.Flags().DurationVar(&co.TimeToFirstToken, "cache-ttft", 20*time.Millisecond, "with --cache: the simulator's time to first token, what a miss waits for")
	c.Flags().BoolVar(&sandboxRun, "sandbox", false, "measure agent code sandboxes (needs runsc and root): warm exec p50/p99 through aiforge vs the sandbox runtime directly, and cold starts (pool off, warm pool, runtime Start, runsc do) in the same run")
	c.Flags().IntVar(&so.Execs, "sandbox-execs", 300, "with --sandbox: execs per warm series (python and bash, each way)")
	c.Flags().IntVar(&so.Colds, "sandbox-colds", 20, "with --sandbox: rounds of the cold start series")
	c.Flags().BoolVar(&scaleRun, "scale", false, "measure scale-out on a 3-node JetStream cluster in process (R3): the usage fold, usage queries and ingest with 1, 2 and 3 replicas of the service, in one run (--scale-events, --scale-docs, --scale-queries)")
	c.Flags().IntVar(&sco.Events, "scale-events", 100_000, "with --scale: usage events every usage replica folds")
	c.Flags().IntVar(&sco.Docs, "scale-docs", 1500, "with --scale: documents ingested per replica count")
	c.Flags().IntVar(&sco.Queries, "scale-queries", 5000, "with --scale: usage queries answered per replica count")
	return c
}
