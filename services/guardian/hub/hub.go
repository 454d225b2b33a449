// Package hub is a pull-through client for the Hugging Face Hub.
//
// It resolves revisions to immutable commits, lists the files of a model
// repository at a commit, and streams file downloads while verifying their
// size and SHA-256 digest. The access token is only ever sent to the host
// of Config.BaseURL and never appears in errors or log output.
package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Sentinel errors; test with errors.Is.
var (
	ErrNotFound         = errors.New("hub: not found")
	ErrGated            = errors.New("hub: access denied (gated or private repository)")
	ErrMismatch         = errors.New("hub: integrity mismatch")
	ErrRedirectRefused  = errors.New("hub: redirect refused")
	ErrInvalidPath      = errors.New("hub: invalid path")
	ErrInvalidRepo      = errors.New("hub: invalid repository name")
	ErrInvalidRevision  = errors.New("hub: invalid revision")
	ErrUnexpectedStatus = errors.New("hub: unexpected status")
)

const (
	defaultUserAgent = "aiforge-guardian-hub/1"
	maxRedirects     = 10
	maxPages         = 10000
	maxJSONBody      = 64 << 20
)

// Config configures a Client.
type Config struct {
	// BaseURL is the hub endpoint, e.g. https://huggingface.co.
	BaseURL string
	// Token authenticates against gated/private repositories. It is only
	// sent to BaseURL's host and is never logged or included in errors.
	Token string
	// AllowedRedirectHosts lists hosts a request may be redirected to
	// (e.g. "cdn-lfs.hf.co"). An entry without a port matches any port of
	// that host name; an entry with a port ("host:port") matches exactly.
	// BaseURL's host is always allowed.
	AllowedRedirectHosts []string
	// HTTPClient is copied; its Transport is used for the actual requests.
	// Its CheckRedirect is replaced.
	HTTPClient *http.Client
	// UserAgent is sent with every request.
	UserAgent string
	// Logger receives debug logs; nil disables logging.
	Logger *slog.Logger
}

// File is one file of a repository at a commit.
type File struct {
	Path string
	Size int64
	// SHA256 is the LFS oid (sha256, lowercase hex) for LFS files; empty
	// otherwise, in which case the digest is computed on download.
	SHA256 string
	LFS    bool
}

// Client talks to a Hugging Face Hub instance.
type Client struct {
	base      *url.URL
	ua        string
	hc        *http.Client
	allowed   []string
	log       *slog.Logger
	hasToken  bool
	tokenText string // used only for redaction
}

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("hub: invalid BaseURL: %v", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("hub: BaseURL must be an absolute http(s) URL without credentials, query or fragment")
	}
	if strings.ContainsAny(cfg.Token, "\r\n\x00") {
		return nil, errors.New("hub: token contains invalid characters")
	}
	c := &Client{
		base:      u,
		ua:        cfg.UserAgent,
		log:       cfg.Logger,
		hasToken:  cfg.Token != "",
		tokenText: cfg.Token,
	}
	if c.ua == "" {
		c.ua = defaultUserAgent
	}
	for _, h := range cfg.AllowedRedirectHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if h != "" {
			c.allowed = append(c.allowed, h)
		}
	}
	var hc http.Client
	if cfg.HTTPClient != nil {
		hc = *cfg.HTTPClient
	}
	inner := hc.Transport
	if inner == nil {
		inner = http.DefaultTransport
	}
	hc.Transport = &authTransport{inner: inner, scheme: u.Scheme, host: strings.ToLower(u.Host), token: cfg.Token}
	hc.CheckRedirect = c.checkRedirect
	c.hc = &hc
	return c, nil
}

// authTransport attaches the bearer token only to requests aimed at the
// base host (same scheme and host:port) and strips it everywhere else.
type authTransport struct {
	inner  http.RoundTripper
	scheme string
	host   string
	token  string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Del("Authorization")
	if t.token != "" && strings.EqualFold(r.URL.Scheme, t.scheme) && strings.ToLower(r.URL.Host) == t.host {
		r.Header.Set("Authorization", "Bearer "+t.token)
	}
	return t.inner.RoundTrip(r)
}

func (c *Client) hostAllowed(u *url.URL) bool {
	host := strings.ToLower(u.Host)
	if strings.EqualFold(u.Scheme, c.base.Scheme) && host == strings.ToLower(c.base.Host) {
		return true
	}
	// Never downgrade https to http for a foreign host.
	if c.base.Scheme == "https" && u.Scheme != "https" {
		return false
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return false
	}
	name := strings.ToLower(u.Hostname())
	for _, a := range c.allowed {
		if strings.Contains(a, ":") && !strings.HasSuffix(a, "]") {
			if a == host {
				return true
			}
		} else if strings.Trim(a, "[]") == name {
			return true
		}
	}
	return false
}

func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("%w: too many redirects", ErrRedirectRefused)
	}
	if !c.hostAllowed(req.URL) {
		c.debug("redirect refused", "host", req.URL.Host)
		return fmt.Errorf("%w: host %q is not in the allowed redirect hosts", ErrRedirectRefused, req.URL.Host)
	}
	return nil
}

func (c *Client) debug(msg string, args ...any) {
	if c.log == nil {
		return
	}
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = c.redact(s)
		}
	}
	c.log.Debug(c.redact(msg), args...)
}

// redact removes the token from s (defence in depth; nothing we format
// should contain it in the first place).
func (c *Client) redact(s string) string {
	if c.tokenText == "" {
		return s
	}
	return strings.ReplaceAll(s, c.tokenText, "[REDACTED]")
}

// safeURL renders u without query or fragment (signed CDN URLs carry
// credentials in the query string).
func safeURL(u *url.URL) string {
	v := *u
	v.RawQuery, v.Fragment, v.User = "", "", nil
	return v.String()
}

var (
	repoPartRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)
	commitRE   = regexp.MustCompile(`^[0-9a-f]{40}$`)
	sha256RE   = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidateRepo checks that repo is of the form "org/name".
func ValidateRepo(repo string) error {
	parts := strings.Split(repo, "/")
	if len(parts) != 2 {
		return fmt.Errorf("%w: %q must be org/name", ErrInvalidRepo, repo)
	}
	for _, p := range parts {
		if !repoPartRE.MatchString(p) || strings.Contains(p, "..") || strings.HasSuffix(p, ".") {
			return fmt.Errorf("%w: %q", ErrInvalidRepo, repo)
		}
	}
	return nil
}

// ValidatePath checks a repository-relative file path: non-empty, relative,
// slash-separated, without "." / ".." / empty segments, NUL, backslashes or
// control characters.
func ValidatePath(p string) error {
	if p == "" || len(p) > 4096 {
		return fmt.Errorf("%w: empty or too long", ErrInvalidPath)
	}
	if strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return fmt.Errorf("%w: %q is not a relative slash-separated path", ErrInvalidPath, p)
	}
	if len(p) >= 2 && p[1] == ':' {
		return fmt.Errorf("%w: %q looks like a drive path", ErrInvalidPath, p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %q contains control characters", ErrInvalidPath, p)
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q", ErrInvalidPath, p)
		}
	}
	return nil
}

func validateRevision(rev string) error {
	if rev == "" || len(rev) > 255 || strings.Contains(rev, "..") {
		return fmt.Errorf("%w: %q", ErrInvalidRevision, rev)
	}
	for _, r := range rev {
		if r <= 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("%w: %q", ErrInvalidRevision, rev)
		}
	}
	return nil
}

func validateCommit(commit string) error {
	if !commitRE.MatchString(commit) {
		return fmt.Errorf("%w: commit %q must be 40 lowercase hex characters", ErrInvalidRevision, commit)
	}
	return nil
}

func (c *Client) endpoint(rawPath string) *url.URL {
	u := *c.base
	u.RawPath = strings.TrimRight(c.base.EscapedPath(), "/") + rawPath
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		p = u.RawPath
	}
	u.Path = p
	return &u
}

func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

func (c *Client) get(ctx context.Context, u *url.URL, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("hub: building request: %w", err)
	}
	req.Header.Set("User-Agent", c.ua)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	c.debug("hub request", "url", safeURL(u))
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// url.Error embeds the full URL; rebuild without the query.
			if errors.Is(ue.Err, ErrRedirectRefused) {
				return nil, fmt.Errorf("hub: GET %s: %w", safeURL(u), ue.Err)
			}
			return nil, fmt.Errorf("hub: GET %s: %s", safeURL(u), c.redact(ue.Err.Error()))
		}
		return nil, errors.New(c.redact(err.Error()))
	}
	return resp, nil
}

// statusError maps a non-success response to an error. The response body
// is deliberately not included (servers may echo request headers).
func statusError(resp *http.Response, what string) error {
	code := resp.Header.Get("X-Error-Code")
	switch {
	case code == "GatedRepo":
		return fmt.Errorf("%w: %s (HTTP %d)", ErrGated, what, resp.StatusCode)
	case code == "RepoNotFound" || code == "RepositoryNotFound" || code == "RevisionNotFound" || code == "EntryNotFound":
		return fmt.Errorf("%w: %s (HTTP %d)", ErrNotFound, what, resp.StatusCode)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: %s (HTTP %d)", ErrGated, what, resp.StatusCode)
	}
	return fmt.Errorf("%w: %s: HTTP %d", ErrUnexpectedStatus, what, resp.StatusCode)
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}

// Resolve returns the commit sha that revision (default "main") of repo
// currently points to.
func (c *Client) Resolve(ctx context.Context, repo, revision string) (string, error) {
	if err := ValidateRepo(repo); err != nil {
		return "", err
	}
	if revision == "" {
		revision = "main"
	}
	if err := validateRevision(revision); err != nil {
		return "", err
	}
	u := c.endpoint("/api/models/" + repo + "/revision/" + url.PathEscape(revision))
	resp, err := c.get(ctx, u, "application/json")
	if err != nil {
		return "", err
	}
	defer drain(resp)
	what := fmt.Sprintf("resolve %s@%s", repo, revision)
	if resp.StatusCode != http.StatusOK {
		return "", statusError(resp, what)
	}
	var body struct {
		SHA string `json:"sha"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(&body); err != nil {
		return "", fmt.Errorf("hub: %s: decoding response: %v", what, err)
	}
	if err := validateCommit(body.SHA); err != nil {
		return "", fmt.Errorf("hub: %s: server returned invalid sha: %w", what, err)
	}
	return body.SHA, nil
}

type treeEntry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	OID  string `json:"oid"`
	LFS  *struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// ListFiles lists all files (recursively) of repo at commit, following
// Link: rel="next" pagination. Directories are skipped. Any unsafe path in
// the listing fails the whole call with ErrInvalidPath.
func (c *Client) ListFiles(ctx context.Context, repo, commit string) ([]File, error) {
	if err := ValidateRepo(repo); err != nil {
		return nil, err
	}
	if err := validateCommit(commit); err != nil {
		return nil, err
	}
	u := c.endpoint("/api/models/" + repo + "/tree/" + commit)
	u.RawQuery = "recursive=true"
	what := fmt.Sprintf("list %s@%s", repo, commit)
	var files []File
	seen := map[string]bool{}
	for page := 0; u != nil; page++ {
		if page >= maxPages {
			return nil, fmt.Errorf("hub: %s: too many pages", what)
		}
		next, entries, err := c.treePage(ctx, u, what)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.Type == "directory" {
				continue
			}
			if e.Type != "file" {
				continue
			}
			if err := ValidatePath(e.Path); err != nil {
				return nil, fmt.Errorf("hub: %s: server listed unsafe path: %w", what, err)
			}
			if seen[e.Path] {
				return nil, fmt.Errorf("hub: %s: duplicate path %q in listing", what, e.Path)
			}
			seen[e.Path] = true
			f := File{Path: e.Path, Size: e.Size}
			if e.LFS != nil {
				oid := strings.ToLower(strings.TrimPrefix(e.LFS.OID, "sha256:"))
				if !sha256RE.MatchString(oid) {
					return nil, fmt.Errorf("hub: %s: invalid LFS oid for %q", what, e.Path)
				}
				f.LFS, f.SHA256, f.Size = true, oid, e.LFS.Size
			}
			if f.Size < 0 {
				return nil, fmt.Errorf("hub: %s: negative size for %q", what, e.Path)
			}
			files = append(files, f)
		}
		u = next
	}
	return files, nil
}

func (c *Client) treePage(ctx context.Context, u *url.URL, what string) (*url.URL, []treeEntry, error) {
	resp, err := c.get(ctx, u, "application/json")
	if err != nil {
		return nil, nil, err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return nil, nil, statusError(resp, what)
	}
	var entries []treeEntry
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(&entries); err != nil {
		return nil, nil, fmt.Errorf("hub: %s: decoding tree: %v", what, err)
	}
	next, err := c.nextLink(resp)
	if err != nil {
		return nil, nil, fmt.Errorf("hub: %s: %w", what, err)
	}
	return next, entries, nil
}

// nextLink extracts the rel="next" target of the Link headers, resolved
// against the request URL. It must stay on the base host.
func (c *Client) nextLink(resp *http.Response) (*url.URL, error) {
	for _, h := range resp.Header.Values("Link") {
		for _, part := range strings.Split(h, ",") {
			part = strings.TrimSpace(part)
			if !strings.HasPrefix(part, "<") {
				continue
			}
			end := strings.Index(part, ">")
			if end < 0 {
				continue
			}
			target, params := part[1:end], part[end+1:]
			isNext := false
			for _, p := range strings.Split(params, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "rel") {
					for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(v), `"`)) {
						if strings.EqualFold(rel, "next") {
							isNext = true
						}
					}
				}
			}
			if !isNext {
				continue
			}
			ref, err := url.Parse(target)
			if err != nil {
				return nil, fmt.Errorf("invalid next link: %v", err)
			}
			n := resp.Request.URL.ResolveReference(ref)
			if !strings.EqualFold(n.Scheme, c.base.Scheme) || !strings.EqualFold(n.Host, c.base.Host) {
				return nil, fmt.Errorf("%w: pagination link to foreign host %q", ErrRedirectRefused, n.Host)
			}
			return n, nil
		}
	}
	return nil, nil
}

// headerChain returns the first non-empty value of key among the final
// response and the redirect responses that led to it (newest first).
func headerChain(resp *http.Response, key string) string {
	for r := resp; r != nil; {
		if v := r.Header.Get(key); v != "" {
			return v
		}
		if r.Request == nil {
			break
		}
		r = r.Request.Response
	}
	return ""
}

func normalizeETag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	return strings.ToLower(strings.Trim(s, `"`))
}

type progressWriter struct {
	w        io.Writer
	progress func(int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if n > 0 && p.progress != nil {
		p.progress(int64(n))
	}
	return n, err
}

// Download streams file f of repo at commit into w and returns the
// lowercase hex SHA-256 of the content. progress, if non-nil, is called
// with the number of bytes written by each write (the calls sum to the
// file size). On ErrMismatch (or any error) the caller must discard
// whatever was written to w.
func (c *Client) Download(ctx context.Context, repo, commit string, f File, w io.Writer, progress func(n int64)) (string, error) {
	if err := ValidateRepo(repo); err != nil {
		return "", err
	}
	if err := validateCommit(commit); err != nil {
		return "", err
	}
	if err := ValidatePath(f.Path); err != nil {
		return "", err
	}
	if f.Size < 0 {
		return "", fmt.Errorf("hub: download %s: negative size", f.Path)
	}
	want := strings.ToLower(f.SHA256)
	if want != "" && !sha256RE.MatchString(want) {
		return "", fmt.Errorf("hub: download %s: invalid expected sha256", f.Path)
	}
	what := fmt.Sprintf("download %s@%s/%s", repo, commit, f.Path)
	u := c.endpoint("/" + repo + "/resolve/" + commit + "/" + escapePath(f.Path))
	resp, err := c.get(ctx, u, "")
	if err != nil {
		return "", err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return "", statusError(resp, what)
	}
	if rc := headerChain(resp, "X-Repo-Commit"); rc != "" && !strings.EqualFold(rc, commit) {
		return "", fmt.Errorf("%w: %s: server served commit %q", ErrMismatch, what, rc)
	}
	if et := headerChain(resp, "X-Linked-Etag"); et != "" && want != "" {
		if normalizeETag(et) != want {
			return "", fmt.Errorf("%w: %s: X-Linked-Etag %q does not match expected sha256", ErrMismatch, what, normalizeETag(et))
		}
	}
	if ls := headerChain(resp, "X-Linked-Size"); ls != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(ls), 10, 64)
		if err != nil || n != f.Size {
			return "", fmt.Errorf("%w: %s: X-Linked-Size %q, expected %d", ErrMismatch, what, ls, f.Size)
		}
	}
	if resp.ContentLength >= 0 && resp.ContentLength != f.Size {
		return "", fmt.Errorf("%w: %s: Content-Length %d, expected %d", ErrMismatch, what, resp.ContentLength, f.Size)
	}
	h := sha256.New()
	dst := io.MultiWriter(h, &progressWriter{w: w, progress: progress})
	n, err := io.Copy(dst, io.LimitReader(resp.Body, f.Size+1))
	if err != nil {
		return "", fmt.Errorf("hub: %s: after %d bytes: %s", what, n, c.redact(err.Error()))
	}
	if n != f.Size {
		return "", fmt.Errorf("%w: %s: got %s bytes, expected %d", ErrMismatch, what, sizeDesc(n, f.Size), f.Size)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if want != "" && sum != want {
		return "", fmt.Errorf("%w: %s: sha256 %s, expected %s", ErrMismatch, what, sum, want)
	}
	c.debug("hub download complete", "path", f.Path, "bytes", n)
	return sum, nil
}

func sizeDesc(n, size int64) string {
	if n > size {
		return "more than " + strconv.FormatInt(size, 10)
	}
	return strconv.FormatInt(n, 10)
}
