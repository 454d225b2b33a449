package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/ociref"
)

// PushOptions describe `aiforge models push`.
type PushOptions struct {
	Name    string
	Version int // 0: the latest published
	// Ref is oci://REGISTRY/REPO:TAG.
	Ref string
	// Dir holds the version's files while they are pushed; empty: a
	// temporary directory, removed afterwards.
	Dir string
	// PlainHTTP speaks HTTP to the registry (a local test registry).
	PlainHTTP bool
	// AuthFile is a Docker config file; Username and Password, when set,
	// are used instead. They stay on this machine: the client pushes, so
	// registry credentials never travel through aiforge.
	AuthFile           string
	Username, Password string
	Progress           func(total int64) *Progress
	// HTTPClient talks to the registry; nil: http.DefaultClient.
	HTTPClient *http.Client
}

// PushResult is a pushed version.
type PushResult struct {
	Name    string
	Version catalog.Version
	Ref     ociref.Ref
	Digest  string // the manifest's
}

// PushModel publishes a published catalog version as an OCI artifact: its
// files are fetched through the edge (verified against the catalog), then
// pushed one layer per file titled with its path, under artifact type
// ociref.ArtifactTypeModel with the name, version, kind, base model and
// every file's sha256 as manifest annotations, and tagged.
func (c *Client) PushModel(ctx context.Context, o PushOptions) (PushResult, error) {
	ref, err := ociref.Parse(o.Ref)
	if err != nil {
		return PushResult{}, err
	}
	if ref.Tag == "" {
		return PushResult{}, errors.New("push to a tag (oci://REGISTRY/REPO:TAG); the digest is what the push answers")
	}
	var e catalog.Entry
	if err := c.Do(ctx, "GET", CatalogPath(o.Name), nil, &e); err != nil {
		return PushResult{}, err
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "aiforge-push-*"); err != nil {
			return PushResult{}, err
		}
		defer os.RemoveAll(dir)
	}
	res, err := c.FetchModel(ctx, FetchOptions{Name: o.Name, Version: o.Version, Dir: dir, Progress: o.Progress})
	if err != nil {
		return PushResult{}, err
	}
	repo, err := remote.NewRepository(ref.Registry + "/" + ref.Repository)
	if err != nil {
		return PushResult{}, err
	}
	repo.PlainHTTP = o.PlainHTTP
	cred := auth.StaticCredential(ref.Registry, auth.Credential{Username: o.Username, Password: o.Password})
	if o.Username == "" && o.AuthFile != "" {
		store, err := credentials.NewStore(o.AuthFile, credentials.StoreOptions{})
		if err != nil {
			return PushResult{}, fmt.Errorf("registry auth file: %w", err)
		}
		cred = credentials.Credential(store)
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	repo.Client = &auth.Client{Client: hc, Cache: auth.NewCache(), Credential: cred,
		Header: http.Header{"User-Agent": {"aiforge-cli/1"}}}

	sums := map[string]string{}
	var layers []ocispec.Descriptor
	for _, f := range res.Version.Files {
		d := ocispec.Descriptor{MediaType: ociref.MediaTypeFile, Digest: digest.NewDigestFromEncoded(digest.SHA256, f.SHA256),
			Size: f.Size, Annotations: map[string]string{ocispec.AnnotationTitle: f.Path}}
		if err := d.Digest.Validate(); err != nil {
			return PushResult{}, fmt.Errorf("%s: %w", f.Path, err)
		}
		if err := pushBlob(ctx, repo, d, filepath.Join(dir, filepath.FromSlash(f.Path))); err != nil {
			return PushResult{}, fmt.Errorf("push %s: %w", f.Path, err)
		}
		sums[f.Path] = f.SHA256
		layers = append(layers, d)
	}
	sumJSON, err := json.Marshal(sums)
	if err != nil {
		return PushResult{}, err
	}
	ann := map[string]string{
		ociref.AnnotationName: res.Name, ociref.AnnotationVersion: strconv.Itoa(res.Version.Version),
		ociref.AnnotationKind: e.Kind, ociref.AnnotationSHA256s: string(sumJSON),
	}
	if e.BaseModel != "" {
		ann[ociref.AnnotationBaseModel] = e.BaseModel
	}
	if res.Version.License != "" {
		ann["org.opencontainers.image.licenses"] = res.Version.License
	}
	md, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ociref.ArtifactTypeModel,
		oras.PackManifestOptions{Layers: layers, ManifestAnnotations: ann})
	if err != nil {
		return PushResult{}, fmt.Errorf("push the manifest: %w", err)
	}
	if err := repo.Tag(ctx, md, ref.Tag); err != nil {
		return PushResult{}, fmt.Errorf("tag %s: %w", ref.Tag, err)
	}
	return PushResult{Name: res.Name, Version: res.Version, Ref: ref, Digest: md.Digest.String()}, nil
}

// pushBlob uploads one file unless the registry has it already.
func pushBlob(ctx context.Context, repo *remote.Repository, d ocispec.Descriptor, path string) error {
	if ok, err := repo.Blobs().Exists(ctx, d); err == nil && ok {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return repo.Blobs().Push(ctx, d, f)
}

// ParsePushTarget splits NAME[@VERSION].
func ParsePushTarget(s string) (string, int, error) {
	name, v, ok := strings.Cut(s, "@")
	if !ok {
		return name, 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("version %q of %s is not a version number", v, name)
	}
	return name, n, nil
}
