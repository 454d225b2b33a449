package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/catalog"
)

// modelFlowCmds are the catalog subcommands of `aiforge models`: uploads,
// hub pulls, the catalog and deployments.
func modelFlowCmds() []*cobra.Command {
	return []*cobra.Command{uploadCmd(), pullCmd(), pushCmd(), fetchCmd(), catalogCmd(), deployCmd(), rollbackCmd(), deploymentsCmd()}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && cli.IsTerminal(f)
}

func progressOn(w io.Writer, label string) func(int64) *cli.Progress {
	tty := isTerminal(w)
	return func(total int64) *cli.Progress { return cli.NewProgress(w, tty, label, total) }
}

// versionStatus is what the wait for a verdict shows: the status and, while
// the guardian reads, how far it got.
func versionStatus(v catalog.Version) string {
	st := v.Status
	if p := v.Progress; p != nil && p.BytesTotal > 0 {
		st += fmt.Sprintf(" %d%%", p.BytesDone*100/p.BytesTotal)
	}
	return st
}

// finishVerdict prints the verdict and fails the command on a rejection.
func finishVerdict(w io.Writer, name string, v catalog.Version) error {
	cli.PrintVerdict(w, name, v)
	if v.Status == catalog.StatusRejected {
		return fmt.Errorf("%s version %d was rejected", name, v.Version)
	}
	return nil
}

func uploadCmd() *cobra.Command {
	var o cli.UploadOptions
	var manifest string
	var wait bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "upload DIR --name NAME",
		Short: "Upload a model directory into the catalog (resumable); the guardian scans it",
		Example: `  aiforge models upload ./Qwen2.5-0.5B --name qwen/qwen2.5-0.5b
  aiforge models upload ./my-lora --name acme/lora --kind adapter --base-model qwen/qwen2.5-0.5b
  aiforge models upload ./model --name acme/m --manifest SHA256SUMS`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			o.Dir = args[0]
			if manifest != "" {
				b, err := os.ReadFile(manifest)
				if err != nil {
					return err
				}
				if o.Manifest, err = cli.ParseManifest(b); err != nil {
					return err
				}
			}
			o.Progress = progressOn(cmd.ErrOrStderr(), "upload "+o.Name)
			res, err := cl.UploadModel(cmd.Context(), o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "uploaded %s version %d (%d parts sent, %d already there); status %s\n",
				res.Name, res.Version.Version, res.Sent, res.Skipped, res.Version.Status)
			if !wait {
				return nil
			}
			ctx, cancel := withTimeout(cmd.Context(), timeout)
			defer cancel()
			errw := cmd.ErrOrStderr()
			spin := cli.StartSpinner(errw, isTerminal(errw),
				fmt.Sprintf("waiting for the guardian's verdict on %s version %d", o.Name, res.Version.Version), 100*time.Millisecond)
			v, err := cl.WaitVersion(ctx, o.Name, res.Version.Version, 0, nil, func(v catalog.Version) {
				if v.Status != catalog.StatusPublished && v.Status != catalog.StatusRejected {
					spin.Status(versionStatus(v)) // the verdict itself is printed below
				}
			})
			spin.Stop()
			if err != nil {
				return err
			}
			return finishVerdict(out, o.Name, v)
		},
	}
	c.Flags().StringVar(&o.Name, "name", "", "catalog name, e.g. org/model (required)")
	c.Flags().StringVar(&o.Kind, "kind", "model", "model or adapter")
	c.Flags().StringVar(&o.BaseModel, "base-model", "", "the served model an adapter applies to (its workers load the adapter)")
	c.Flags().StringVar(&manifest, "manifest", "", "expected SHA-256 per file: JSON {path: sha256} or sha256sum lines")
	c.Flags().IntVar(&o.Parallel, "parallel", 4, "parts sent at once")
	c.Flags().BoolVar(&wait, "wait", true, "wait for the guardian's verdict")
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting after this long (0: no limit)")
	_ = c.MarkFlagRequired("name")
	return c
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

func pullCmd() *cobra.Command {
	var name, kind, base string
	var wait bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "pull ORG/REPO[@REVISION] | oci://REGISTRY/REPO:TAG | oci://REGISTRY/REPO@sha256:DIGEST",
		Short: "Mirror a hub repository or an OCI artifact into the catalog; the guardian pulls and scans it",
		Example: `  aiforge models pull Qwen/Qwen2.5-0.5B-Instruct@main --name qwen-small
  aiforge models pull oci://ghcr.io/acme/sql-lora:v1 --base-model qwen-small`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			repo, rev, err := pullSource(args[0])
			if err != nil {
				return err
			}
			ans, err := cl.RequestPull(cmd.Context(), cli.PullOptions{Repo: repo, Revision: rev, Name: name, Kind: kind, BaseModel: base})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "pull %s requested: %s -> %s\n", ans.PullID, cli.PullRef(ans.Repo, ans.Revision), ans.Name)
			if !wait {
				return nil
			}
			ctx, cancel := withTimeout(cmd.Context(), timeout)
			defer cancel()
			_, v, err := cl.FollowPull(ctx, ans, out, progressOn(cmd.ErrOrStderr(), "mirror "+ans.Repo))
			if err != nil {
				return err
			}
			return finishVerdict(out, ans.Name, v)
		},
	}
	c.Flags().StringVar(&name, "name", "", "catalog name (default: the repository)")
	c.Flags().StringVar(&kind, "kind", "", "model (default) or adapter")
	c.Flags().StringVar(&base, "base-model", "", "the served model an adapter applies to (its workers load the adapter)")
	c.Flags().BoolVar(&wait, "wait", true, "wait for the mirror and the guardian's verdict")
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting after this long (0: no limit)")
	return c
}

func fetchCmd() *cobra.Command {
	var o cli.FetchOptions
	c := &cobra.Command{
		Use:   "fetch [NAME] DIR",
		Short: "Download a published version's files into a directory, verified against the catalog",
		Long: `Download a published catalog version's files into DIR for an engine to load: NAME's latest
published version (or --version N), or with --deployment MODEL the version that served model runs
(NAME may then be left out). Each file is
checked against the catalog's size and SHA-256 before it is renamed into place; files already there
with the right digest are kept. DIR/` + cli.VersionFile + ` records what DIR holds once every file is in.`,
		Example: `  aiforge models fetch qwen/qwen2.5-0.5b ./weights
  aiforge models fetch qwen/qwen2.5-0.5b ./weights --version 3
  aiforge models fetch ./weights --deployment qwen-small`,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.Deployment != "" {
				return cobra.RangeArgs(1, 2)(cmd, args)
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			o.Dir = args[len(args)-1]
			if len(args) == 2 {
				o.Name = args[0]
			}
			label := "fetch " + o.Name
			if o.Name == "" {
				label = "fetch " + o.Deployment
			}
			o.Progress = progressOn(cmd.ErrOrStderr(), label)
			res, err := cl.FetchModel(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fetched %s version %d into %s: %d files, %s (%d already there)\n",
				res.Name, res.Version.Version, o.Dir, len(res.Version.Files), cli.HumanBytes(res.Bytes), res.Present)
			return nil
		},
	}
	c.Flags().IntVar(&o.Version, "version", 0, "catalog version (default: the latest published)")
	c.Flags().StringVar(&o.Deployment, "deployment", "", "fetch the catalog version this served model runs")
	return c
}

func catalogCmd() *cobra.Command {
	var asJSON *bool
	c := &cobra.Command{
		Use: "catalog [NAME]", Short: "List catalog models and their versions (with verdicts)", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var entries []catalog.Entry
			if len(args) == 1 {
				var e catalog.Entry
				if err := cl.Do(cmd.Context(), "GET", cli.CatalogPath(args[0]), nil, &e); err != nil {
					return err
				}
				entries = []catalog.Entry{e}
			} else {
				var out listOut[catalog.Entry]
				if err := cl.Do(cmd.Context(), "GET", "/admin/v1/catalog", nil, &out); err != nil {
					return err
				}
				entries = out.Data
			}
			if *asJSON {
				if len(args) == 1 {
					return cli.JSON(cmd.OutOrStdout(), entries[0])
				}
				return cli.JSON(cmd.OutOrStdout(), entries)
			}
			rows := [][]string{}
			for _, e := range entries {
				for _, v := range e.Versions {
					var size int64
					for _, f := range v.Files {
						size += f.Size
					}
					note := ""
					if len(v.Reasons) > 0 {
						note = v.Reasons[0].Code
						if len(v.Reasons) > 1 {
							note += fmt.Sprintf(" (+%d)", len(v.Reasons)-1)
						}
					} else if v.Progress != nil && v.Progress.BytesTotal > 0 {
						note = fmt.Sprintf("%d%%", v.Progress.BytesDone*100/v.Progress.BytesTotal)
					}
					params := ""
					if v.Parameters > 0 {
						params = cli.HumanCount(v.Parameters)
					}
					rows = append(rows, []string{e.Name, strconv.Itoa(v.Version), e.Kind, v.Status, params, v.License,
						strconv.Itoa(len(v.Files)), cli.HumanBytes(size), v.CreatedAt.Format(time.RFC3339), note})
				}
			}
			cli.Table(cmd.OutOrStdout(), []string{"NAME", "VERSION", "KIND", "STATUS", "PARAMS", "LICENSE", "FILES", "SIZE", "CREATED", "NOTE"}, rows)
			return nil
		},
	}
	asJSON = jsonFlag(c)
	return c
}

func printDeployment(w io.Writer, verb string, d catalog.Deployment) {
	fmt.Fprintf(w, "%s %s -> %s version %d\n", verb, d.Model, d.Catalog, d.Version)
}

func deployCmd() *cobra.Command {
	var name string
	var version int
	c := &cobra.Command{
		Use: "deploy MODEL --catalog NAME [--version N]", Short: "Serve a published catalog version under a model name",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var d catalog.Deployment
			in := map[string]any{"model": args[0], "catalog": name, "version": version}
			if err := cl.Do(cmd.Context(), "POST", "/admin/v1/deployments", in, &d); err != nil {
				return err
			}
			printDeployment(cmd.OutOrStdout(), "deployed", d)
			return nil
		},
	}
	c.Flags().StringVar(&name, "catalog", "", "catalog name (default: MODEL)")
	c.Flags().IntVar(&version, "version", 0, "catalog version (default: the latest published)")
	return c
}

func rollbackCmd() *cobra.Command {
	return &cobra.Command{
		Use: "rollback MODEL", Short: "Return a served model to its previous catalog version", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var d catalog.Deployment
			if err := cl.Do(cmd.Context(), "POST", "/admin/v1/deployments/rollback", map[string]string{"model": args[0]}, &d); err != nil {
				return err
			}
			printDeployment(cmd.OutOrStdout(), "rolled back", d)
			return nil
		},
	}
}

func deploymentsCmd() *cobra.Command {
	var asJSON *bool
	c := &cobra.Command{
		Use: "deployments", Short: "List which catalog version each served model runs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var out listOut[catalog.Deployment]
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/deployments", nil, &out); err != nil {
				return err
			}
			if *asJSON {
				return cli.JSON(cmd.OutOrStdout(), out.Data)
			}
			rows := [][]string{}
			for _, d := range out.Data {
				prev := ""
				if n := len(d.History); n > 0 {
					prev = fmt.Sprintf("%s v%d", d.History[n-1].Catalog, d.History[n-1].Version)
				}
				rows = append(rows, []string{d.Model, d.Catalog, strconv.Itoa(d.Version), d.DeployedAt.Format(time.RFC3339), prev})
			}
			cli.Table(cmd.OutOrStdout(), []string{"MODEL", "CATALOG", "VERSION", "DEPLOYED", "PREVIOUS"}, rows)
			return nil
		},
	}
	asJSON = jsonFlag(c)
	return c
}
