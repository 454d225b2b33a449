package main

import (
	"fmt"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
)

const promptsKeyHelp = `They use AIFORGE_API_KEY (the key's tenant owns the prompts).`

// promptTemplate is a version's content from flags: --instructions (or
// --instructions-file) and --user messages.
type promptTemplate struct {
	instructions, instructionsFile string
	user                           []string
}

func (t *promptTemplate) flags(c *cobra.Command) {
	c.Flags().StringVar(&t.instructions, "instructions", "", "the instructions, with {{variable}} placeholders")
	c.Flags().StringVar(&t.instructionsFile, "instructions-file", "", "read the instructions from this file")
	c.Flags().StringArrayVar(&t.user, "user", nil, "a user message of the template, a `string` with {{variable}} placeholders (repeatable)")
}

func (t *promptTemplate) body() (map[string]any, error) {
	body := map[string]any{}
	instr := t.instructions
	if t.instructionsFile != "" {
		b, err := os.ReadFile(t.instructionsFile)
		if err != nil {
			return nil, err
		}
		instr = string(b)
	}
	if instr != "" {
		body["instructions"] = instr
	}
	if len(t.user) > 0 {
		msgs := make([]map[string]string, 0, len(t.user))
		for _, u := range t.user {
			msgs = append(msgs, map[string]string{"role": "user", "content": u})
		}
		body["input"] = msgs
	}
	return body, nil
}

// parseSplit reads "1=80,2=20" into label targets.
func parseSplit(s string) ([]map[string]any, error) {
	var out []map[string]any
	for _, part := range strings.Split(s, ",") {
		v, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(w)
		if !ok || err != nil {
			return nil, fmt.Errorf("invalid --split %q: VERSION=WEIGHT,... with weights summing to 100", s)
		}
		out = append(out, map[string]any{"version": v, "weight": n})
	}
	return out, nil
}

func labelsOf(m map[string]any) string {
	labels, _ := m["labels"].(map[string]any)
	names := make([]string, 0, len(labels))
	for name := range labels {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		var ts []string
		for _, t := range labels[name].([]any) {
			tm := t.(map[string]any)
			ts = append(ts, fmt.Sprintf("v%v:%v%%", tm["version"], tm["weight"]))
		}
		parts = append(parts, name+"="+strings.Join(ts, "+"))
	}
	return strings.Join(parts, " ")
}

func promptsCmd() *cobra.Command {
	c := clientGroup(&cobra.Command{Use: "prompts", Short: "Versioned prompt templates: versions, labels (production, staging), A/B splits, rollback"}, promptsKeyHelp)

	var name string
	var tmpl promptTemplate
	create := &cobra.Command{
		Use: "create", Short: "Create a prompt: its version 1, labelled production", Args: cobra.NoArgs,
		Example: `  aiforge prompts create --name support --instructions 'You are the support agent of {{company}}.'`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			body, err := tmpl.body()
			if err != nil {
				return err
			}
			body["name"] = name
			var out map[string]any
			if err := cl.Do(cmd.Context(), "POST", "/v1/prompts", body, &out); err != nil {
				return err
			}
			return cli.JSON(cmd.OutOrStdout(), out)
		},
	}
	create.Flags().StringVar(&name, "name", "", "the prompt's name")
	tmpl.flags(create)

	var vtmpl promptTemplate
	var vlabels []string
	version := &cobra.Command{
		Use: "version ID", Short: "Add the next version of a prompt (labels are not moved unless --label)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			body, err := vtmpl.body()
			if err != nil {
				return err
			}
			if len(vlabels) > 0 {
				body["labels"] = vlabels
			}
			var out map[string]any
			if err := cl.Do(cmd.Context(), "POST", "/v1/prompts/"+url.PathEscape(args[0])+"/versions", body, &out); err != nil {
				return err
			}
			return cli.JSON(cmd.OutOrStdout(), out)
		},
	}
	vtmpl.flags(version)
	version.Flags().StringArrayVar(&vlabels, "label", nil, "point this label, a `string`, at the new version (repeatable)")

	var label, to, split string
	lbl := &cobra.Command{
		Use: "label ID", Short: "Point a label at a version (a rollback is the same with an earlier one) or split it by weight", Args: cobra.ExactArgs(1),
		Example: `  aiforge prompts label pmpt_... --label production --version 2
  aiforge prompts label pmpt_... --label production --split 1=90,2=10`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			body := map[string]any{"label": label}
			switch {
			case (to == "") == (split == ""):
				return fmt.Errorf("give --version or --split")
			case to != "":
				body["version"] = to
			default:
				if body["versions"], err = parseSplit(split); err != nil {
					return err
				}
			}
			var out map[string]any
			if err := cl.Do(cmd.Context(), "POST", "/v1/prompts/"+url.PathEscape(args[0])+"/labels", body, &out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], labelsOf(out))
			return nil
		},
	}
	lbl.Flags().StringVar(&label, "label", "production", "the label")
	lbl.Flags().StringVar(&to, "version", "", "the one version the label points at")
	lbl.Flags().StringVar(&split, "split", "", "versions and weights, e.g. 1=90,2=10")

	list := &cobra.Command{
		Use: "list", Short: "List your tenant's prompts with their labels", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			var page struct {
				Data []map[string]any `json:"data"`
			}
			if err := cl.Do(cmd.Context(), "GET", "/v1/prompts?limit=100", nil, &page); err != nil {
				return err
			}
			rows := [][]string{}
			for _, p := range page.Data {
				rows = append(rows, []string{fmt.Sprint(p["id"]), fmt.Sprint(p["name"]), fmt.Sprint(p["latest_version"]), labelsOf(p)})
			}
			cli.Table(cmd.OutOrStdout(), []string{"ID", "NAME", "LATEST", "LABELS"}, rows)
			return nil
		},
	}
	get := &cobra.Command{
		Use: "get ID [VERSION]", Short: "Show a prompt, or one version (a number or a label), as JSON", Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tenantClient(cmd)
			if err != nil {
				return err
			}
			path := "/v1/prompts/" + url.PathEscape(args[0])
			if len(args) == 2 {
				path += "/versions/" + url.PathEscape(args[1])
			}
			var out map[string]any
			if err := cl.Do(cmd.Context(), "GET", path, nil, &out); err != nil {
				return err
			}
			return cli.JSON(cmd.OutOrStdout(), out)
		},
	}
	c.AddCommand(create, version, lbl, list, get)
	return c
}
