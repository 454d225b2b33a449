package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/registry"
)

func routersCmd() *cobra.Command {
	c := clientGroup(&cobra.Command{Use: "routers", Short: "Manage routers: model names whose prompts go to the model or tool of their route class (admin)"}, adminKeyHelp)
	var file, def, embedModel string
	var threshold float64
	var classes, examples []string
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "Create or replace a router, from a JSON file, flags, or a file edited by flags",
		Long: `Create or replace a router: a model name whose requests go to the model, or the HTTP tool, of the route
class their prompt falls in. A prompt (the last user message) goes to the class whose examples it is most
similar to, unless that similarity is under --threshold: then to the --default class. The X-AI-Route request
header picks a class by name.

--file reads the router in the admin API's JSON shape (what "aiforge routers get NAME --json" prints; "-" for
stdin). Flags then change it: --class sets a class's target (adding the class when it is new), --examples
replaces a class's examples with the ones given (repeat it to give more), and --default, --threshold and
--embedding-model replace the file's.`,
		Example: `  aiforge routers set auto \
      --class code=model:qwen-coder --examples code="write a terraform module|fix this bash script" \
      --class reasoning=model:deepseek-r1 --examples reasoning="prove that|plan a migration step by step" \
      --class openstack=tool:http://127.0.0.1:9000/answer --examples openstack="list my servers|show the quota" \
      --default reasoning --threshold 0.3
  aiforge routers get auto --json > auto.json && aiforge routers set auto --file auto.json --threshold 0.4`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var base registry.Router
			if file != "" {
				data, err := readRouterFile(cmd, file)
				if err != nil {
					return err
				}
				if base, err = cli.ParseRouterFile(data); err != nil {
					return err
				}
			}
			edits := cli.RouterEdits{Classes: classes, Examples: examples}
			if cmd.Flags().Changed("default") {
				edits.Default = &def
			}
			if cmd.Flags().Changed("threshold") {
				edits.Threshold = &threshold
			}
			if cmd.Flags().Changed("embedding-model") {
				edits.EmbeddingModel = &embedModel
			}
			r, err := edits.Apply(args[0], base)
			if err != nil {
				return err
			}
			out, err := cl.PutRouter(cmd.Context(), r)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "set router %s: %d classes, default %s, threshold %s, %s\n", out.Name, len(out.Classes), out.Default,
				strconv.FormatFloat(out.Threshold, 'f', -1, 64), cli.RouterMatching(out))
			return nil
		},
	}
	set.Flags().StringVar(&file, "file", "", `router JSON, the admin API's shape ("-": stdin)`)
	set.Flags().Var((*repeated)(&classes), "class", "a class and its target, repeatable: NAME=model:MODEL or NAME=tool:URL")
	set.Flags().Var((*repeated)(&examples), "examples", `a class's example utterances separated by |, repeatable: CLASS="utterance one|utterance two"`)
	set.Flags().StringVar(&def, "default", "", "the class of prompts that match no class well enough")
	set.Flags().Float64Var(&threshold, "threshold", 0, "similarity (0 to 1) a prompt needs to its best class to go there rather than to the default (default 0: always the best)")
	set.Flags().StringVar(&embedModel, "embedding-model", "", "compare prompts with examples by this embedding model through the workers (default: lexically)")

	list := &cobra.Command{
		Use: "list", Short: "List routers", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			rs, err := cl.ListRouters(cmd.Context())
			if err != nil {
				return err
			}
			rows := [][]string{}
			for _, r := range rs {
				rows = append(rows, []string{r.Name, strings.Join(r.ClassNames(), ","), r.Default,
					strconv.FormatFloat(r.Threshold, 'f', -1, 64), cli.RouterMatching(r)})
			}
			cli.Table(cmd.OutOrStdout(), []string{"ROUTER", "CLASSES", "DEFAULT", "THRESHOLD", "MATCHING"}, rows)
			return nil
		},
	}
	var getJSON bool
	get := &cobra.Command{
		Use: "get NAME", Short: "Show a router: its classes, their targets and examples", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			r, err := cl.GetRouter(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if getJSON {
				return cli.JSON(w, r)
			}
			fmt.Fprintf(w, "router %s: default %s, threshold %s, %s\n\n", r.Name, r.Default, strconv.FormatFloat(r.Threshold, 'f', -1, 64), cli.RouterMatching(r))
			rows := [][]string{}
			for _, c := range r.Classes {
				rows = append(rows, []string{c.Name, cli.RouterTarget(c), strconv.Itoa(len(c.Examples)), strings.Join(c.Examples, " | ")})
			}
			cli.Table(w, []string{"CLASS", "TARGET", "EXAMPLES", "UTTERANCES"}, rows)
			return nil
		},
	}
	get.Flags().BoolVar(&getJSON, "json", false, "print the router's JSON (what routers set --file reads)")
	del := &cobra.Command{
		Use: "delete NAME", Short: "Remove a router (its name then answers model_not_found)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			if err := cl.DeleteRouter(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted router %s\n", args[0])
			return nil
		},
	}
	c.AddCommand(set, list, get, del)
	return c
}

func readRouterFile(cmd *cobra.Command, path string) ([]byte, error) {
	var r io.Reader
	if path == "-" {
		r = cmd.InOrStdin()
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, cli.MaxRouterFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > cli.MaxRouterFileBytes {
		return nil, fmt.Errorf("router file %s: larger than %d MiB", path, cli.MaxRouterFileBytes>>20)
	}
	return data, nil
}

func cacheCmd() *cobra.Command {
	c := clientGroup(&cobra.Command{Use: "cache", Short: "Manage the semantic cache of the models that opted in (admin)"}, adminKeyHelp)
	var model, tenant string
	clearCmd := &cobra.Command{
		Use: "clear", Short: "Remove a model's cached answers, of one tenant or of every tenant", Args: cobra.NoArgs,
		Example: "  aiforge cache clear --model chat --tenant acme",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			n, err := cl.ClearCache(cmd.Context(), model, tenant)
			if err != nil {
				return err
			}
			who := "every tenant"
			if tenant != "" {
				who = "tenant " + tenant
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cleared %d cached answers of model %s (%s)\n", n, model, who)
			return nil
		},
	}
	clearCmd.Flags().StringVar(&model, "model", "", "the model whose answers are removed (required)")
	clearCmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's answers (default every tenant's)")
	_ = clearCmd.MarkFlagRequired("model")
	c.AddCommand(clearCmd)
	return c
}

// cacheFlags are a model's semantic cache policy on models register.
type cacheFlags struct {
	enabled        bool
	ttl            time.Duration
	similarity     float64
	maxTemperature float64
	embeddingModel string
}

func (f *cacheFlags) add(c *cobra.Command) {
	c.Flags().BoolVar(&f.enabled, "cache", false, "answer repeated prompts of this model from the semantic cache (per tenant; requests at temperature up to --cache-max-temperature)")
	c.Flags().DurationVar(&f.ttl, "cache-ttl", 0, "with --cache: how long an answer is kept (default 1h)")
	c.Flags().Float64Var(&f.similarity, "cache-similarity", 0, "with --cache: also answer prompts this similar (0 to 1) to a cached one (default 0: exact repeats only)")
	c.Flags().Float64Var(&f.maxTemperature, "cache-max-temperature", 0, "with --cache: the highest temperature still cached (default 0; a request without temperature counts as 1)")
	c.Flags().StringVar(&f.embeddingModel, "cache-embedding-model", "", "with --cache-similarity: compare prompts by this embedding model through the workers (default: lexically)")
}

// policy is the API's "cache" object, or nil when --cache is not given.
func (f *cacheFlags) policy(c *cobra.Command) (map[string]any, error) {
	if !f.enabled {
		for _, n := range []string{"cache-ttl", "cache-similarity", "cache-max-temperature", "cache-embedding-model"} {
			if c.Flags().Changed(n) {
				return nil, fmt.Errorf("--%s needs --cache", n)
			}
		}
		return nil, nil
	}
	p := map[string]any{"enabled": true}
	if f.ttl != 0 {
		p["ttl"] = f.ttl.String()
	}
	if f.similarity != 0 {
		p["similarity"] = f.similarity
	}
	if f.maxTemperature != 0 {
		p["max_temperature"] = f.maxTemperature
	}
	if f.embeddingModel != "" {
		p["embedding_model"] = f.embeddingModel
	}
	return p, nil
}
