package cli

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
)

// Fetching a published version's weights out of the catalog, for an engine
// to load. Every file is streamed into a temporary file next to its place
// while hashed, checked against the catalog's size and SHA-256, synced and
// renamed into place: a file that does not match is never left behind.

// VersionFile is the file FetchModel writes into the directory last,
// describing what the directory holds. An interrupted fetch leaves none.
const VersionFile = ".aiforge-version.json"

// FetchOptions configure FetchModel.
type FetchOptions struct {
	// Name is the catalog name. With Deployment it may be empty (or must
	// name the deployment's catalog entry).
	Name string
	// Version is the catalog version; 0 is the latest published one.
	Version int
	// Deployment is a served model name: fetch the catalog version it runs.
	Deployment string
	// Dir receives the files; it is created when missing.
	Dir string
	// Progress, when set, counts the bytes.
	Progress func(total int64) *Progress
}

// FetchResult is a completed fetch.
type FetchResult struct {
	Name    string
	Version catalog.Version
	// Fetched counts files downloaded, Present files already there with
	// the right size and SHA-256.
	Fetched, Present int
	// Bytes is the size of all the version's files, FetchedBytes what was
	// downloaded.
	Bytes, FetchedBytes int64
}

// FetchedVersion is the content of VersionFile.
type FetchedVersion struct {
	Name       string         `json:"name"`
	Version    int            `json:"version"`
	Deployment string         `json:"deployment,omitempty"`
	Source     catalog.Source `json:"source"`
	License    string         `json:"license,omitempty"`
	Format     string         `json:"format,omitempty"`
	Files      []catalog.File `json:"files"`
	FetchedAt  time.Time      `json:"fetched_at"`
}

// resolveFetch finds the catalog name and version to fetch.
func (c *Client) resolveFetch(ctx context.Context, o FetchOptions) (string, catalog.Version, error) {
	name, version := o.Name, o.Version
	if o.Deployment != "" {
		if o.Version != 0 {
			return "", catalog.Version{}, errors.New("give either a version or a deployment, not both")
		}
		var d catalog.Deployment
		if err := c.Do(ctx, "GET", "/admin/v1/deployments/"+escapePath(o.Deployment), nil, &d); err != nil {
			return "", catalog.Version{}, err
		}
		if name != "" && name != d.Catalog {
			return "", catalog.Version{}, fmt.Errorf("deployment %s runs %s version %d, not %s", o.Deployment, d.Catalog, d.Version, name)
		}
		name, version = d.Catalog, d.Version
	}
	if name == "" {
		return "", catalog.Version{}, errors.New("name the catalog model (or a deployment) to fetch")
	}
	if version < 0 {
		return "", catalog.Version{}, fmt.Errorf("version %d is not a version number", version)
	}
	var e catalog.Entry
	if err := c.Do(ctx, "GET", CatalogPath(name), nil, &e); err != nil {
		return "", catalog.Version{}, err
	}
	var v *catalog.Version
	if version == 0 {
		var ok bool
		if v, ok = e.LatestPublished(); !ok {
			return "", catalog.Version{}, fmt.Errorf("%s has no published version", name)
		}
	} else {
		var ok bool
		if v, ok = e.Find(version); !ok {
			return "", catalog.Version{}, fmt.Errorf("%s has no version %d", name, version)
		}
	}
	if v.Status != catalog.StatusPublished {
		return "", catalog.Version{}, fmt.Errorf("%s version %d is %s; only a published version can be fetched", name, v.Version, v.Status)
	}
	return name, *v, nil
}

// checkFetchPaths refuses a version whose files would land outside the
// directory, twice in one place, or on the version file.
func checkFetchPaths(files []catalog.File) error {
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		local := filepath.FromSlash(f.Path)
		switch {
		case !filepath.IsLocal(local) || path.Clean(f.Path) != f.Path || strings.ContainsRune(f.Path, '\\'):
			return fmt.Errorf("file path %q would leave the directory", f.Path)
		case f.Path == VersionFile:
			return fmt.Errorf("file path %q is reserved for the fetch record", f.Path)
		case seen[f.Path]:
			return fmt.Errorf("file path %q is listed twice", f.Path)
		case f.Size < 0:
			return fmt.Errorf("file %q has a negative size", f.Path)
		}
		seen[f.Path] = true
	}
	return nil
}

// FetchModel downloads a published version's files into o.Dir, verified
// against the catalog, skipping files already there with the right size
// and SHA-256, and writes VersionFile last.
func (c *Client) FetchModel(ctx context.Context, o FetchOptions) (FetchResult, error) {
	name, v, err := c.resolveFetch(ctx, o)
	if err != nil {
		return FetchResult{}, err
	}
	res := FetchResult{Name: name, Version: v}
	if err := checkFetchPaths(v.Files); err != nil {
		return res, fmt.Errorf("%s version %d: %w", name, v.Version, err)
	}
	if o.Dir == "" {
		return res, errors.New("no directory to fetch into")
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return res, err
	}
	root, err := os.OpenRoot(o.Dir)
	if err != nil {
		return res, err
	}
	defer root.Close()
	// Until every file is in place the directory holds no record.
	if err := root.Remove(VersionFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, err
	}
	for _, f := range v.Files {
		res.Bytes += f.Size
	}
	var bar *Progress
	if o.Progress != nil {
		bar = o.Progress(res.Bytes)
	}
	for _, f := range v.Files {
		local := filepath.FromSlash(f.Path)
		if ok, err := hasFile(root, local, f); err != nil {
			return res, fmt.Errorf("check %s: %w", f.Path, err)
		} else if ok {
			bar.Skip(f.Size)
			res.Present++
			continue
		}
		if err := c.fetchFile(ctx, root, name, v.Version, f, bar); err != nil {
			return res, fmt.Errorf("fetch %s: %w", f.Path, err)
		}
		res.Fetched++
		res.FetchedBytes += f.Size
	}
	bar.Finish()
	rec := FetchedVersion{Name: name, Version: v.Version, Deployment: o.Deployment, Source: v.Source, License: v.License,
		Format: v.Format, Files: v.Files, FetchedAt: time.Now().UTC()}
	if rec.Files == nil {
		rec.Files = []catalog.File{}
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return res, err
	}
	if err := writeAtomic(root, VersionFile, append(b, '\n')); err != nil {
		return res, fmt.Errorf("write %s: %w", VersionFile, err)
	}
	return res, nil
}

// hasFile reports whether name holds exactly f.
func hasFile(root *os.Root, name string, f catalog.File) (bool, error) {
	fi, err := root.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != f.Size {
		return false, nil
	}
	fh, err := root.Open(name)
	if err != nil {
		return false, err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return false, err
	}
	return hex.EncodeToString(h.Sum(nil)) == f.SHA256, nil
}

// tempName is a fresh temporary name next to name.
func tempName(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return filepath.Join(filepath.Dir(name), ".aiforge-fetch-"+hex.EncodeToString(b[:])+"-"+filepath.Base(name)+".tmp")
}

// fetchFile streams one file into a temporary file while hashing it, checks
// it and renames it into place.
func (c *Client) fetchFile(ctx context.Context, root *os.Root, name string, version int, f catalog.File, bar *Progress) (err error) {
	q := url.Values{"name": {name}, "version": {strconv.Itoa(version)}, "path": {f.Path}}
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(c.BaseURL, "/")+"/admin/v1/model-files?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil || hc.Timeout > 0 {
		// Weights take a while: no whole-request timeout.
		hc = &http.Client{Transport: transportOf(hc)}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach aiforge at %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return parseAPIError(resp.StatusCode, data)
	}
	if got := resp.Header.Get("X-Aiforge-Sha256"); got != "" && got != f.SHA256 {
		return fmt.Errorf("the server sends SHA-256 %s, the catalog lists %s; refused", got, f.SHA256)
	}
	local := filepath.FromSlash(f.Path)
	if dir := filepath.Dir(local); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	tmp := tempName(local)
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	body := &countingBody{r: io.LimitReader(resp.Body, f.Size+1), bar: bar}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = root.Remove(tmp)
			bar.Undo(body.n)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), body)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if n != f.Size {
		return fmt.Errorf("received %d bytes, the catalog lists %d; refused", n, f.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return fmt.Errorf("received bytes with SHA-256 %s, the catalog lists %s; refused", got, f.SHA256)
	}
	if err = out.Sync(); err != nil {
		return err
	}
	if err = out.Close(); err != nil {
		return err
	}
	if err = root.Rename(tmp, local); err != nil {
		return err
	}
	syncDir(root, filepath.Dir(local))
	return nil
}

// transportOf keeps a configured client's transport.
func transportOf(hc *http.Client) http.RoundTripper {
	if hc == nil {
		return nil
	}
	return hc.Transport
}

// writeAtomic writes name through a synced temporary file and a rename.
func writeAtomic(root *os.Root, name string, data []byte) (err error) {
	tmp := tempName(name)
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = root.Remove(tmp)
		}
	}()
	if _, err = out.Write(data); err != nil {
		return err
	}
	if err = out.Sync(); err != nil {
		return err
	}
	if err = out.Close(); err != nil {
		return err
	}
	if err = root.Rename(tmp, name); err != nil {
		return err
	}
	syncDir(root, filepath.Dir(name))
	return nil
}

// syncDir makes a rename in dir durable (best effort).
func syncDir(root *os.Root, dir string) {
	if d, err := root.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
