package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
)

// defaultURL is where `aiforge up` serves the API unless told otherwise.
const defaultURL = "http://127.0.0.1:8080"

// urlHelp documents the API address on every client command group.
const urlHelp = `The API address is --url, or AIFORGE_URL when the flag is not given (default ` + defaultURL + `).`

// clientGroup is a command group whose subcommands call the API: it takes
// --url (default AIFORGE_URL, else defaultURL) for all of them.
func clientGroup(c *cobra.Command, keyHelp string) *cobra.Command {
	c.PersistentFlags().String("url", env("AIFORGE_URL", defaultURL), "aiforge API base URL (env AIFORGE_URL)")
	c.Long = c.Short + ".\n\n" + urlHelp + " " + keyHelp
	return c
}

const adminKeyHelp = `The admin key comes from AIFORGE_ADMIN_KEY (aiforge up prints it on first start and keeps it in <data-dir>/admin.key).`

// apiURL is the --url of cmd's group.
func apiURL(cmd *cobra.Command) string {
	if f := cmd.Flag("url"); f != nil {
		return f.Value.String()
	}
	return env("AIFORGE_URL", defaultURL)
}

func adminClient(cmd *cobra.Command) (*cli.Client, error) {
	key := os.Getenv("AIFORGE_ADMIN_KEY")
	if key == "" {
		return nil, fmt.Errorf("AIFORGE_ADMIN_KEY is not set (aiforge up prints it on first start and keeps it in <data-dir>/admin.key)")
	}
	return &cli.Client{BaseURL: apiURL(cmd), Token: key}, nil
}

type listOut[T any] struct {
	Data []T `json:"data"`
}

func jsonFlag(c *cobra.Command) *bool {
	return c.Flags().Bool("json", false, "print JSON")
}

func tenantsCmd() *cobra.Command {
	c := clientGroup(&cobra.Command{Use: "tenants", Short: "Manage tenants (admin)"}, adminKeyHelp)
	var createContent bool
	create := &cobra.Command{
		Use: "create ID", Short: "Create a tenant", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var t struct {
				ID           string    `json:"id"`
				CreatedAt    time.Time `json:"created_at"`
				TraceContent bool      `json:"trace_content"`
			}
			in := map[string]any{"id": args[0]}
			if cmd.Flags().Changed("trace-content") {
				in["trace_content"] = createContent
			}
			if err := cl.Do(cmd.Context(), "POST", "/admin/v1/tenants", in, &t); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created tenant %s\n", t.ID)
			if t.TraceContent {
				fmt.Fprintln(cmd.OutOrStdout(), "its prompts and completions are recorded in its traces (--trace-content)")
			}
			return nil
		},
	}
	create.Flags().BoolVar(&createContent, "trace-content", false, traceContentHelp)
	list := &cobra.Command{
		Use: "list", Short: "List tenants", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var out listOut[struct {
				ID           string     `json:"id"`
				CreatedAt    time.Time  `json:"created_at"`
				Budget       *budgetOut `json:"budget"`
				TraceContent bool       `json:"trace_content"`
			}]
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/tenants", nil, &out); err != nil {
				return err
			}
			rows := [][]string{}
			for _, t := range out.Data {
				rows = append(rows, append(append([]string{t.ID}, budgetCells(t.Budget)...), onOff(t.TraceContent), t.CreatedAt.Format(time.RFC3339)))
			}
			cli.Table(cmd.OutOrStdout(), append(append([]string{"TENANT"}, budgetHeader...), "TRACE CONTENT", "CREATED"), rows)
			return nil
		},
	}
	var tf limitFlags
	var updateContent bool
	update := &cobra.Command{
		Use: "update ID", Short: "Change a tenant's budget or trace content setting", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			in := tf.changed(cmd)
			if cmd.Flags().Changed("trace-content") {
				in["trace_content"] = updateContent
			}
			if err := cl.Do(cmd.Context(), "PATCH", "/admin/v1/tenants/"+args[0], in, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "updated tenant %s\n", args[0])
			return nil
		},
	}
	tf.add(update, false)
	update.Flags().BoolVar(&updateContent, "trace-content", false, traceContentHelp+" (--trace-content=false turns it off)")
	c.AddCommand(create, list, update, tenantWebhookCmd(), tenantAdmissionCmd(), tenantModelBucketCmd())
	return c
}

const traceContentHelp = "record the tenant's prompt and completion text in its traces (gen_ai.input.messages / gen_ai.output.messages, bounded); off by default"

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// limitFlags are the spend controls settable on keys and tenants.
type limitFlags struct {
	rpm, tpm        int64
	maxBudget, soft float64
	period          string
	maxConcurrent   int64
	withRates       bool
}

func (l *limitFlags) add(c *cobra.Command, withRates bool) {
	l.withRates = withRates
	if withRates {
		c.Flags().Int64Var(&l.rpm, "rpm", 0, "requests per minute, across every edge replica (0 = unlimited)")
		c.Flags().Int64Var(&l.tpm, "tpm", 0, "tokens per minute (0 = unlimited)")
	}
	c.Flags().Float64Var(&l.maxBudget, "max-budget-usd", 0, "hard budget in USD per period (0 = none)")
	c.Flags().Float64Var(&l.soft, "soft-budget-usd", 0, "soft budget in USD: an alert event once per period")
	c.Flags().StringVar(&l.period, "budget-period", "", "daily, weekly, monthly or total (default total)")
	c.Flags().Int64Var(&l.maxConcurrent, "max-concurrent-requests", 0, "requests in flight at once, per edge replica (0 = unlimited); more get 429")
}

// changed returns the flags the user set, as API fields.
func (l *limitFlags) changed(c *cobra.Command) map[string]any {
	out := map[string]any{}
	set := func(flag, field string, v any) {
		if c.Flags().Changed(flag) {
			out[field] = v
		}
	}
	if l.withRates {
		set("rpm", "rpm", l.rpm)
		set("tpm", "tpm", l.tpm)
	}
	set("max-budget-usd", "max_budget_usd", l.maxBudget)
	set("soft-budget-usd", "soft_budget_usd", l.soft)
	set("budget-period", "budget_period", l.period)
	set("max-concurrent-requests", "max_concurrent_requests", l.maxConcurrent)
	return out
}

type keyOut struct {
	ID        string     `json:"id"`
	Key       string     `json:"key,omitempty"`
	Tenant    string     `json:"tenant"`
	Name      string     `json:"name,omitempty"`
	Models    []string   `json:"models"`
	CreatedAt time.Time  `json:"created_at"`
	RPM       int64      `json:"rpm"`
	TPM       int64      `json:"tpm"`
	Budget    *budgetOut `json:"budget"`
}

// budgetOut is the spend the admin API shows for a key or tenant in its
// current budget period.
type budgetOut struct {
	Period       string   `json:"period"`
	LimitUSD     *float64 `json:"limit_usd"`
	SpentUSD     float64  `json:"spent_usd"`
	ReservedUSD  float64  `json:"reserved_usd"`
	RemainingUSD *float64 `json:"remaining_usd"`
}

// budgetHeader and budgetCells are the budget columns of the key and
// tenant tables: the hard budget and its period, spent, reserved for
// requests in flight, and what is left ("-" for none).
var budgetHeader = []string{"BUDGET", "SPENT", "RESERVED", "REMAINING"}

func budgetCells(b *budgetOut) []string {
	if b == nil {
		return []string{"-", "-", "-", "-"}
	}
	usd := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	limit, left := "-", "-"
	if b.LimitUSD != nil {
		limit = "$" + usd(*b.LimitUSD) + " " + b.Period
	}
	if b.RemainingUSD != nil {
		left = "$" + usd(*b.RemainingUSD)
	}
	return []string{limit, "$" + usd(b.SpentUSD), "$" + usd(b.ReservedUSD), left}
}

func rate(n int64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

func keysCmd() *cobra.Command {
	c := clientGroup(&cobra.Command{Use: "keys", Short: "Manage API keys (admin)"}, adminKeyHelp)
	var tenant, name string
	var models []string
	var lf limitFlags
	var caf admissionFlags
	create := &cobra.Command{
		Use: "create", Short: "Create an API key for a tenant; the secret is shown once", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var k keyOut
			in := lf.changed(cmd)
			in["tenant"], in["models"] = tenant, models
			if adm := caf.changed(cmd); adm != nil {
				in["admission"] = adm
			}
			if name != "" {
				in["name"] = name
			}
			if err := cl.Do(cmd.Context(), "POST", "/admin/v1/keys", in, &k); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created key %s for tenant %s (models: %s)\n\n    export AIFORGE_API_KEY=%s\n\nThe secret is shown only now; aiforge keeps only its hash.\n",
				k.ID, k.Tenant, strings.Join(k.Models, ","), k.Key)
			return nil
		},
	}
	create.Flags().StringVar(&tenant, "tenant", "", "tenant owning the key (required)")
	create.Flags().StringVar(&name, "name", "", "a label for the key")
	create.Flags().StringSliceVar(&models, "models", []string{"*"}, "models the key may use (comma-separated; * for all)")
	_ = create.MarkFlagRequired("tenant")
	lf.add(create, true)
	caf.add(create, "admission-")

	var uf limitFlags
	var uaf admissionFlags
	update := &cobra.Command{
		Use: "update ID", Short: "Change a key's rate limits and budget", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var k keyOut
			in := uf.changed(cmd)
			if adm := uaf.changed(cmd); adm != nil {
				in["admission"] = adm
			}
			if err := cl.Do(cmd.Context(), "PATCH", "/admin/v1/keys/"+args[0], in, &k); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "updated key %s\n", k.ID)
			return nil
		},
	}
	uf.add(update, true)
	uaf.add(update, "admission-")

	var listTenant string
	list := &cobra.Command{
		Use: "list", Short: "List API keys (never their secrets)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var out listOut[keyOut]
			path := "/admin/v1/keys"
			if listTenant != "" {
				path += "?tenant=" + listTenant
			}
			if err := cl.Do(cmd.Context(), "GET", path, nil, &out); err != nil {
				return err
			}
			rows := [][]string{}
			for _, k := range out.Data {
				row := []string{k.ID, k.Tenant, k.Name, strings.Join(k.Models, ","), rate(k.RPM), rate(k.TPM)}
				row = append(row, budgetCells(k.Budget)...)
				rows = append(rows, append(row, k.CreatedAt.Format(time.RFC3339)))
			}
			header := append([]string{"ID", "TENANT", "NAME", "MODELS", "RPM", "TPM"}, budgetHeader...)
			cli.Table(cmd.OutOrStdout(), append(header, "CREATED"), rows)
			return nil
		},
	}
	list.Flags().StringVar(&listTenant, "tenant", "", "only this tenant's keys")

	revoke := &cobra.Command{
		Use: "revoke ID", Short: "Revoke a key on every edge replica (its open streams end)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", "/admin/v1/keys/"+args[0], nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked key %s\n", args[0])
			return nil
		},
	}
	c.AddCommand(create, list, update, revoke)
	return c
}

// repeated is a flag given once per value, each kept whole (commas
// included, unlike a string slice).
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }
func (r *repeated) Type() string       { return "strings" }

// parseEngineSpec reads a --engine value: comma-separated key=value pairs
// (id, base-url, upstream, weight, api-key-env, max-concurrency, kind, rpm,
// tpm) into an engine of the admin API. The key itself is read from the
// environment variable api-key-env names, never from the command line.
func parseEngineSpec(spec string, getenv func(string) string) (map[string]any, error) {
	e := map[string]any{}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" {
			return nil, fmt.Errorf("--engine %q: %q is not key=value", spec, kv)
		}
		switch k {
		case "id", "kind":
			e[k] = v
		case "base-url":
			e["base_url"] = v
		case "upstream":
			e["model"] = v
		case "api-key-env":
			key := getenv(v)
			if key == "" {
				return nil, fmt.Errorf("--engine %q: api-key-env %s: the variable is empty", spec, v)
			}
			e["api_key"] = key
		case "weight", "max-concurrency", "rpm", "tpm":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("--engine %q: %s must be a whole number", spec, k)
			}
			e[strings.ReplaceAll(k, "-", "_")] = n
		default:
			return nil, fmt.Errorf("--engine %q: unknown key %q (id, base-url, upstream, weight, api-key-env, max-concurrency, kind, rpm, tpm)", spec, k)
		}
	}
	for _, need := range []string{"id", "base_url", "model"} {
		if _, ok := e[need]; !ok {
			return nil, fmt.Errorf("--engine %q: id, base-url and upstream are required", spec)
		}
	}
	return e, nil
}

type modelOut struct {
	Name      string      `json:"name"`
	Engine    engineOut   `json:"engine"`
	Engines   []engineOut `json:"engines,omitempty"`
	Fallbacks []string    `json:"fallbacks,omitempty"`
	CreatedAt time.Time   `json:"created_at"`
}

type engineOut struct {
	ID             string `json:"id,omitempty"`
	BaseURL        string `json:"base_url"`
	Model          string `json:"model"`
	APIKey         string `json:"api_key,omitempty"`
	MaxConcurrency int    `json:"max_concurrency,omitempty"`
}

// modelRows is one row per engine of each model (further engines named
// by their id), with a FALLBACKS column only when a model has fallbacks.
func modelRows(ms []modelOut) ([]string, [][]string) {
	fallbacks := false
	for _, m := range ms {
		fallbacks = fallbacks || len(m.Fallbacks) > 0
	}
	header := []string{"MODEL", "ENGINE", "UPSTREAM", "CREATED"}
	if fallbacks {
		header = append(header, "FALLBACKS")
	}
	rows := [][]string{}
	for _, m := range ms {
		for i, e := range append([]engineOut{m.Engine}, m.Engines...) {
			url := e.BaseURL
			if e.ID != "" {
				url += " (" + e.ID + ")"
			}
			row := []string{m.Name, url, e.Model, m.CreatedAt.Format(time.RFC3339)}
			if fallbacks {
				fb := "-"
				if i == 0 && len(m.Fallbacks) > 0 {
					fb = strings.Join(m.Fallbacks, ", ")
				}
				row = append(row, fb)
			}
			rows = append(rows, row)
		}
	}
	return header, rows
}

func modelsCmd() *cobra.Command {
	c := clientGroup(&cobra.Command{Use: "models", Short: "Manage served models, the catalog and deployments (admin)"}, adminKeyHelp)
	var baseURL, upstream, keyEnv, engineID, kind, routing string
	var maxConc, weight, rpm, tpm, contextWindow int
	var extraEngines, fallbacks []string
	var ttftTimeout, requestTimeout, wait time.Duration
	var pf priceFlags
	var ef engineProcessFlags
	var cf cacheFlags
	var hybridFusion string
	var hybridEmbedding, hybridText float64
	register := &cobra.Command{
		Use:   "register NAME",
		Short: "Bind a model name to an OpenAI-compatible engine",
		Example: `  aiforge models register chat-small --base-url http://127.0.0.1:8000/v1 --upstream Qwen/Qwen2.5-7B-Instruct   # vLLM / SGLang
  aiforge models register llama --base-url http://127.0.0.1:8081/v1 --upstream llama            # llama.cpp llama-server
  aiforge models register qwen --base-url http://127.0.0.1:11434/v1 --upstream qwen2.5:7b       # Ollama
  # one name over two engines, the second given twice the load, falling back to a provider:
  OPENAI_KEY=sk-... aiforge models register gpt-4o-mini@openai --base-url https://api.openai.com/v1 --upstream gpt-4o-mini \
      --kind provider --engine-api-key-env OPENAI_KEY --rpm 500 --tpm 200000 --price-input 0.15 --price-output 0.6
  aiforge models register chat --base-url http://gpu-a:8000/v1 --upstream Qwen/Qwen2.5-7B-Instruct --context-window 32768 \
      --engine id=b,base-url=http://gpu-b:8000/v1,upstream=Qwen/Qwen2.5-7B-Instruct,weight=2 --fallback gpt-4o-mini@openai
  # an embedding model known to beat keyword search: hybrid searches trust its list as given
  aiforge models register bge --base-url http://127.0.0.1:8080/v1 --upstream BAAI/bge-small-en-v1.5 \
      --hybrid-fusion zscore --hybrid-embedding-weight 1.5 --hybrid-text-weight 1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			if baseURL == "" && !ef.supervised() {
				return fmt.Errorf("--base-url is required (or --process-kind, for an engine the worker supervises on a loopback port)")
			}
			if upstream == "" {
				if !ef.supervised() {
					return fmt.Errorf("--upstream is required")
				}
				upstream = args[0]
			}
			engine := map[string]any{"model": upstream}
			if baseURL != "" {
				engine["base_url"] = baseURL
			}
			if err := ef.apply(engine); err != nil {
				return err
			}
			if keyEnv != "" {
				v := os.Getenv(keyEnv)
				if v == "" {
					return fmt.Errorf("--engine-api-key-env %s: the variable is empty", keyEnv)
				}
				engine["api_key"] = v
			}
			if maxConc > 0 {
				engine["max_concurrency"] = maxConc
			}
			if ttftTimeout > 0 {
				engine["ttft_timeout"] = ttftTimeout.String()
			}
			if requestTimeout > 0 {
				engine["request_timeout"] = requestTimeout.String()
			}
			for k, v := range map[string]any{"id": engineID, "kind": kind} {
				if v != "" {
					engine[k] = v
				}
			}
			for k, v := range map[string]int{"weight": weight, "rpm": rpm, "tpm": tpm} {
				if v != 0 {
					engine[k] = v
				}
			}
			in := map[string]any{"name": args[0], "engine": engine}
			var more []map[string]any
			for _, spec := range extraEngines {
				e, err := parseEngineSpec(spec, os.Getenv)
				if err != nil {
					return err
				}
				more = append(more, e)
			}
			if len(more) > 0 {
				in["engines"] = more
			}
			if len(fallbacks) > 0 {
				in["fallbacks"] = fallbacks
			}
			if contextWindow > 0 {
				in["context_window"] = contextWindow
			}
			if routing != "" {
				in["routing"] = routing
			}
			if p := pf.changed(cmd); len(p) > 0 {
				in["price"] = p
			}
			if p, err := cf.policy(cmd); err != nil {
				return err
			} else if p != nil {
				in["cache"] = p
			}
			if cmd.Flags().Changed("hybrid-fusion") || cmd.Flags().Changed("hybrid-embedding-weight") || cmd.Flags().Changed("hybrid-text-weight") {
				in["hybrid_search"] = map[string]any{"fusion": hybridFusion, "embedding_weight": hybridEmbedding, "text_weight": hybridText}
			}
			var m modelOut
			if err := cl.Do(cmd.Context(), "POST", "/admin/v1/models", in, &m); err != nil {
				return err
			}
			where := m.Engine.BaseURL
			if where == "" && ef.supervised() {
				where = "a " + ef.kind + " its worker starts"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "registered model %s -> %s (%s)\n", m.Name, where, m.Engine.Model)
			if wait > 0 {
				if err := waitServing(cmd, cl, m.Name, wait); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "model %s is serving\n", m.Name)
			}
			return nil
		},
	}
	register.Flags().DurationVar(&wait, "wait", 0, "wait this long for a worker to serve the model; fail with its engine's error (0 = do not wait)")
	register.Flags().StringVar(&baseURL, "base-url", "", "engine base URL ending in /v1 (required unless --process-kind: a supervised engine's URL is its loopback port)")
	register.Flags().StringVar(&upstream, "upstream", "", "model name the engine serves (required; for a supervised engine default NAME)")
	register.Flags().StringVar(&keyEnv, "engine-api-key-env", "", "environment variable holding the engine's API key")
	register.Flags().IntVar(&maxConc, "max-concurrency", 0, "requests sent to the engine at once (default: what the engine reports, llama-server's /props total_slots, else 64; for vLLM set its --max-num-seqs)")
	register.Flags().DurationVar(&ttftTimeout, "ttft-timeout", 0, "longest wait for a stream's first token, then 504 engine_timeout (default none)")
	register.Flags().DurationVar(&requestTimeout, "request-timeout", 0, "longest time for one request, then 504 engine_timeout (default 10m)")
	register.Flags().StringVar(&engineID, "engine-id", "", "id of this (first) engine among the model's engines (default none)")
	register.Flags().StringVar(&kind, "kind", "", `"provider" for a hosted OpenAI-compatible API (OpenAI, Mistral, Groq, Together, ...); default a self-hosted engine`)
	register.Flags().IntVar(&weight, "weight", 0, "this engine's share of the model's traffic against its other engines (default 1)")
	register.Flags().IntVar(&rpm, "rpm", 0, "the engine's requests per minute (a provider's quota), kept by each worker replica; over it 429 and the edge falls back")
	register.Flags().IntVar(&tpm, "tpm", 0, "the engine's tokens per minute (a provider's quota), kept by each worker replica")
	register.Flags().Var((*repeated)(&extraEngines), "engine", "a further engine serving the same name, repeatable: id=ID,base-url=URL,upstream=NAME[,weight=N][,api-key-env=VAR][,max-concurrency=N][,kind=provider][,rpm=N][,tpm=N]")
	register.Flags().Var((*repeated)(&fallbacks), "fallback", "a model name tried, in the order given, before the first byte when this one has no servable worker, is overloaded, fails or cannot take the prompt (repeatable)")
	register.Flags().IntVar(&contextWindow, "context-window", 0, "the model's context length in tokens: longer requests go to the next fallback (default: what the engines report)")
	register.Flags().StringVar(&routing, "routing", "", `how the edge picks among the model's engines: "least_outstanding" (default) or "latency"`)
	register.Flags().StringVar(&hybridFusion, "hybrid-fusion", "", `for an embedding model: the fusion of hybrid searches of its vector stores when a request gives no hybrid_search: "agreement" (default), "zscore", "rrf" or "weighted"`)
	register.Flags().Float64Var(&hybridEmbedding, "hybrid-embedding-weight", 0, "for an embedding model: the default hybrid_search embedding_weight (with --hybrid-text-weight; both 0: the fusion's defaults)")
	register.Flags().Float64Var(&hybridText, "hybrid-text-weight", 0, "for an embedding model: the default hybrid_search text_weight")
	pf.add(register, "price-")
	ef.add(register)
	cf.add(register)

	list := &cobra.Command{
		Use: "list", Short: "List model bindings", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var out listOut[modelOut]
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/models", nil, &out); err != nil {
				return err
			}
			header, rows := modelRows(out.Data)
			cli.Table(cmd.OutOrStdout(), header, rows)
			return nil
		},
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "Remove a model binding (its workers drain and stop)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", "/admin/v1/models/"+args[0], nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted model %s\n", args[0])
			return nil
		},
	}
	var pp priceFlags
	price := &cobra.Command{
		Use: "price NAME", Short: "Set a model's price from now on (earlier requests keep theirs)", Args: cobra.ExactArgs(1),
		Example: "  aiforge models price chat-small --input 0.15 --cached-input 0.075 --output 0.60",
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			in := pp.changed(cmd)
			in["model"] = args[0]
			if err := cl.Do(cmd.Context(), "POST", "/admin/v1/prices", in, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "priced model %s\n", args[0])
			return nil
		},
	}
	pp.add(price, "")
	c.AddCommand(register, list, modelsStatusCmd(), price, del, modelManifestCmd())
	c.AddCommand(modelFlowCmds()...)
	return c
}

// priceFlags are a model's price in USD per million tokens.
type priceFlags struct {
	prefix                string
	input, cached, output float64
	batchDiscount         float64
}

func (p *priceFlags) add(c *cobra.Command, prefix string) {
	p.prefix = prefix
	c.Flags().Float64Var(&p.input, prefix+"input", 0, "USD per million input tokens")
	c.Flags().Float64Var(&p.cached, prefix+"cached-input", 0, "USD per million cached input tokens (default: the input price)")
	c.Flags().Float64Var(&p.output, prefix+"output", 0, "USD per million output tokens")
	c.Flags().Float64Var(&p.batchDiscount, prefix+"batch-discount", 0, "fraction batch lines pay less, 0 to 1 (default 0.5: half price)")
}

func (p *priceFlags) changed(c *cobra.Command) map[string]any {
	out := map[string]any{}
	if c.Flags().Changed(p.prefix + "input") {
		out["input_per_mtok_usd"] = p.input
	}
	if c.Flags().Changed(p.prefix + "cached-input") {
		out["cached_input_per_mtok_usd"] = p.cached
	}
	if c.Flags().Changed(p.prefix + "output") {
		out["output_per_mtok_usd"] = p.output
	}
	if c.Flags().Changed(p.prefix + "batch-discount") {
		out["batch_discount"] = p.batchDiscount
	}
	return out
}
