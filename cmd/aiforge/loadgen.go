package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

// loadgenCmd drives a bounded chat and ingest load through one or more
// edges and writes what became of every request, for deploy/chaos.sh: the
// requests accepted (2xx) and completed, the ones that failed and how,
// and every document's final status in its vector store.
func loadgenCmd() *cobra.Command {
	var o loadOptions
	var out string
	c := &cobra.Command{
		Use:   "loadgen",
		Short: "A bounded chat and document load through the edges, with a JSON summary of every outcome (deploy/chaos.sh)",
		Long: `Sends chat completions (every --stream-every-th one streamed) at --rate per second, at most --concurrency
at a time, alternating the --url edges, and uploads one document every --doc-every into a vector store (created
when --vector-store is empty), until --requests are sent or it is interrupted (SIGINT, SIGTERM): then it lets
the requests in flight finish, waits up to --doc-wait for every accepted document to leave in_progress, and
writes the summary (JSON) to --out and a line to stderr.

Like a load balancer, a request whose connection could not be opened (the edge is down or restarting: nothing
was sent) is retried on the next edge, up to --retries times; a request that was sent is never retried, so
a connection lost mid-request is a failure ("conn-lost"), as is any non-2xx answer (by status code). A 2xx
chat answer is "accepted"; it is "completed" when its body is whole (a chat.completion, or a stream ending in
data: [DONE]) — accepted but not completed is reported as "broken". A document is accepted when both its
upload and its addition to the vector store answered 2xx.

The API key comes from AIFORGE_API_KEY.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.APIKey = os.Getenv("AIFORGE_API_KEY")
			if o.APIKey == "" {
				return errors.New("loadgen: AIFORGE_API_KEY is not set")
			}
			sum, err := runLoad(cmd.Context(), o)
			if err != nil {
				return err
			}
			b, err := json.MarshalIndent(sum, "", "  ")
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			} else {
				err = os.WriteFile(out, append(b, '\n'), 0o644)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "loadgen: chat sent %d accepted %d completed %d failed %d (retried on another edge %d); docs accepted %d completed %d\n",
				sum.Chat.Sent, sum.Chat.Accepted, sum.Chat.Completed, sum.Chat.Failed, sum.Chat.Retried, sum.Docs.Accepted, sum.Docs.Completed)
			return err
		},
	}
	c.Flags().StringSliceVar(&o.URLs, "url", []string{env("AIFORGE_URL", defaultURL)}, "edge base URL (repeat, or comma-separated: requests alternate)")
	c.Flags().StringVar(&o.Model, "model", "chat-small", "the chat model")
	c.Flags().IntVar(&o.Requests, "requests", 1000, "chat requests to send at most")
	c.Flags().IntVar(&o.Concurrency, "concurrency", 8, "chat requests in flight at most")
	c.Flags().Float64Var(&o.Rate, "rate", 20, "chat requests started per second")
	c.Flags().IntVar(&o.StreamEvery, "stream-every", 4, "stream every n-th chat request (0: none)")
	c.Flags().IntVar(&o.MaxTokens, "max-tokens", 8, "max_tokens of each chat request")
	c.Flags().DurationVar(&o.DocEvery, "doc-every", 2*time.Second, "upload a document this often (0: none)")
	c.Flags().IntVar(&o.Docs, "docs", 100, "documents to upload at most")
	c.Flags().StringVar(&o.VectorStore, "vector-store", "", "vector store id (default: create one)")
	c.Flags().DurationVar(&o.DocWait, "doc-wait", 3*time.Minute, "how long to wait for accepted documents to finish after the load")
	c.Flags().IntVar(&o.Retries, "retries", 3, "retries of a request whose connection could not be opened, each on the next edge")
	c.Flags().DurationVar(&o.Timeout, "timeout", time.Minute, "one request's time limit")
	c.Flags().StringVar(&out, "out", "-", "write the JSON summary here (- for stdout)")
	return c
}

type loadOptions struct {
	URLs        []string
	APIKey      string
	Model       string
	Requests    int
	Concurrency int
	Rate        float64
	StreamEvery int
	MaxTokens   int
	DocEvery    time.Duration
	Docs        int
	VectorStore string
	DocWait     time.Duration
	Retries     int
	Timeout     time.Duration
	// Client is the HTTP client (default: one with Timeout).
	Client *http.Client
}

// loadSummary is loadgen's JSON output.
type loadSummary struct {
	Seconds float64     `json:"seconds"`
	Chat    chatSummary `json:"chat"`
	Docs    docSummary  `json:"docs"`
	// Failures lists the first 100 failed requests, in order.
	Failures []loadFailure `json:"failures"`
}

type chatSummary struct {
	Sent      int `json:"sent"`
	Accepted  int `json:"accepted"`
	Completed int `json:"completed"`
	Broken    int `json:"broken"`
	Failed    int `json:"failed"`
	// Retried counts requests retried on another edge because no connection
	// could be opened (each counted once, however many retries).
	Retried int `json:"retried"`
	// FailedBy counts failures by kind: an HTTP status code, "conn-lost",
	// "connect" (no edge could be reached), "broken-body".
	FailedBy map[string]int `json:"failed_by"`
	PerEdge  map[string]int `json:"accepted_per_edge"`
}

type docSummary struct {
	VectorStore string         `json:"vector_store"`
	Sent        int            `json:"sent"`
	Accepted    int            `json:"accepted"`
	Completed   int            `json:"completed"`
	Failed      int            `json:"failed"`
	Retried     int            `json:"retried"`
	FailedBy    map[string]int `json:"failed_by"`
	// Final counts the accepted documents by their last status.
	Final map[string]int `json:"final_status"`
	// NotCompleted names the accepted documents that did not complete.
	NotCompleted []string `json:"not_completed"`
}

type loadFailure struct {
	At   float64 `json:"at_s"`
	What string  `json:"what"`
	URL  string  `json:"url"`
	Kind string  `json:"kind"`
	Info string  `json:"info,omitempty"`
}

// outcome is what became of one request.
type outcome struct {
	url      string
	status   int
	retried  bool
	kind     string // "" when accepted and whole
	info     string
	accepted bool
	body     []byte
}

type loadRun struct {
	o     loadOptions
	cl    *http.Client
	start time.Time
	mu    sync.Mutex
	sum   loadSummary
}

func runLoad(ctx context.Context, o loadOptions) (*loadSummary, error) {
	if len(o.URLs) == 0 {
		return nil, errors.New("loadgen: no --url")
	}
	for i, u := range o.URLs {
		o.URLs[i] = strings.TrimRight(u, "/")
	}
	o.Concurrency = max(o.Concurrency, 1)
	if o.Rate <= 0 {
		return nil, errors.New("loadgen: --rate must be positive")
	}
	r := &loadRun{o: o, cl: o.Client, start: time.Now()}
	if r.cl == nil {
		r.cl = &http.Client{Timeout: o.Timeout}
	}
	r.sum.Chat.FailedBy, r.sum.Chat.PerEdge = map[string]int{}, map[string]int{}
	r.sum.Docs.FailedBy, r.sum.Docs.Final = map[string]int{}, map[string]int{}
	r.sum.Failures, r.sum.Docs.NotCompleted = []loadFailure{}, []string{}

	// In-flight requests finish under their own time limit: an interrupt
	// only stops new ones.
	bg := context.WithoutCancel(ctx)
	var docs []string
	var docMu sync.Mutex
	var wg sync.WaitGroup
	if o.DocEvery > 0 && o.Docs > 0 {
		vs := o.VectorStore
		if vs == "" {
			res := r.do(bg, "vector store", 0, func(base string) (*http.Request, error) {
				return r.jsonReq(bg, base+"/v1/vector_stores", map[string]any{"name": "loadgen"})
			})
			var v struct {
				ID string `json:"id"`
			}
			if !res.accepted || json.Unmarshal(res.body, &v) != nil || v.ID == "" {
				return nil, fmt.Errorf("loadgen: create vector store: %s %s", res.kind, res.info)
			}
			vs = v.ID
		}
		r.sum.Docs.VectorStore = vs
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(o.DocEvery)
			defer t.Stop()
			for i := 0; i < o.Docs; i++ {
				if id, ok := r.doc(bg, vs, i); ok {
					docMu.Lock()
					docs = append(docs, id)
					docMu.Unlock()
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}

	sem := make(chan struct{}, o.Concurrency)
	tick := time.NewTicker(time.Duration(float64(time.Second) / o.Rate))
	defer tick.Stop()
chat:
	for i := 0; i < o.Requests; i++ {
		select {
		case <-ctx.Done():
			break chat
		case <-tick.C:
		}
		select {
		case <-ctx.Done():
			break chat
		case sem <- struct{}{}:
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			r.chat(bg, i)
		}(i)
	}
	wg.Wait()
	r.waitDocs(bg, docs)
	r.sum.Seconds = time.Since(r.start).Seconds()
	return &r.sum, nil
}

func (r *loadRun) jsonReq(ctx context.Context, url string, body any) (*http.Request, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// do sends the request build makes for an edge, starting with edge n, and
// moves to the next edge while no connection can be opened. It reads the
// whole body (check judges a 2xx body whole).
func (r *loadRun) do(ctx context.Context, what string, n int, build func(base string) (*http.Request, error)) outcome {
	var res outcome
	for attempt := 0; ; attempt++ {
		res.url = r.o.URLs[(n+attempt)%len(r.o.URLs)]
		req, err := build(res.url)
		if err != nil {
			return outcome{url: res.url, kind: "request", info: err.Error()}
		}
		req.Header.Set("Authorization", "Bearer "+r.o.APIKey)
		resp, err := r.cl.Do(req)
		if err != nil {
			if isDialError(err) && attempt < r.o.Retries {
				res.retried = true
				// An LB marks the backend down and moves on; a short pause
				// keeps a retry loop off a stack that is wholly down.
				time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
				continue
			}
			res.kind, res.info = "conn-lost", err.Error()
			if isDialError(err) {
				res.kind = "connect"
			}
			return res
		}
		res.status = resp.StatusCode
		res.body, err = io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			res.kind, res.info = fmt.Sprint(resp.StatusCode), truncate(string(res.body), 200)
			return res
		}
		res.accepted = true
		if err != nil {
			res.kind, res.info = "conn-lost", err.Error()
		}
		return res
	}
}

// isDialError reports an error of opening the connection, before any byte
// of the request was sent: safe to send elsewhere.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func (r *loadRun) chat(ctx context.Context, i int) {
	stream := r.o.StreamEvery > 0 && i%r.o.StreamEvery == r.o.StreamEvery-1
	body := map[string]any{
		"model":      r.o.Model,
		"messages":   []map[string]string{{"role": "user", "content": fmt.Sprintf("loadgen request %d: say hello", i)}},
		"max_tokens": r.o.MaxTokens,
	}
	if stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	res := r.do(ctx, "chat", i, func(base string) (*http.Request, error) {
		return r.jsonReq(ctx, base+"/v1/chat/completions", body)
	})
	if res.accepted && res.kind == "" && !wholeChat(res.body, stream) {
		res.kind, res.info = "broken-body", truncate(string(res.body), 200)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.sum.Chat
	c.Sent++
	if res.retried {
		c.Retried++
	}
	if res.accepted {
		c.Accepted++
		c.PerEdge[res.url]++
		if res.kind != "" {
			c.Broken++
		}
	}
	if res.kind == "" {
		c.Completed++
		return
	}
	c.Failed++
	c.FailedBy[res.kind]++
	r.failure(fmt.Sprintf("chat %d", i), res)
}

// wholeChat reports whether a 2xx chat body is complete.
func wholeChat(body []byte, stream bool) bool {
	if !stream {
		var v struct {
			Object string `json:"object"`
		}
		return json.Unmarshal(body, &v) == nil && v.Object == "chat.completion"
	}
	last := ""
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	return last == "data: [DONE]"
}

func (r *loadRun) failure(what string, res outcome) {
	if len(r.sum.Failures) < 100 {
		r.sum.Failures = append(r.sum.Failures, loadFailure{
			At: time.Since(r.start).Seconds(), What: what, URL: res.url, Kind: res.kind, Info: res.info,
		})
	}
}

// doc uploads document i and adds it to vector store vs; it returns the
// file id when both were accepted.
func (r *loadRun) doc(ctx context.Context, vs string, i int) (string, bool) {
	name := fmt.Sprintf("loadgen-%04d.md", i)
	text := fmt.Sprintf("# Document %d\n\nThis is loadgen document number %d. It describes router model %d, its"+
		" firmware update %d and how to reset it to factory settings.\n\nSection two of document %d repeats the"+
		" facts: router %d, firmware %d.\n", i, i, i, i, i, i, i)
	res := r.do(ctx, "upload", i, func(base string) (*http.Request, error) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		_ = mw.WriteField("purpose", "assistants")
		fw, err := mw.CreateFormFile("file", name)
		if err != nil {
			return nil, err
		}
		_, _ = io.WriteString(fw, text)
		if err := mw.Close(); err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/files", &b)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", mw.FormDataContentType())
		return req, nil
	})
	var f struct {
		ID string `json:"id"`
	}
	if res.accepted && res.kind == "" && (json.Unmarshal(res.body, &f) != nil || f.ID == "") {
		res.kind = "broken-body"
	}
	if res.kind == "" {
		res = r.do(ctx, "add", i+1, func(base string) (*http.Request, error) {
			return r.jsonReq(ctx, base+"/v1/vector_stores/"+vs+"/files", map[string]string{"file_id": f.ID})
		})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := &r.sum.Docs
	d.Sent++
	if res.retried {
		d.Retried++
	}
	if res.kind != "" {
		d.Failed++
		d.FailedBy[res.kind]++
		r.failure("doc "+name, res)
		return "", false
	}
	d.Accepted++
	return f.ID, true
}

// waitDocs polls every accepted document until it is no longer
// in_progress or DocWait has passed, and records its last status.
func (r *loadRun) waitDocs(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	vs := r.sum.Docs.VectorStore
	final, why := map[string]string{}, map[string]string{}
	deadline := time.Now().Add(r.o.DocWait)
	for n := 0; ; n++ {
		pending := 0
		for _, id := range ids {
			if s := final[id]; s == "completed" || s == "failed" || s == "cancelled" {
				continue
			}
			res := r.do(ctx, "doc status", n, func(base string) (*http.Request, error) {
				return http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/vector_stores/"+vs+"/files/"+id, nil)
			})
			var v struct {
				Status    string `json:"status"`
				LastError *struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"last_error"`
			}
			if res.kind != "" || json.Unmarshal(res.body, &v) != nil || v.Status == "" {
				final[id] = "unreadable"
			} else {
				final[id] = v.Status
				if v.LastError != nil && v.LastError.Code != "" {
					why[id] = v.LastError.Code + ": " + truncate(v.LastError.Message, 200)
				}
			}
			if s := final[id]; s != "completed" && s != "failed" && s != "cancelled" {
				pending++
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	d := &r.sum.Docs
	for _, id := range ids {
		d.Final[final[id]]++
		if final[id] == "completed" {
			d.Completed++
		} else {
			d.NotCompleted = append(d.NotCompleted, strings.TrimSpace(id+" "+final[id]+" "+why[id]))
		}
	}
	sort.Strings(d.NotCompleted)
}
