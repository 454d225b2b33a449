package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/files"
)

// The batch commands' client side: upload an input file, create, read,
// list, cancel and wait for batches, download their results, and show the
// scheduler's queues.

// UploadFile sends the file at path to the Files API with purpose,
// streaming it (a batch file may be 200 MB); progress, when set, counts
// its bytes.
func (c *Client) UploadFile(ctx context.Context, path, purpose string, progress *Progress) (files.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return files.File{}, err
	}
	defer f.Close()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := mw.WriteField("purpose", purpose)
		if err == nil {
			var part io.Writer
			if part, err = mw.CreateFormFile("file", filepath.Base(path)); err == nil {
				_, err = io.Copy(part, &countReader{r: f, p: progress})
			}
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(c.BaseURL, "/")+"/v1/files", pr)
	if err != nil {
		return files.File{}, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return files.File{}, fmt.Errorf("cannot reach aiforge at %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return files.File{}, err
	}
	if resp.StatusCode >= 300 {
		return files.File{}, parseAPIError(resp.StatusCode, data)
	}
	var out files.File
	if err := json.Unmarshal(data, &out); err != nil {
		return files.File{}, fmt.Errorf("decode answer: %w", err)
	}
	progress.Finish()
	return out, nil
}

type countReader struct {
	r io.Reader
	p *Progress
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.Add(int64(n))
	return n, err
}

// BatchCreate is the body of a create.
type BatchCreate struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata,omitempty"`
}

// CreateBatch creates a batch; idempotencyKey, when set, makes a retry of
// the same create answer the same batch.
func (c *Client) CreateBatch(ctx context.Context, in BatchCreate, idempotencyKey string) (batch.Batch, error) {
	if in.CompletionWindow == "" {
		in.CompletionWindow = batch.CompletionWindow
	}
	var hdr http.Header
	if idempotencyKey != "" {
		hdr = http.Header{}
		hdr.Set("Idempotency-Key", idempotencyKey)
	}
	var b batch.Batch
	err := c.DoHeader(ctx, "POST", "/v1/batches", hdr, in, &b)
	return b, err
}

// GetBatch reads a batch.
func (c *Client) GetBatch(ctx context.Context, id string) (batch.Batch, error) {
	var b batch.Batch
	err := c.Do(ctx, "GET", "/v1/batches/"+url.PathEscape(id), nil, &b)
	return b, err
}

// CancelBatch asks for a batch to be cancelled.
func (c *Client) CancelBatch(ctx context.Context, id string) (batch.Batch, error) {
	var b batch.Batch
	err := c.Do(ctx, "POST", "/v1/batches/"+url.PathEscape(id)+"/cancel", nil, &b)
	return b, err
}

// BatchPage is one page of batches, newest first.
type BatchPage struct {
	Data    []batch.Batch `json:"data"`
	HasMore bool          `json:"has_more"`
	LastID  *string       `json:"last_id"`
}

// ListBatches reads a page of batches after the batch after (none: the
// newest).
func (c *Client) ListBatches(ctx context.Context, after string, limit int) (BatchPage, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/batches"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var p BatchPage
	err := c.Do(ctx, "GET", path, nil, &p)
	return p, err
}

// WaitBatch polls a batch every interval until its status is final,
// calling update (when set) with each state read. It returns the final
// state, or the last one read and the context's error.
func (c *Client) WaitBatch(ctx context.Context, id string, every time.Duration, update func(batch.Batch)) (batch.Batch, error) {
	if every <= 0 {
		every = 2 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last batch.Batch
	for {
		b, err := c.GetBatch(ctx, id)
		var ae *APIError
		switch {
		case err == nil:
			last = b
			if update != nil {
				update(b)
			}
			if batch.Final(b.Status) {
				return b, nil
			}
		case errors.As(err, &ae) && ae.Status < 500:
			return last, err
		case ctx.Err() != nil:
			return last, ctx.Err()
		}
		// A server error or a refused connection (an edge restarting) is
		// waited out.
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-t.C:
		}
	}
}

// BatchResult is a downloaded output or error file.
type BatchResult struct {
	Kind   string // "output" or "errors"
	FileID string
	Path   string
	Bytes  int64
}

// DownloadBatchResults writes a batch's output and error files (those it
// has) into dir as <batch>_output.jsonl and <batch>_errors.jsonl.
func (c *Client) DownloadBatchResults(ctx context.Context, b batch.Batch, dir string) ([]BatchResult, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []BatchResult
	for _, f := range []struct {
		kind string
		id   *string
	}{{"output", b.OutputFileID}, {"errors", b.ErrorFileID}} {
		if f.id == nil || *f.id == "" {
			continue
		}
		path := filepath.Join(dir, b.ID+"_"+f.kind+".jsonl")
		n, err := c.downloadTo(ctx, "/v1/files/"+url.PathEscape(*f.id)+"/content", path)
		if err != nil {
			return out, fmt.Errorf("%s file %s: %w", f.kind, *f.id, err)
		}
		out = append(out, BatchResult{Kind: f.kind, FileID: *f.id, Path: path, Bytes: n})
	}
	return out, nil
}

// downloadTo streams an answer into path, through a temporary file so that
// a cut download leaves no partial file under the final name.
func (c *Client) downloadTo(ctx context.Context, apiPath, path string) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".download-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	cw := &countWriter{w: tmp}
	err = c.Stream(ctx, "GET", apiPath, cw)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return cw.n, os.Rename(tmp.Name(), path)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// BatchProgress draws a batch's progress on one line: lines done (completed
// and failed) of the total, the rate in lines per second and the ETA, and
// the status. On a terminal it redraws the line; elsewhere it prints a
// plain line when the status changes and at most every PlainEvery. A nil
// *BatchProgress does nothing.
type BatchProgress struct {
	w          io.Writer
	tty        bool
	PlainEvery time.Duration
	now        func() time.Time

	mu       sync.Mutex
	last     batch.Batch
	drawn    bool
	lastDraw time.Time
	// first is when lines were first seen moving, and how many were done
	// then: the rate is the mean since.
	first     time.Time
	firstDone int64
	ended     bool
}

// NewBatchProgress starts a batch progress line on w; now is the clock
// (nil: time.Now).
func NewBatchProgress(w io.Writer, tty bool, now func() time.Time) *BatchProgress {
	if now == nil {
		now = time.Now
	}
	return &BatchProgress{w: w, tty: tty, PlainEvery: 10 * time.Second, now: now}
}

// Update shows b.
func (p *BatchProgress) Update(b batch.Batch) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.now()
	done := b.RequestCounts.Completed + b.RequestCounts.Failed
	if p.first.IsZero() && b.RequestCounts.Total > 0 && (b.Status == batch.StatusInProgress || done > 0) {
		p.first, p.firstDone = t, done
	}
	changed := !p.drawn || b.Status != p.last.Status
	p.last = b
	if p.tty || changed || t.Sub(p.lastDraw) >= p.PlainEvery || batch.Final(b.Status) {
		p.draw(t)
	}
}

// Finish ends the progress line.
func (p *BatchProgress) Finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.ended = true
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}

// Line is the progress text of the last state shown (without the bar).
func (p *BatchProgress) Line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats(p.now())
}

func (p *BatchProgress) stats(t time.Time) string {
	b := p.last
	rc := b.RequestCounts
	done := rc.Completed + rc.Failed
	s := fmt.Sprintf("%d/%d lines", done, rc.Total)
	if rc.Failed > 0 {
		s += fmt.Sprintf(" (%d failed)", rc.Failed)
	}
	rate, eta := "-- lines/s", "ETA --:--"
	if el := t.Sub(p.first); !p.first.IsZero() && el > 0 && done > p.firstDone {
		r := float64(done-p.firstDone) / el.Seconds()
		rate = fmt.Sprintf("%.1f lines/s", r)
		if left := rc.Total - done; left > 0 {
			eta = "ETA " + fmtDuration(time.Duration(float64(left)/r*float64(time.Second)))
		}
	}
	if batch.Final(b.Status) || (rc.Total > 0 && done >= rc.Total) {
		eta = "ETA 0:00"
	}
	return fmt.Sprintf("%s  %s  %s  %s", s, rate, eta, b.Status)
}

func (p *BatchProgress) draw(t time.Time) {
	p.drawn, p.lastDraw = true, t
	rc := p.last.RequestCounts
	pct := percent(rc.Completed+rc.Failed, rc.Total)
	if rc.Total == 0 {
		pct = 0
	}
	stats := p.stats(t)
	if !p.tty {
		fmt.Fprintf(p.w, "%s: %s (%d%%)\n", p.last.ID, stats, pct)
		return
	}
	const width = 30
	filled := width * pct / 100
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	fmt.Fprintf(p.w, "\r\033[K%s [%s] %3d%%  %s", p.last.ID, bar, pct, stats)
}

// QueuesTables prints the scheduler's state: one row per tenant queue
// (pool, tenant, weight, share, lines admitted, borrowed, waiting, held)
// and one per pool flavor (nominal quota, in use, borrowed, lent).
func QueuesTables(w io.Writer, r batch.QueuesReply) {
	rows := [][]string{}
	for _, q := range r.Queues {
		held := "-"
		if q.Held {
			held = "held"
		}
		rows = append(rows, []string{q.Pool, q.Tenant, strconv.FormatFloat(q.Weight, 'f', -1, 64), strconv.FormatFloat(q.Share, 'f', 3, 64),
			strconv.FormatInt(q.Admitted, 10), strconv.FormatInt(q.Borrowed, 10), strconv.FormatInt(q.Waiting, 10), held})
	}
	Table(w, []string{"POOL", "TENANT", "WEIGHT", "SHARE", "ADMITTED", "BORROWED", "WAITING", "HELD"}, rows)
	fmt.Fprintln(w)
	rows = [][]string{}
	for _, p := range r.Pools {
		name := p.Name
		if p.Implicit {
			name += " (implicit)"
		}
		cohort := p.Cohort
		if cohort == "" {
			cohort = "-"
		}
		for _, f := range p.Flavors {
			tps := "-"
			if f.TokensPerSecond > 0 {
				tps = fmt.Sprintf("%.0f/%d", f.TokensRate, f.TokensPerSecond)
			}
			rows = append(rows, []string{name, cohort, f.Flavor, strconv.FormatInt(f.Nominal, 10), strconv.FormatInt(f.InUse, 10),
				strconv.FormatInt(f.Borrowed, 10), strconv.FormatInt(f.Lent, 10), tps})
		}
		if len(p.Flavors) == 0 {
			rows = append(rows, []string{name, cohort, "-", "-", "-", "-", "-", "-"})
		}
	}
	Table(w, []string{"POOL", "COHORT", "FLAVOR", "NOMINAL", "IN USE", "BORROWED", "LENT", "TOKENS/S"}, rows)
}

// ParseQuota reads a --quota value: FLAVOR=LINES[:TOKENS_PER_SECOND]
// [,borrow=N][,lend=N].
func ParseQuota(spec string) (batch.Quota, error) {
	parts := strings.Split(spec, ",")
	flavor, amount, ok := strings.Cut(parts[0], "=")
	if !ok || flavor == "" || amount == "" {
		return batch.Quota{}, fmt.Errorf("--quota %q: expected FLAVOR=LINES[:TOKENS_PER_SECOND][,borrow=N][,lend=N]", spec)
	}
	q := batch.Quota{Flavor: flavor}
	lines, tps, hasTPS := strings.Cut(amount, ":")
	var err error
	if q.Lines, err = strconv.ParseInt(lines, 10, 64); err != nil || q.Lines < 0 {
		return batch.Quota{}, fmt.Errorf("--quota %q: lines %q is not a whole number", spec, lines)
	}
	if hasTPS {
		if q.TokensPerSecond, err = strconv.ParseInt(tps, 10, 64); err != nil || q.TokensPerSecond < 0 {
			return batch.Quota{}, fmt.Errorf("--quota %q: tokens per second %q is not a whole number", spec, tps)
		}
	}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 0 {
			return batch.Quota{}, fmt.Errorf("--quota %q: %q is not borrow=N or lend=N", spec, kv)
		}
		switch k {
		case "borrow":
			q.BorrowingLimit = &n
		case "lend":
			q.LendingLimit = &n
		default:
			return batch.Quota{}, fmt.Errorf("--quota %q: unknown %q (borrow, lend)", spec, k)
		}
	}
	return q, nil
}
