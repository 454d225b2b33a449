package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/ociref"
)

// pullSource splits a pull argument into the repository and revision of a
// pull request: ORG/REPO[@REVISION] for the hub, or an OCI reference
// (oci://REGISTRY/REPO:TAG or @sha256:...), checked here as the edge does.
func pullSource(arg string) (repo, revision string, err error) {
	if !ociref.IsOCI(arg) {
		repo, revision, _ = strings.Cut(arg, "@")
		return repo, revision, nil
	}
	ref, err := ociref.Parse(arg)
	if err != nil {
		return "", "", err
	}
	return ref.Repo(), ref.Reference(), nil
}

func pushCmd() *cobra.Command {
	o := cli.PushOptions{}
	c := &cobra.Command{
		Use:   "push NAME[@VERSION] oci://REGISTRY/REPO:TAG",
		Short: "Publish a published catalog version as an OCI artifact (one layer per file); prints its digest",
		Long: `Fetch a published catalog version through the edge (verified against the catalog) and push it to an
OCI registry as an ORAS-style artifact of type ` + ociref.ArtifactTypeModel + `: one layer per file titled with
its path, and the name, version, kind, base model and every file's sha256 as manifest annotations.
This client pushes, so the registry credentials stay here: a Docker config (--auth-file, default
$DOCKER_CONFIG/config.json) or AIFORGE_OCI_USERNAME / AIFORGE_OCI_PASSWORD. Pull the printed digest
back with aiforge models pull oci://REGISTRY/REPO@DIGEST.`,
		Example: `  aiforge models push acme/sql-lora oci://ghcr.io/acme/sql-lora:v1
  aiforge models push qwen/qwen2.5-0.5b@3 oci://localhost:5000/qwen:3 --plain-http`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			if o.Name, o.Version, err = cli.ParsePushTarget(args[0]); err != nil {
				return err
			}
			o.Ref = args[1]
			o.Username, o.Password = os.Getenv("AIFORGE_OCI_USERNAME"), os.Getenv("AIFORGE_OCI_PASSWORD")
			o.Progress = progressOn(cmd.ErrOrStderr(), "fetch "+o.Name)
			res, err := cl.PushModel(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pushed %s version %d (%d files) to %s\ndigest %s\npull it with: aiforge models pull %s@%s\n",
				res.Name, res.Version.Version, len(res.Version.Files), res.Ref, res.Digest, res.Ref.Repo(), res.Digest)
			return nil
		},
	}
	c.Flags().StringVar(&o.AuthFile, "auth-file", defaultDockerConfig(), "Docker config file with the registry's credentials")
	c.Flags().BoolVar(&o.PlainHTTP, "plain-http", false, "speak plain HTTP to the registry (a local registry only)")
	c.Flags().StringVar(&o.Dir, "dir", "", "keep the fetched files here (default: a temporary directory)")
	return c
}
