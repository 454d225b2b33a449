// Package ocitest runs an in-process OCI registry for tests
// (go-containerregistry's registry on httptest) with the faults the
// guardian must survive: tampered blobs, blob GETs redirected to a blob
// storage host, and basic auth. It counts blob GETs and records the
// Authorization headers the blob storage saw, and it pushes ORAS file
// artifacts and KitOps ModelKits with oras-go.
package ocitest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// Registry is a test registry.
type Registry struct {
	// Host is host:port, to be listed as insecure (plain HTTP).
	Host string
	srv  *httptest.Server
	blob *httptest.Server

	mu        sync.Mutex
	mem       registry.BlobHandler
	tampered  map[string][]byte
	redirect  bool
	user, pw  string
	blobGETs  int
	blobAuth  []string // Authorization headers the blob storage saw
	storeGETs int
}

// New starts a registry (closed at the end of the test).
func New(t testing.TB) *Registry {
	r := &Registry{mem: registry.NewInMemoryBlobHandler(), tampered: map[string][]byte{}}
	h := registry.New(registry.WithBlobHandler(blobs{r}), registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		user, pw := r.user, r.pw
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/sha256:") {
			r.blobGETs++
		}
		r.mu.Unlock()
		if user != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != user || p != pw {
				w.Header().Set("WWW-Authenticate", `Basic realm="ocitest"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, req)
	}))
	// The blob storage a registry redirects blob GETs to: another host.
	r.blob = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.blobAuth = append(r.blobAuth, req.Header.Get("Authorization"))
		r.storeGETs++
		r.mu.Unlock()
		hsh, err := v1.NewHash(strings.TrimPrefix(req.URL.Path, "/"))
		if err != nil {
			http.NotFound(w, req)
			return
		}
		rc, err := r.mem.Get(req.Context(), "", hsh)
		if err != nil {
			http.NotFound(w, req)
			return
		}
		defer rc.Close()
		_, _ = io.Copy(w, rc)
	}))
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	t.Cleanup(func() { r.srv.Close(); r.blob.Close() })
	return r
}

// blobs serves the registry's blobs from memory, with the faults.
type blobs struct{ r *Registry }

func (b blobs) Get(ctx context.Context, repo string, h v1.Hash) (io.ReadCloser, error) {
	b.r.mu.Lock()
	bad, tampered := b.r.tampered[h.String()]
	redirect := b.r.redirect
	b.r.mu.Unlock()
	if tampered {
		return io.NopCloser(bytes.NewReader(bad)), nil
	}
	if redirect {
		return nil, registry.RedirectError{Location: b.r.blob.URL + "/" + h.String(), Code: http.StatusTemporaryRedirect}
	}
	return b.r.mem.Get(ctx, repo, h)
}

func (b blobs) Stat(ctx context.Context, repo string, h v1.Hash) (int64, error) {
	return b.r.mem.(registry.BlobStatHandler).Stat(ctx, repo, h)
}

func (b blobs) Put(ctx context.Context, repo string, h v1.Hash, rc io.ReadCloser) error {
	return b.r.mem.(registry.BlobPutHandler).Put(ctx, repo, h, rc)
}

// RequireAuth makes every request need basic auth with user and password.
func (r *Registry) RequireAuth(user, password string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.user, r.pw = user, password
}

// Tamper serves bytes of the same length but different content for the
// blob with this digest.
func (r *Registry) Tamper(dig string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc, err := r.mem.Get(context.Background(), "", v1.Hash{Algorithm: "sha256", Hex: strings.TrimPrefix(dig, "sha256:")})
	if err != nil {
		panic(err)
	}
	b, _ := io.ReadAll(rc)
	for i := range b {
		b[i] ^= 0x5a
	}
	r.tampered[dig] = b
}

// RedirectBlobs makes blob GETs redirect to the blob storage host.
func (r *Registry) RedirectBlobs(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.redirect = on
}

// BlobGETs counts GET requests of blobs at the registry.
func (r *Registry) BlobGETs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blobGETs
}

// StorageAuth returns the Authorization headers (empty when absent) that
// the blob storage received, one per request.
func (r *Registry) StorageAuth() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.blobAuth...)
}

// Ref is oci://HOST/repo:tag.
func (r *Registry) Ref(repo, tag string) string { return "oci://" + r.Host + "/" + repo + ":" + tag }

// Pushed is a pushed artifact.
type Pushed struct {
	Digest string
	Layers []ocispec.Descriptor
}

func (r *Registry) repo(t testing.TB, name string) *remote.Repository {
	t.Helper()
	repo, err := remote.NewRepository(r.Host + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	r.mu.Lock()
	cred := auth.Credential{Username: r.user, Password: r.pw}
	r.mu.Unlock()
	repo.Client = &auth.Client{Client: http.DefaultClient, Cache: auth.NewCache(), Credential: auth.StaticCredential(r.Host, cred)}
	return repo
}

// PushFiles pushes an ORAS artifact: one layer per file, titled with its
// path, in path order.
func (r *Registry) PushFiles(t testing.TB, name, tag, artifactType string, files map[string][]byte, annotations map[string]string) Pushed {
	t.Helper()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var layers []Layer
	for _, p := range paths {
		layers = append(layers, Layer{MediaType: "application/octet-stream", Data: files[p], Annotations: map[string]string{ocispec.AnnotationTitle: p}})
	}
	return r.Push(t, name, tag, artifactType, ocispec.DescriptorEmptyJSON, nil, layers, annotations)
}

// Layer is a layer to push.
type Layer struct {
	MediaType   string
	Data        []byte
	Annotations map[string]string
}

// Push pushes a manifest with the given config and layers and tags it.
func (r *Registry) Push(t testing.TB, name, tag, artifactType string, config ocispec.Descriptor, configData []byte, layers []Layer, annotations map[string]string) Pushed {
	t.Helper()
	ctx := context.Background()
	store := memory.New()
	var descs []ocispec.Descriptor
	for _, l := range layers {
		d := ocispec.Descriptor{MediaType: l.MediaType, Digest: digest.FromBytes(l.Data), Size: int64(len(l.Data)), Annotations: l.Annotations}
		if err := store.Push(ctx, d, bytes.NewReader(l.Data)); err != nil {
			t.Fatal(err)
		}
		descs = append(descs, d)
	}
	opts := oras.PackManifestOptions{Layers: descs, ManifestAnnotations: annotations}
	if configData != nil {
		config.Digest, config.Size = digest.FromBytes(configData), int64(len(configData))
		if err := store.Push(ctx, config, bytes.NewReader(configData)); err != nil {
			t.Fatal(err)
		}
		opts.ConfigDescriptor = &config
	}
	md, err := oras.PackManifest(ctx, store, oras.PackManifestVersion1_1, artifactType, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, md, tag); err != nil {
		t.Fatal(err)
	}
	if _, err := oras.Copy(ctx, store, tag, r.repo(t, name), tag, oras.DefaultCopyOptions); err != nil {
		t.Fatal(err)
	}
	return Pushed{Digest: md.Digest.String(), Layers: descs}
}

// Tar packs files (path -> content) as a tar, gzipped when gz. A path
// ending in "->target" is written as a symlink to target instead.
func Tar(t testing.TB, gz bool, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if name, target, ok := strings.Cut(p, "->"); ok {
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[p]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[p]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// KitLayer is one KitOps layer: its role (model, modelpart, dataset, docs,
// code, prompts) and files.
type KitLayer struct {
	Role  string
	Files map[string][]byte
}

// PushModelKit pushes a KitOps ModelKit: the Kitfile (as JSON) as config,
// each layer a tar+gzip of its files.
func (r *Registry) PushModelKit(t testing.TB, name, tag string, kitfile any, layers []KitLayer) Pushed {
	t.Helper()
	cfg, err := json.Marshal(kitfile)
	if err != nil {
		t.Fatal(err)
	}
	var ls []Layer
	for _, l := range layers {
		ls = append(ls, Layer{MediaType: "application/vnd.kitops.modelkit." + l.Role + ".v1.tar+gzip", Data: Tar(t, true, l.Files)})
	}
	return r.Push(t, name, tag, "application/vnd.kitops.modelkit.manifest.v1+json",
		ocispec.Descriptor{MediaType: "application/vnd.kitops.modelkit.config.v1+json"}, cfg, ls, nil)
}

// SHA256 is the hex sha256 of b.
func SHA256(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
