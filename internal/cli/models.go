package cli

import (
	"bufio"
	"bytes"
	"context"
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
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
)

// The model commands' client side: resumable uploads of a directory into
// the catalog, hub pulls, and waiting for the guardian's verdict.

// UploadOptions configure UploadModel.
type UploadOptions struct {
	// Dir is the model directory: every regular file below it is sent,
	// except those in dot-directories (.git, .aiforge, ...).
	Dir       string
	Name      string
	Kind      string // model (default) or adapter
	BaseModel string
	// Manifest holds expected SHA-256 per relative path (see ParseManifest).
	Manifest map[string]string
	// StateDir keeps the id of an upload in progress so an interrupted
	// upload resumes. Default os.UserCacheDir()/aiforge/uploads.
	StateDir string
	// Parallel is how many parts are sent at once. Default 4.
	Parallel int
	// Progress, when set, counts the bytes.
	Progress func(total int64) *Progress
}

// UploadResult is a completed upload.
type UploadResult struct {
	UploadID string
	Name     string
	Version  catalog.Version
	// Skipped counts parts a resumed upload did not send again.
	Skipped int
	Sent    int
}

// LocalFile is a file of a model directory.
type LocalFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	abs  string
}

type uploadAnswer struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Version  int    `json:"version"`
	PartSize int64  `json:"part_size"`
	Files    []struct {
		Path     string `json:"path"`
		Size     int64  `json:"size"`
		Parts    int    `json:"parts"`
		Received []struct {
			Part   int    `json:"part"`
			Size   int64  `json:"size"`
			SHA256 string `json:"sha256"`
		} `json:"received"`
	} `json:"files"`
}

// ScanModelDir lists the regular files below dir, with "/"-separated
// relative paths, skipping dot-directories.
func ScanModelDir(dir string) ([]LocalFile, error) {
	var out []LocalFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, LocalFile{Path: filepath.ToSlash(rel), Size: info.Size(), abs: p})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", dir, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no files to upload", dir)
	}
	slices.SortFunc(out, func(a, b LocalFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// ParseManifest reads expected hashes: a JSON object {path: sha256} or
// sha256sum lines "<hex>  <path>" (a "*" before the path is allowed).
func ParseManifest(b []byte) (map[string]string, error) {
	out := map[string]string{}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		if err := json.Unmarshal(t, &out); err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		return out, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		sum, p, ok := strings.Cut(l, " ")
		p = strings.TrimPrefix(strings.TrimLeft(p, " "), "*")
		p = strings.TrimPrefix(p, "./")
		if !ok || len(sum) != 64 || p == "" {
			return nil, fmt.Errorf("manifest line %d: want \"<sha256>  <path>\"", line)
		}
		if _, err := hex.DecodeString(sum); err != nil {
			return nil, fmt.Errorf("manifest line %d: %q is not hex", line, sum)
		}
		out[p] = strings.ToLower(sum)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return out, nil
}

type uploadState struct {
	UploadID string `json:"upload_id"`
}

func (c *Client) statePath(o UploadOptions, absDir string) (string, error) {
	dir := o.StateDir
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory for the upload state: %w", err)
		}
		dir = filepath.Join(cache, "aiforge", "uploads")
	}
	h := sha256.Sum256([]byte(absDir + "\x00" + o.Name + "\x00" + strings.TrimRight(c.BaseURL, "/")))
	return filepath.Join(dir, hex.EncodeToString(h[:])+".json"), nil
}

// resume returns the open session named in the state file when it expects
// exactly these files.
func (c *Client) resume(ctx context.Context, state string, files []LocalFile) (*uploadAnswer, error) {
	b, err := os.ReadFile(state)
	if err != nil {
		return nil, nil // no state: a fresh upload
	}
	var st uploadState
	if json.Unmarshal(b, &st) != nil || st.UploadID == "" {
		return nil, nil
	}
	var a uploadAnswer
	if err := c.Do(ctx, "GET", "/admin/v1/uploads/"+url.PathEscape(st.UploadID), nil, &a); err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			return nil, nil
		}
		return nil, err
	}
	if a.State != "open" {
		return nil, nil
	}
	same := len(a.Files) == len(files)
	for i := 0; same && i < len(files); i++ {
		same = a.Files[i].Path == files[i].Path && a.Files[i].Size == files[i].Size
	}
	if !same {
		// The directory changed since: drop the old session.
		_ = c.Do(ctx, "DELETE", "/admin/v1/uploads/"+url.PathEscape(a.ID), nil, nil)
		return nil, nil
	}
	return &a, nil
}

// UploadModel uploads the files of o.Dir as a new version of o.Name and
// completes it, resuming an interrupted upload of the same directory.
func (c *Client) UploadModel(ctx context.Context, o UploadOptions) (UploadResult, error) {
	absDir, err := filepath.Abs(o.Dir)
	if err != nil {
		return UploadResult{}, err
	}
	files, err := ScanModelDir(absDir)
	if err != nil {
		return UploadResult{}, err
	}
	state, err := c.statePath(o, absDir)
	if err != nil {
		return UploadResult{}, err
	}
	sess, err := c.resume(ctx, state, files)
	if err != nil {
		return UploadResult{}, err
	}
	if sess == nil {
		in := map[string]any{"name": o.Name, "files": files}
		if o.Kind != "" {
			in["kind"] = o.Kind
		}
		if o.BaseModel != "" {
			in["base_model"] = o.BaseModel
		}
		if len(o.Manifest) > 0 {
			in["manifest"] = o.Manifest
		}
		sess = &uploadAnswer{}
		if err := c.Do(ctx, "POST", "/admin/v1/uploads", in, sess); err != nil {
			return UploadResult{}, err
		}
		b, _ := json.Marshal(uploadState{UploadID: sess.ID})
		if err := os.MkdirAll(filepath.Dir(state), 0o700); err == nil {
			_ = os.WriteFile(state, b, 0o600)
		}
	}
	res := UploadResult{UploadID: sess.ID, Name: o.Name}
	var total int64
	for _, f := range files {
		total += f.Size
	}
	var bar *Progress
	if o.Progress != nil {
		bar = o.Progress(total)
	}
	type job struct {
		f        LocalFile
		n        int
		off, len int64
		have     string // sha256 of the part the server holds, if any
	}
	var jobs []job
	byPath := make(map[string]int, len(sess.Files))
	for i, f := range sess.Files {
		byPath[f.Path] = i
	}
	for _, f := range files {
		i, ok := byPath[f.Path]
		if !ok {
			return res, fmt.Errorf("upload %s does not expect %s", sess.ID, f.Path)
		}
		have := map[int]string{}
		for _, r := range sess.Files[i].Received {
			have[r.Part] = fmt.Sprintf("%d:%s", r.Size, r.SHA256)
		}
		for n := 1; n <= sess.Files[i].Parts; n++ {
			off := int64(n-1) * sess.PartSize
			jobs = append(jobs, job{f: f, n: n, off: off, len: min(sess.PartSize, f.Size-off), have: have[n]})
		}
	}
	par := max(1, o.Parallel)
	if o.Parallel == 0 {
		par = 4
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	work := make(chan job)
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			for j := range work {
				skipped, err := c.sendPart(ctx, sess.ID, j.f, j.n, j.off, j.len, j.have, bar)
				if err != nil {
					cancel(err)
					continue
				}
				mu.Lock()
				if skipped {
					res.Skipped++
				} else {
					res.Sent++
				}
				mu.Unlock()
			}
		})
	}
feed:
	for _, j := range jobs {
		select {
		case work <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	bar.Finish()
	// Assembling large files takes a while: no client timeout here.
	long := *c
	if long.HTTP == nil {
		long.HTTP = &http.Client{}
	}
	if err := long.Do(ctx, "POST", "/admin/v1/uploads/"+url.PathEscape(sess.ID)+"/complete", nil, &res.Version); err != nil {
		return res, err
	}
	_ = os.Remove(state)
	return res, nil
}

// hashSection returns the sha256 of a part of a file.
func hashSection(path string, off, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, off, n)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// countingBody counts what the transport reads into the progress bar.
type countingBody struct {
	r   io.Reader
	bar *Progress
	n   int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.bar.Add(int64(n))
	return n, err
}

// sendPart sends part n of f unless the server holds it already; it
// retries transient failures.
func (c *Client) sendPart(ctx context.Context, id string, f LocalFile, n int, off, size int64, have string, bar *Progress) (bool, error) {
	sum, err := hashSection(f.abs, off, size)
	if err != nil {
		return false, err
	}
	if have == fmt.Sprintf("%d:%s", size, sum) {
		bar.Skip(size)
		return true, nil
	}
	path := fmt.Sprintf("/admin/v1/uploads/%s/parts/%d/%s", url.PathEscape(id), n, escapePath(f.Path))
	var last error
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return false, context.Cause(ctx)
			case <-time.After(time.Duration(attempt*attempt) * 500 * time.Millisecond):
			}
		}
		retry, err := c.putPart(ctx, path, f.abs, off, size, sum, bar)
		if err == nil {
			return false, nil
		}
		if !retry {
			return false, fmt.Errorf("%s part %d: %w", f.Path, n, err)
		}
		last = err
	}
	return false, fmt.Errorf("%s part %d: %w", f.Path, n, last)
}

func (c *Client) putPart(ctx context.Context, path, abs string, off, size int64, sum string, bar *Progress) (retry bool, err error) {
	fh, err := os.Open(abs)
	if err != nil {
		return false, err
	}
	defer fh.Close()
	body := &countingBody{r: io.NewSectionReader(fh, off, size), bar: bar}
	defer func() {
		if err != nil {
			bar.Undo(body.n)
		}
	}()
	req, err := http.NewRequestWithContext(ctx, "PUT", strings.TrimRight(c.BaseURL, "/")+path, body)
	if err != nil {
		return false, err
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Aiforge-Part-Sha256", sum)
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("cannot reach aiforge at %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 300 {
		return false, nil
	}
	ae := parseAPIError(resp.StatusCode, data)
	return resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests, ae
}

func parseAPIError(status int, data []byte) *APIError {
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Code    *string `json:"code"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	ae := &APIError{Status: status}
	if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
		ae.Message = e.Error.Message
		if e.Error.Code != nil {
			ae.Code = *e.Error.Code
		}
		if e.Error.Param != nil {
			ae.Param = *e.Error.Param
		}
	} else {
		ae.Message = strings.TrimSpace(string(data))
	}
	return ae
}

// escapePath escapes each segment of a "/"-separated path.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// CatalogPath is the API path of a catalog entry.
func CatalogPath(name string) string { return "/admin/v1/catalog/" + escapePath(name) }

// WaitVersion polls the catalog until version of name is published or
// rejected (or ctx ends). pick, when version is 0, chooses the version to
// wait for from the entry (nil while it does not exist yet). each, when
// set, sees every poll's version.
func (c *Client) WaitVersion(ctx context.Context, name string, version int, every time.Duration,
	pick func(catalog.Entry) *catalog.Version, each func(catalog.Version)) (catalog.Version, error) {
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	for {
		var e catalog.Entry
		err := c.Do(ctx, "GET", CatalogPath(name), nil, &e)
		var ae *APIError
		if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusNotFound) {
			return catalog.Version{}, err
		}
		var v *catalog.Version
		if err == nil {
			if version > 0 {
				v, _ = e.Find(version)
			} else if pick != nil {
				v = pick(e)
			}
		}
		if v != nil {
			if each != nil {
				each(*v)
			}
			if v.Status == catalog.StatusPublished || v.Status == catalog.StatusRejected {
				return *v, nil
			}
		}
		select {
		case <-ctx.Done():
			return catalog.Version{}, fmt.Errorf("waiting for the verdict on %s: %w", name, context.Cause(ctx))
		case <-time.After(every):
		}
	}
}

// WaitPull polls a hub pull's record until it names its catalog version (the
// one it created, or the one already mirrored from the same commit) or
// fails before creating one.
func (c *Client) WaitPull(ctx context.Context, id string, every time.Duration) (catalog.Pull, error) {
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	for {
		var p catalog.Pull
		if err := c.Do(ctx, "GET", "/admin/v1/pulls/"+url.PathEscape(id), nil, &p); err != nil {
			return p, err
		}
		if p.Version > 0 || p.Status == catalog.PullFailed {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("waiting for pull %s: %w", id, context.Cause(ctx))
		case <-time.After(every):
		}
	}
}

// PrintVerdict writes a version's outcome for people.
func PrintVerdict(w io.Writer, name string, v catalog.Version) {
	fmt.Fprintf(w, "%s version %d: %s\n", name, v.Version, v.Status)
	if v.Format != "" {
		fmt.Fprintf(w, "  format:     %s\n", v.Format)
	}
	if v.Parameters > 0 {
		fmt.Fprintf(w, "  parameters: %s (%d)\n", HumanCount(v.Parameters), v.Parameters)
	}
	if len(v.DTypes) > 0 {
		dts := make([]string, 0, len(v.DTypes))
		for dt, n := range v.DTypes {
			dts = append(dts, dt+" "+HumanCount(n))
		}
		sort.Strings(dts)
		fmt.Fprintf(w, "  dtypes:     %s\n", strings.Join(dts, ", "))
	}
	if v.License != "" {
		lic := v.License
		if v.LicenseName != "" || v.LicenseLink != "" {
			lic += " (" + strings.TrimSpace(v.LicenseName+" "+v.LicenseLink) + ")"
		}
		fmt.Fprintf(w, "  license:    %s\n", lic)
	}
	if v.ChatTemplate != "" {
		more := ""
		if v.ChatTemplateTruncated {
			more = ", cut at the scanner's bound"
		}
		fmt.Fprintf(w, "  template:   chat template of %s kept as text (never rendered%s)\n", HumanBytes(int64(len(v.ChatTemplate))), more)
	}
	var size int64
	for _, f := range v.Files {
		size += f.Size
	}
	fmt.Fprintf(w, "  files:      %d (%s)\n", len(v.Files), HumanBytes(size))
	for _, r := range v.Reasons {
		where := ""
		if r.File != "" {
			where = " [" + r.File + "]"
		}
		fmt.Fprintf(w, "  reason:     %s%s: %s\n", r.Code, where, r.Message)
	}
}

// HumanCount formats a parameter count (1.2B, 350M).
func HumanCount(n int64) string {
	switch {
	case n >= 1e12:
		return strconv.FormatFloat(float64(n)/1e12, 'f', 1, 64) + "T"
	case n >= 1e9:
		return strconv.FormatFloat(float64(n)/1e9, 'f', 1, 64) + "B"
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	case n >= 1e3:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "K"
	}
	return strconv.FormatInt(n, 10)
}
