package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/services/guardian/bucket"
)

// modelBucketOut is a tenant's model bucket as the admin API shows it.
type modelBucketOut struct {
	Tenant        string    `json:"tenant"`
	Endpoint      string    `json:"endpoint"`
	Bucket        string    `json:"bucket"`
	Prefix        string    `json:"prefix"`
	Region        string    `json:"region"`
	PathStyle     bool      `json:"path_style"`
	AccessKeyHint string    `json:"access_key_hint"`
	UpdatedAt     time.Time `json:"updated_at"`
}

func printModelBucket(cmd *cobra.Command, out modelBucketOut) {
	prefix := out.Prefix
	if prefix == "" {
		prefix = "(the whole bucket)"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "model bucket of %s: %s bucket %s prefix %s (region %s, path style %t, access key %s)\n",
		out.Tenant, out.Endpoint, out.Bucket, prefix, orDash(out.Region), out.PathStyle, out.AccessKeyHint)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// tenantModelBucketCmd is `aiforge tenants model-bucket`.
func tenantModelBucketCmd() *cobra.Command {
	c := &cobra.Command{Use: "model-bucket", Short: "A tenant's S3 prefix the guardian watches for model folders (each with an aiforge-model.json)"}
	var endpoint, bucketName, prefix, region, keyID string
	var pathStyle bool
	set := &cobra.Command{
		Use:   "set TENANT",
		Short: "Watch a tenant's S3 prefix; the credentials are sealed and never shown again",
		Long: `Watch a tenant's S3 prefix for model folders. Each folder <prefix><name>/ holding an
aiforge-model.json (written last) becomes a version of the tenant's model <tenant>/<name>.

The secret access key is read from AIFORGE_MODEL_BUCKET_SECRET_ACCESS_KEY (or AWS_SECRET_ACCESS_KEY),
never from a flag (flags show in process listings); the access key id from --access-key-id,
AIFORGE_MODEL_BUCKET_ACCESS_KEY_ID or AWS_ACCESS_KEY_ID.`,
		Args:    cobra.ExactArgs(1),
		Example: "  AIFORGE_MODEL_BUCKET_SECRET_ACCESS_KEY=... aiforge tenants model-bucket set acme --endpoint https://s3.example.com --bucket models --prefix acme/ --access-key-id AKIA...",
		RunE: func(cmd *cobra.Command, args []string) error {
			secret := firstEnv("AIFORGE_MODEL_BUCKET_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY")
			if keyID == "" {
				keyID = firstEnv("AIFORGE_MODEL_BUCKET_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID")
			}
			if secret == "" || keyID == "" {
				return fmt.Errorf("the S3 credentials are required: --access-key-id (or AIFORGE_MODEL_BUCKET_ACCESS_KEY_ID) and AIFORGE_MODEL_BUCKET_SECRET_ACCESS_KEY in the environment")
			}
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			in := map[string]any{"endpoint": endpoint, "bucket": bucketName, "prefix": prefix, "region": region,
				"path_style": pathStyle, "access_key_id": keyID, "secret_access_key": secret}
			var out modelBucketOut
			if err := cl.Do(cmd.Context(), "PUT", "/admin/v1/tenants/"+url.PathEscape(args[0])+"/model-bucket", in, &out); err != nil {
				return err
			}
			printModelBucket(cmd, out)
			return nil
		},
	}
	set.Flags().StringVar(&endpoint, "endpoint", "", "the S3 API's URL: http(s)://host[:port] (required)")
	set.Flags().StringVar(&bucketName, "bucket", "", "the bucket (required)")
	set.Flags().StringVar(&prefix, "prefix", "", "the key prefix watched, ending in / (default: the whole bucket)")
	set.Flags().StringVar(&region, "region", "", "the bucket's region (default: asked of the server)")
	set.Flags().BoolVar(&pathStyle, "path-style", false, "address the bucket in the path (most S3 servers other than AWS)")
	set.Flags().StringVar(&keyID, "access-key-id", "", "the access key id (default AIFORGE_MODEL_BUCKET_ACCESS_KEY_ID or AWS_ACCESS_KEY_ID)")
	_ = set.MarkFlagRequired("endpoint")
	_ = set.MarkFlagRequired("bucket")
	get := &cobra.Command{
		Use: "get TENANT", Short: "Show a tenant's model bucket (never its credentials)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var out modelBucketOut
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/tenants/"+url.PathEscape(args[0])+"/model-bucket", nil, &out); err != nil {
				return err
			}
			printModelBucket(cmd, out)
			return nil
		},
	}
	del := &cobra.Command{
		Use: "delete TENANT", Short: "Stop watching a tenant's model bucket (its imported models stay)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			if err := cl.Do(cmd.Context(), "DELETE", "/admin/v1/tenants/"+url.PathEscape(args[0])+"/model-bucket", nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed the model bucket of %s\n", args[0])
			return nil
		},
	}
	c.AddCommand(set, get, del)
	return c
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// modelManifestCmd is `aiforge models manifest DIR`: the aiforge-model.json
// of a model folder, for a tenant's model bucket.
func modelManifestCmd() *cobra.Command {
	var kind, base, name string
	c := &cobra.Command{
		Use:   "manifest DIR",
		Short: "Print the " + bucket.ManifestName + " of a model folder (for a tenant's model bucket: upload it last)",
		Args:  cobra.ExactArgs(1),
		Example: "  aiforge models manifest ./tiny-chat > aiforge-model.json\n" +
			"  aws s3 cp --recursive ./tiny-chat s3://models/acme/tiny-chat/ && aws s3 cp aiforge-model.json s3://models/acme/tiny-chat/",
		RunE: func(cmd *cobra.Command, args []string) error {
			m := bucket.Manifest{Kind: kind, BaseModel: base, Name: name, Files: []events.ModelFile{}}
			root := args[0]
			err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, err := filepath.Rel(root, path)
				if err != nil {
					return err
				}
				rel = filepath.ToSlash(rel)
				if rel == bucket.ManifestName {
					return nil
				}
				if !d.Type().IsRegular() {
					return fmt.Errorf("%s is not a regular file", path)
				}
				f, err := os.Open(path)
				if err != nil {
					return err
				}
				defer func() { _ = f.Close() }()
				h := sha256.New()
				n, err := io.Copy(h, f)
				if err != nil {
					return err
				}
				m.Files = append(m.Files, events.ModelFile{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
				return nil
			})
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(m)
		},
	}
	c.Flags().StringVar(&kind, "kind", events.ModelKindModel, "model or adapter")
	c.Flags().StringVar(&base, "base-model", "", "an adapter's base model")
	c.Flags().StringVar(&name, "name", "", "the model's name under the tenant (default: the folder's name in the bucket)")
	return c
}
