package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/files"
)

const batchKeyHelp = `create, list, get, cancel and results use AIFORGE_API_KEY (the key's tenant); queues, pools, cohorts and flavors need AIFORGE_ADMIN_KEY.`

// tenantClient calls the API with the tenant key of AIFORGE_API_KEY.
func tenantClient(cmd *cobra.Command) (*cli.Client, error) {
	key := os.Getenv("AIFORGE_API_KEY")
	if key == "" {
		return nil, fmt.Errorf("AIFORGE_API_KEY is not set (an API key of your tenant: aiforge keys create --tenant ...)")
	}
	return &cli.Client{BaseURL: apiURL(cmd), Token: key}, nil
}

func optString(p *string) string {
	if p == nil || *p == "" {
		return "-"
	}
	return *p
}

func unixTime(p *int64) string {
	if p == nil {
		return "-"
	}
	return time.Unix(*p, 0).UTC().Format(time.RFC3339)
}

// printBatch prints a batch's state, its counts and files.
func printBatch(cmd *cobra.Command, b batch.Batch) {
	w := cmd.OutOrStdout()
	rc := b.RequestCounts
	fmt.Fprintf(w, "batch %s: %s\n", b.ID, b.Status)
	fmt.Fprintf(w, "  endpoint       %s\n  input file     %s\n  lines          %d total, %d completed, %d failed\n", b.Endpoint, b.InputFileID, rc.Total, rc.Completed, rc.Failed)
	fmt.Fprintf(w, "  output file    %s\n  error file     %s\n", optString(b.OutputFileID), optString(b.ErrorFileID))
	fmt.Fprintf(w, "  created        %s\n  expires        %s\n", unixTime(&b.CreatedAt), unixTime(b.ExpiresAt))
	for _, t := range []struct {
		name string
		at   *int64
	}{{"in progress", b.InProgressAt}, {"finalizing", b.FinalizingAt}, {"completed", b.CompletedAt}, {"failed", b.FailedAt},
		{"expired", b.ExpiredAt}, {"cancelling", b.CancellingAt}, {"cancelled", b.CancelledAt}} {
		if t.at != nil {
			fmt.Fprintf(w, "  %-14s %s\n", t.name, unixTime(t.at))
		}
	}
	if b.Errors != nil {
		for _, e := range b.Errors.Data {
			line := ""
			if e.Line != nil {
				line = fmt.Sprintf(" (line %d)", *e.Line)
			}
			fmt.Fprintf(w, "  error          %s%s: %s\n", e.Code, line, e.Message)
		}
	}
	for k, v := range b.Metadata {
		fmt.Fprintf(w, "  metadata       %s=%s\n", k, v)
	}
}

func batchesCmd() *cobra.Command {
	c := clientGroup(&cobra.Command{Use: "batches", Short: "Run batches through the Batch API and manage the batch queues"}, batchKeyHelp)

	var endpoint, idemKey string
	var metadata []string
	var wait, asJSON bool
	var poll time.Duration
	create := &cobra.Command{
		Use:   "create FILE",
		Short: "Upload a JSONL file of requests and run it as a batch",
		Example: `  aiforge batches create requests.jsonl --endpoint /v1/chat/completions --metadata job=nightly --wait
  # each line: {"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "chat", "messages": [...]}}`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			md := map[string]string{}
			for _, kv := range metadata {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--metadata %q: expected key=value", kv)
				}
				md[k] = v
			}
			fi, err := os.Stat(args[0])
			if err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			tty := stderr == os.Stderr && cli.IsTerminal(os.Stderr)
			var up *cli.Progress
			if tty {
				up = cli.NewProgress(stderr, true, "upload "+filepath.Base(args[0]), fi.Size())
			}
			f, err := cl.UploadFile(cmd.Context(), args[0], files.PurposeBatch, up)
			if err != nil {
				return fmt.Errorf("upload %s: %w", args[0], err)
			}
			in := cli.BatchCreate{InputFileID: f.ID, Endpoint: endpoint}
			if len(md) > 0 {
				in.Metadata = md
			}
			b, err := cl.CreateBatch(cmd.Context(), in, idemKey)
			if err != nil {
				return err
			}
			if !wait {
				if asJSON {
					return cli.JSON(cmd.OutOrStdout(), b)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "created batch %s from %s (%s): %s\n", b.ID, f.ID, filepath.Base(args[0]), b.Status)
				return nil
			}
			fmt.Fprintf(stderr, "created batch %s from %s\n", b.ID, f.ID)
			bar := cli.NewBatchProgress(stderr, tty, nil)
			final, err := cl.WaitBatch(cmd.Context(), b.ID, poll, bar.Update)
			bar.Finish()
			if err != nil {
				return fmt.Errorf("waiting for batch %s: %w", b.ID, err)
			}
			if asJSON {
				return cli.JSON(cmd.OutOrStdout(), final)
			}
			printBatch(cmd, final)
			if final.Status != batch.StatusCompleted {
				return fmt.Errorf("batch %s ended %s", final.ID, final.Status)
			}
			return nil
		},
	}
	create.Flags().StringVar(&endpoint, "endpoint", batch.EndpointChatCompletions, "endpoint of every line: "+strings.Join(batch.Endpoints, ", "))
	create.Flags().Var((*repeated)(&metadata), "metadata", "key=value attached to the batch (repeatable, at most 16)")
	create.Flags().StringVar(&idemKey, "idempotency-key", "", "makes the create safe to retry: the same key and request answer the same batch")
	create.Flags().BoolVar(&wait, "wait", false, "wait for the batch to finish, with a progress line on stderr")
	create.Flags().DurationVar(&poll, "poll", 2*time.Second, "how often --wait reads the batch")
	create.Flags().BoolVar(&asJSON, "json", false, "print the batch object as JSON")

	var limit int
	var after string
	listJSON := false
	list := &cobra.Command{
		Use: "list", Short: "List your tenant's batches, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			page, err := cl.ListBatches(cmd.Context(), after, limit)
			if err != nil {
				return err
			}
			if listJSON {
				return cli.JSON(cmd.OutOrStdout(), page)
			}
			rows := [][]string{}
			for _, b := range page.Data {
				rc := b.RequestCounts
				rows = append(rows, []string{b.ID, b.Status, b.Endpoint, fmt.Sprintf("%d/%d", rc.Completed+rc.Failed, rc.Total), strconv.FormatInt(rc.Failed, 10),
					unixTime(&b.CreatedAt)})
			}
			cli.Table(cmd.OutOrStdout(), []string{"ID", "STATUS", "ENDPOINT", "DONE", "FAILED", "CREATED"}, rows)
			if page.HasMore && page.LastID != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "\nmore: aiforge batches list --after %s\n", *page.LastID)
			}
			return nil
		},
	}
	list.Flags().IntVar(&limit, "limit", 20, "batches per page (1-100)")
	list.Flags().StringVar(&after, "after", "", "list the batches older than this batch id")
	list.Flags().BoolVar(&listJSON, "json", false, "print JSON")

	getJSON := false
	get := &cobra.Command{
		Use: "get ID", Short: "Show a batch", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			b, err := cl.GetBatch(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if getJSON {
				return cli.JSON(cmd.OutOrStdout(), b)
			}
			printBatch(cmd, b)
			return nil
		},
	}
	get.Flags().BoolVar(&getJSON, "json", false, "print the batch object as JSON")

	cancel := &cobra.Command{
		Use: "cancel ID", Short: "Cancel a batch: lines in flight finish, the results so far are kept", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			b, err := cl.CancelBatch(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "batch %s: %s\n", b.ID, b.Status)
			return nil
		},
	}

	var outDir string
	results := &cobra.Command{
		Use: "results ID", Short: "Download a batch's output and error files", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			b, err := cl.GetBatch(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			got, err := cl.DownloadBatchResults(cmd.Context(), b, outDir)
			for _, r := range got {
				fmt.Fprintf(cmd.OutOrStdout(), "%-7s %s -> %s (%s)\n", r.Kind, r.FileID, r.Path, cli.HumanBytes(r.Bytes))
			}
			if err != nil {
				return err
			}
			if len(got) == 0 {
				return fmt.Errorf("batch %s (%s) has no output or error file yet", b.ID, b.Status)
			}
			return nil
		},
	}
	results.Flags().StringVar(&outDir, "out", ".", "directory to write <batch>_output.jsonl and <batch>_errors.jsonl into")

	c.AddCommand(create, list, get, cancel, results, batchQueuesCmd(), batchPoolsCmd(), batchNamedCmd("cohorts", "cohort", "Cohorts: pools that lend and borrow idle quota"),
		batchNamedCmd("flavors", "flavor", "Flavors: worker classes (an engine's class), the kinds of batch capacity"))
	return c
}

func batchQueuesCmd() *cobra.Command {
	asJSON := false
	c := &cobra.Command{
		Use:   "queues",
		Short: "Show the batch scheduler's queues and pools (admin): shares, admitted, borrowed, waiting",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var r batch.QueuesReply
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/batch/queues/status", nil, &r); err != nil {
				return err
			}
			if asJSON {
				return cli.JSON(cmd.OutOrStdout(), r)
			}
			cli.QueuesTables(cmd.OutOrStdout(), r)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var weight float64
	var maxLines, maxTokens int64
	set := &cobra.Command{
		Use: "set POOL TENANT", Short: "Set a tenant's queue in a pool: its weight and enqueued bounds", Args: cobra.ExactArgs(2),
		Example: "  aiforge batches queues set moe acme --weight 2 --max-enqueued-lines 200000",
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			q := batch.Queue{Weight: weight, MaxEnqueuedLines: maxLines, MaxEnqueuedTokens: maxTokens}
			if err := cl.Do(cmd.Context(), "PUT", "/admin/v1/batch/queues/"+poolPath(args[0])+"/"+url.PathEscape(args[1]), q, &q); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue of %s in pool %s: weight %g\n", q.Tenant, q.Pool, q.EffectiveWeight())
			return nil
		},
	}
	set.Flags().Float64Var(&weight, "weight", 1, "the queue's fair-sharing weight")
	set.Flags().Int64Var(&maxLines, "max-enqueued-lines", 0, "the tenant's unfinished batch lines at most (0: the edge's default); more is refused with 429")
	set.Flags().Int64Var(&maxTokens, "max-enqueued-tokens", 0, "the tenant's unfinished batch tokens at most, estimated (0: the edge's default)")
	list := &cobra.Command{
		Use: "list", Short: "List the configured tenant queues", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var out listOut[batch.Queue]
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/batch/queues", nil, &out); err != nil {
				return err
			}
			rows := [][]string{}
			for _, q := range out.Data {
				rows = append(rows, []string{q.Pool, q.Tenant, strconv.FormatFloat(q.EffectiveWeight(), 'f', -1, 64), rate(q.MaxEnqueuedLines), rate(q.MaxEnqueuedTokens)})
			}
			cli.Table(cmd.OutOrStdout(), []string{"POOL", "TENANT", "WEIGHT", "MAX LINES", "MAX TOKENS"}, rows)
			return nil
		},
	}
	del := &cobra.Command{
		Use: "delete POOL TENANT", Short: "Remove a tenant's queue (it falls back to weight 1)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", "/admin/v1/batch/queues/"+poolPath(args[0])+"/"+url.PathEscape(args[1]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted the queue of %s in pool %s\n", args[1], args[0])
			return nil
		},
	}
	c.AddCommand(set, list, del)
	return c
}

// poolPath escapes a pool name for a path, keeping its slashes (a pool may
// be named after a model such as Qwen/Qwen2.5-7B).
func poolPath(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func batchPoolsCmd() *cobra.Command {
	c := &cobra.Command{Use: "pools", Short: "Pools: models served with a nominal quota per flavor (admin)"}
	var models, quotas []string
	var cohort string
	var groupSize int
	var weight float64
	set := &cobra.Command{
		Use: "set NAME", Short: "Create or replace a pool", Args: cobra.ExactArgs(1),
		Example: "  aiforge batches pools set moe --models deepseek-v3,kimi-k2 --quota cpu-moe=64:500,borrow=16 --cohort frontier --group-size 32",
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			p := batch.Pool{Name: args[0], Models: models, Cohort: cohort, GroupSize: groupSize, Weight: weight, Quotas: []batch.Quota{}}
			for _, spec := range quotas {
				q, err := cli.ParseQuota(spec)
				if err != nil {
					return err
				}
				p.Quotas = append(p.Quotas, q)
			}
			if err := cl.Do(cmd.Context(), "PUT", "/admin/v1/batch/pools/"+poolPath(args[0]), p, &p); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pool %s: models %s, %d quotas\n", p.Name, strings.Join(p.Models, ","), len(p.Quotas))
			return nil
		},
	}
	set.Flags().StringSliceVar(&models, "models", nil, "models the pool serves (comma-separated, required)")
	set.Flags().Var((*repeated)(&quotas), "quota", "a nominal quota, repeatable: FLAVOR=LINES[:TOKENS_PER_SECOND][,borrow=N][,lend=N] (LINES 0: the flavor's serving slots)")
	set.Flags().StringVar(&cohort, "cohort", "", "the cohort whose pools lend and borrow idle quota")
	set.Flags().IntVar(&groupSize, "group-size", 0, "lines of one model dispatched together to a replica (0: its free slots)")
	set.Flags().Float64Var(&weight, "weight", 0, "the pool's weight in its cohort (0: 1)")
	_ = set.MarkFlagRequired("models")
	list := &cobra.Command{
		Use: "list", Short: "List pools", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var out listOut[batch.Pool]
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/batch/pools", nil, &out); err != nil {
				return err
			}
			rows := [][]string{}
			for _, p := range out.Data {
				var qs []string
				for _, q := range p.Quotas {
					s := fmt.Sprintf("%s=%d", q.Flavor, q.Lines)
					if q.TokensPerSecond > 0 {
						s += fmt.Sprintf(":%d", q.TokensPerSecond)
					}
					qs = append(qs, s)
				}
				rows = append(rows, []string{p.Name, strings.Join(p.Models, ","), optString(&p.Cohort), strings.Join(qs, " ")})
			}
			cli.Table(cmd.OutOrStdout(), []string{"POOL", "MODELS", "COHORT", "QUOTAS"}, rows)
			return nil
		},
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "Remove a pool", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", "/admin/v1/batch/pools/"+poolPath(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted pool %s\n", args[0])
			return nil
		},
	}
	c.AddCommand(set, list, del)
	return c
}

// batchNamedCmd manages the entities that are a name and a description:
// cohorts and flavors.
func batchNamedCmd(plural, singular, short string) *cobra.Command {
	c := &cobra.Command{Use: plural, Short: short + " (admin)"}
	var description string
	set := &cobra.Command{
		Use: "set NAME", Short: "Create or replace a " + singular, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			in := map[string]string{"name": args[0]}
			if description != "" {
				in["description"] = description
			}
			if err := cl.Do(cmd.Context(), "PUT", "/admin/v1/batch/"+plural+"/"+url.PathEscape(args[0]), in, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s set\n", singular, args[0])
			return nil
		},
	}
	set.Flags().StringVar(&description, "description", "", "what it is")
	list := &cobra.Command{
		Use: "list", Short: "List " + plural, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var out listOut[struct {
				Name        string `json:"name"`
				Description string `json:"description"`
			}]
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/batch/"+plural, nil, &out); err != nil {
				return err
			}
			rows := [][]string{}
			for _, e := range out.Data {
				rows = append(rows, []string{e.Name, e.Description})
			}
			cli.Table(cmd.OutOrStdout(), []string{strings.ToUpper(singular), "DESCRIPTION"}, rows)
			return nil
		},
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "Remove a " + singular, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", "/admin/v1/batch/"+plural+"/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %s %s\n", singular, args[0])
			return nil
		},
	}
	c.AddCommand(set, list, del)
	return c
}

// tenantWebhookCmd is `aiforge tenants webhook`.
func tenantWebhookCmd() *cobra.Command {
	c := &cobra.Command{Use: "webhook", Short: "A tenant's webhook for batch events (batch.completed, batch.failed, batch.expired, batch.cancelled)"}
	var evs []string
	type webhookOut struct {
		Tenant string   `json:"tenant"`
		URL    string   `json:"url"`
		Events []string `json:"events"`
		Secret string   `json:"secret"`
	}
	set := &cobra.Command{
		Use: "set TENANT URL", Short: "Set a tenant's webhook; its signing secret is shown once", Args: cobra.ExactArgs(2),
		Example: "  aiforge tenants webhook set acme https://hooks.acme.example/aiforge --events batch.completed,batch.failed",
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var out webhookOut
			in := map[string]any{"url": args[1]}
			if len(evs) > 0 {
				in["events"] = evs
			}
			if err := cl.Do(cmd.Context(), "PUT", "/admin/v1/tenants/"+url.PathEscape(args[0])+"/webhook", in, &out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "webhook of %s: %s (%s)\n\n    signing secret: %s\n\nThe secret is shown only now; verify deliveries with it (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature).\n",
				out.Tenant, out.URL, strings.Join(out.Events, ", "), out.Secret)
			return nil
		},
	}
	set.Flags().StringSliceVar(&evs, "events", nil, "events delivered (comma-separated; default all)")
	get := &cobra.Command{
		Use: "get TENANT", Short: "Show a tenant's webhook (never its secret)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var out webhookOut
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/tenants/"+url.PathEscape(args[0])+"/webhook", nil, &out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "webhook of %s: %s (%s)\n", out.Tenant, out.URL, strings.Join(out.Events, ", "))
			return nil
		},
	}
	del := &cobra.Command{
		Use: "delete TENANT", Short: "Remove a tenant's webhook", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", "/admin/v1/tenants/"+url.PathEscape(args[0])+"/webhook", nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed the webhook of %s\n", args[0])
			return nil
		},
	}
	c.AddCommand(set, get, del)
	return c
}

// engineProcessFlags are `models register`'s worker class and supervised
// engine process.
type engineProcessFlags struct {
	class, kind, model, binary, placement string
	port, contextSize, slots              int
	args, env                             []string
	idleStop                              time.Duration
}

func (f *engineProcessFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.class, "class", "", "the engine's worker class (a batch flavor, e.g. gpu or cpu-moe)")
	c.Flags().StringVar(&f.kind, "process-kind", "", "have the worker start and supervise the engine: llama-server, ollama or coli")
	c.Flags().StringVar(&f.model, "process-model", "", "the weights the supervised engine loads (a GGUF file; for ollama optional)")
	c.Flags().StringVar(&f.binary, "process-binary", "", "the engine's executable (default: the kind, looked up on PATH)")
	c.Flags().IntVar(&f.port, "process-port", 0, "loopback port of the supervised engine; --base-url defaults to http://127.0.0.1:PORT/v1")
	c.Flags().IntVar(&f.contextSize, "process-context-size", 0, "the supervised engine's context length (default: the engine's)")
	c.Flags().IntVar(&f.slots, "process-slots", 0, "the supervised engine's parallel sequences (default: the engine's)")
	c.Flags().StringVar(&f.placement, "moe-placement", "", "a MoE model's experts: auto (from free memory and the GGUF), cpu, or N layers' experts on the CPU")
	c.Flags().Var((*repeated)(&f.args), "process-arg", "an extra engine argument (repeatable)")
	c.Flags().Var((*repeated)(&f.env), "process-env", "an extra engine environment variable NAME=VALUE (repeatable; never secrets)")
	c.Flags().DurationVar(&f.idleStop, "idle-stop", 0, "scale the supervised engine to zero after this long without requests (e.g. 5m); the next request starts it again (0: never)")
}

// apply adds the flags to an engine of the admin API.
func (f *engineProcessFlags) apply(engine map[string]any) error {
	if f.class != "" {
		engine["class"] = f.class
	}
	if f.kind == "" {
		if f.model != "" || f.binary != "" || f.port != 0 || f.placement != "" || len(f.args) > 0 || len(f.env) > 0 || f.contextSize != 0 || f.slots != 0 || f.idleStop != 0 {
			return fmt.Errorf("--process-*, --moe-placement and --idle-stop need --process-kind")
		}
		return nil
	}
	p := map[string]any{"kind": f.kind}
	for k, v := range map[string]string{"model_path": f.model, "binary": f.binary, "moe_placement": f.placement} {
		if v != "" {
			p[k] = v
		}
	}
	for k, v := range map[string]int{"port": f.port, "context_size": f.contextSize, "slots": f.slots} {
		if v != 0 {
			p[k] = v
		}
	}
	if f.idleStop < 0 {
		return fmt.Errorf("--idle-stop must not be negative (0: never scale to zero)")
	}
	if f.idleStop > 0 {
		p["idle_stop"] = f.idleStop.String()
	}
	if len(f.args) > 0 {
		p["args"] = f.args
	}
	if len(f.env) > 0 {
		env := map[string]string{}
		for _, kv := range f.env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fmt.Errorf("--process-env %q: expected NAME=VALUE", kv)
			}
			env[k] = v
		}
		p["env"] = env
	}
	engine["process"] = p
	return nil
}

// supervised reports whether the engine is one the worker starts, so that
// --base-url may be left out.
func (f *engineProcessFlags) supervised() bool { return f.kind != "" }
