// Package oci is the guardian's client of OCI registries: it resolves a tag
// to a manifest digest, reads the manifest and config within bounds, and
// streams blobs while verifying their digest and size. Credentials come from
// a Docker config file or a fixed username and password (the guardian's
// configuration, never the bus); they are sent to the registry only, never
// to the blob storage a registry redirects to, and never appear in errors.
package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/aiforge/aiforge/pkg/netguard"
	"github.com/aiforge/aiforge/pkg/ociref"
)

// Errors a pull is rejected with; the guardian maps them to reason codes.
var (
	// ErrMismatch: a manifest or blob's bytes do not hash to its digest, or
	// its size is not the descriptor's.
	ErrMismatch = errors.New("oci: digest or size mismatch")
	// ErrLimit: the artifact exceeds a bound (manifest size, layers, bytes,
	// archive entries).
	ErrLimit = errors.New("oci: limit exceeded")
	// ErrUnsupported: the artifact is not one the guardian maps to files.
	ErrUnsupported = errors.New("oci: unsupported artifact")
	// ErrRedirectRefused: a registry redirected to a refused location.
	ErrRedirectRefused = errors.New("oci: redirect refused")
)

// Limits bound what one pull may read.
type Limits struct {
	MaxManifestBytes int64 // default 4 MiB
	MaxConfigBytes   int64 // the ModelKit config (Kitfile); default 1 MiB
	MaxLayers        int   // default 1024
	MaxTotalBytes    int64 // all layers, and all extracted bytes; default 512 GiB
	MaxEntries       int   // files extracted from archive layers; default 10000
}

func (l Limits) withDefaults() Limits {
	if l.MaxManifestBytes <= 0 {
		l.MaxManifestBytes = 4 << 20
	}
	if l.MaxConfigBytes <= 0 {
		l.MaxConfigBytes = 1 << 20
	}
	if l.MaxLayers <= 0 {
		l.MaxLayers = 1024
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = 512 << 30
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = 10000
	}
	return l
}

// Config configures a Client.
type Config struct {
	// InsecureRegistries are the registries (host[:port]) spoken to over
	// plain HTTP; every other is HTTPS.
	InsecureRegistries []string
	// AuthFile is a Docker config file (config.json with "auths" and
	// credential helpers); empty or missing: none.
	AuthFile string
	// Username and Password, when set, authenticate against every
	// registry and take precedence over AuthFile.
	Username, Password string
	// HTTPClient's transport is used; its CheckRedirect is replaced. Nil:
	// a transport that refuses link-local and metadata addresses.
	HTTPClient *http.Client
	UserAgent  string
	Limits     Limits
}

// Client talks to registries.
type Client struct {
	insecure []string
	cred     auth.CredentialFunc
	hc       *http.Client
	ua       string
	limits   Limits
	secret   string // for redaction only
}

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if strings.ContainsAny(cfg.Username+cfg.Password, "\r\n\x00") {
		return nil, errors.New("oci: credentials contain invalid characters")
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("oci: a username needs a password and the other way round")
	}
	c := &Client{ua: cfg.UserAgent, limits: cfg.Limits.withDefaults(), secret: cfg.Password}
	for _, h := range cfg.InsecureRegistries {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			c.insecure = append(c.insecure, h)
		}
	}
	if c.ua == "" {
		c.ua = "aiforge-guardian/1"
	}
	switch {
	case cfg.Username != "":
		cred := auth.Credential{Username: cfg.Username, Password: cfg.Password}
		c.cred = func(context.Context, string) (auth.Credential, error) { return cred, nil }
	case cfg.AuthFile != "":
		store, err := credentials.NewStore(cfg.AuthFile, credentials.StoreOptions{})
		if err != nil {
			return nil, fmt.Errorf("oci: auth file: %w", err)
		}
		c.cred = credentials.Credential(store)
	default:
		c.cred = func(context.Context, string) (auth.Credential, error) { return auth.EmptyCredential, nil }
	}
	var hc http.Client
	if cfg.HTTPClient != nil {
		hc = *cfg.HTTPClient
	}
	if hc.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: refuseLinkLocal}
		t.DialContext = d.DialContext
		hc.Transport = t
	}
	hc.CheckRedirect = checkRedirect
	c.hc = &hc
	return c, nil
}

// Limits returns the client's bounds.
func (c *Client) Limits() Limits { return c.limits }

// refuseLinkLocal stops connections to link-local (169.254.0.0/16, the
// cloud metadata service among them), metadata, unspecified and multicast
// addresses, whatever name resolved to them (netguard).
func refuseLinkLocal(network, address string, c syscall.RawConn) error {
	if err := netguard.Control(network, address, c); err != nil {
		return fmt.Errorf("%w: %w", ErrRedirectRefused, err)
	}
	return nil
}

// checkRedirect follows a registry's redirect of a blob GET (to blob
// storage on another host) without its Authorization header, and refuses
// downgrades to HTTP, non-HTTP schemes, metadata hosts and long chains.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return fmt.Errorf("%w: too many redirects", ErrRedirectRefused)
	}
	u, first := req.URL, via[0].URL
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: scheme %q", ErrRedirectRefused, u.Scheme)
	}
	if first.Scheme == "https" && u.Scheme != "https" {
		return fmt.Errorf("%w: https to http", ErrRedirectRefused)
	}
	name := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if slices.Contains(netguard.MetadataHosts, name) {
		return fmt.Errorf("%w: metadata host %q", ErrRedirectRefused, name)
	}
	if ip := net.ParseIP(name); ip != nil && netguard.RefusedIP(ip) {
		return fmt.Errorf("%w: link-local address %s", ErrRedirectRefused, name)
	}
	if !strings.EqualFold(u.Host, first.Host) || u.Scheme != first.Scheme {
		req.Header.Del("Authorization")
	}
	return nil
}

// Redact removes the configured password from msg (defence in depth: the
// registry client does not put credentials in errors).
func (c *Client) Redact(msg string) string {
	if c.secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, c.secret, "[REDACTED]")
}

// Repository returns the oras repository of ref, authenticated and with
// plain HTTP only for insecure registries.
func (c *Client) Repository(ref ociref.Ref) (*remote.Repository, error) {
	repo, err := remote.NewRepository(ref.Registry + "/" + ref.Repository)
	if err != nil {
		return nil, err
	}
	repo.PlainHTTP = slices.Contains(c.insecure, ref.Registry)
	repo.MaxMetadataBytes = c.limits.MaxManifestBytes
	repo.Client = &auth.Client{
		Client:     c.hc,
		Cache:      auth.NewCache(),
		Credential: c.cred,
		Header:     http.Header{"User-Agent": {c.ua}},
	}
	return repo, nil
}

// Manifest is a resolved image manifest: its pinned digest and content.
type Manifest struct {
	Digest string // sha256:...
	Size   int64
	ocispec.Manifest
}

var manifestTypes = []string{ocispec.MediaTypeImageManifest, "application/vnd.docker.distribution.manifest.v2+json"}

// Resolve fetches the manifest ref names (a tag is resolved to the digest
// of the bytes read), verifies it against a digest reference, and checks
// the layer bounds.
func (c *Client) Resolve(ctx context.Context, ref ociref.Ref) (Manifest, error) {
	repo, err := c.Repository(ref)
	if err != nil {
		return Manifest{}, err
	}
	desc, rc, err := repo.Manifests().FetchReference(ctx, ref.Reference())
	if err != nil {
		return Manifest{}, fmt.Errorf("oci: fetch manifest %s: %w", ref, err)
	}
	defer rc.Close()
	if desc.Size > c.limits.MaxManifestBytes {
		return Manifest{}, fmt.Errorf("%w: manifest of %d bytes (at most %d)", ErrLimit, desc.Size, c.limits.MaxManifestBytes)
	}
	b, err := io.ReadAll(io.LimitReader(rc, c.limits.MaxManifestBytes+1))
	if err != nil {
		return Manifest{}, fmt.Errorf("oci: read manifest %s: %w", ref, err)
	}
	if int64(len(b)) > c.limits.MaxManifestBytes {
		return Manifest{}, fmt.Errorf("%w: manifest over %d bytes", ErrLimit, c.limits.MaxManifestBytes)
	}
	sum := sha256.Sum256(b)
	dig := "sha256:" + hex.EncodeToString(sum[:])
	if ref.Digest != "" && dig != ref.Digest {
		return Manifest{}, fmt.Errorf("%w: the manifest hashes to %s, not %s", ErrMismatch, dig, ref.Digest)
	}
	if desc.Digest != "" && desc.Digest.String() != dig {
		return Manifest{}, fmt.Errorf("%w: the registry says the manifest is %s; its bytes hash to %s", ErrMismatch, desc.Digest, dig)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: the manifest is not JSON: %v", ErrUnsupported, err)
	}
	mt := m.MediaType
	if mt == "" {
		mt = desc.MediaType
	}
	if !slices.Contains(manifestTypes, mt) {
		return Manifest{}, fmt.Errorf("%w: manifest media type %q (an image index or unknown; name a single artifact's manifest)", ErrUnsupported, mt)
	}
	if len(m.Layers) == 0 {
		return Manifest{}, fmt.Errorf("%w: the artifact has no layers", ErrUnsupported)
	}
	if len(m.Layers) > c.limits.MaxLayers {
		return Manifest{}, fmt.Errorf("%w: %d layers (at most %d)", ErrLimit, len(m.Layers), c.limits.MaxLayers)
	}
	var total int64
	for i, l := range m.Layers {
		if err := checkDescriptor(l); err != nil {
			return Manifest{}, fmt.Errorf("layer %d: %w", i, err)
		}
		total += l.Size
		if total > c.limits.MaxTotalBytes {
			return Manifest{}, fmt.Errorf("%w: layers total over %d bytes", ErrLimit, c.limits.MaxTotalBytes)
		}
	}
	return Manifest{Digest: dig, Size: int64(len(b)), Manifest: m}, nil
}

func checkDescriptor(d ocispec.Descriptor) error {
	if d.Digest.Algorithm() != digest.SHA256 || d.Digest.Validate() != nil {
		return fmt.Errorf("%w: digest %q is not a valid sha256 digest", ErrUnsupported, d.Digest)
	}
	if d.Size < 0 {
		return fmt.Errorf("%w: negative size", ErrUnsupported)
	}
	return nil
}

// FetchSmall reads a small blob (a config) of at most max bytes, verified.
func (c *Client) FetchSmall(ctx context.Context, ref ociref.Ref, d ocispec.Descriptor, max int64) ([]byte, error) {
	if err := checkDescriptor(d); err != nil {
		return nil, err
	}
	if d.Size > max {
		return nil, fmt.Errorf("%w: blob %s of %d bytes (at most %d)", ErrLimit, d.Digest, d.Size, max)
	}
	var b strings.Builder
	if _, err := c.Download(ctx, ref, d, &b, nil); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// Download streams the blob d into w and verifies its size and sha256
// while it flows; it returns the hex sha256. A mismatch is ErrMismatch:
// what was written to w must then be discarded.
func (c *Client) Download(ctx context.Context, ref ociref.Ref, d ocispec.Descriptor, w io.Writer, progress func(n int64)) (string, error) {
	if err := checkDescriptor(d); err != nil {
		return "", err
	}
	repo, err := c.Repository(ref)
	if err != nil {
		return "", err
	}
	rc, err := repo.Blobs().Fetch(ctx, d)
	if err != nil {
		if strings.Contains(err.Error(), "mismatch") {
			return "", fmt.Errorf("%w: blob %s: %v", ErrMismatch, d.Digest, err)
		}
		return "", fmt.Errorf("oci: fetch blob %s: %w", d.Digest, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h, progressWriter(progress)), io.LimitReader(rc, d.Size+1))
	if err != nil {
		return "", fmt.Errorf("oci: read blob %s: %w", d.Digest, err)
	}
	return verify(h, n, d)
}

func verify(h hash.Hash, n int64, d ocispec.Descriptor) (string, error) {
	sum := hex.EncodeToString(h.Sum(nil))
	if n != d.Size {
		return sum, fmt.Errorf("%w: blob %s: %s bytes, the manifest says %d", ErrMismatch, d.Digest, sizeDesc(n, d.Size), d.Size)
	}
	if "sha256:"+sum != d.Digest.String() {
		return sum, fmt.Errorf("%w: blob %s hashes to sha256:%s", ErrMismatch, d.Digest, sum)
	}
	return sum, nil
}

func sizeDesc(n, size int64) string {
	if n > size {
		return fmt.Sprintf("more than %d", size)
	}
	return fmt.Sprint(n)
}

type progressWriter func(n int64)

func (p progressWriter) Write(b []byte) (int, error) {
	if p != nil {
		p(int64(len(b)))
	}
	return len(b), nil
}
