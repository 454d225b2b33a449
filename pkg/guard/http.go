package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// HTTPConfig configures an external classifier behind HTTP, such as Llama
// Prompt Guard 2 served by Hugging Face TEI.
type HTTPConfig struct {
	// URL is the endpoint. A path ending in /predict or /classify (TEI)
	// gets every segment in one {"inputs": [...]} request; any other gets
	// one {"text": "..."} request per segment.
	URL string
	// Timeout bounds a whole Classify call; 0 means 2 seconds.
	Timeout time.Duration
	// Threshold is the malicious score at which a verdict is malicious;
	// 0 means DefaultThreshold.
	Threshold float64
	// Client is the HTTP client; nil means a client of its own.
	Client *http.Client
}

// HTTP is an external classifier. Its errors are returned as errors: the
// caller decides whether admission fails open or closed.
type HTTP struct {
	url       string
	batch     bool
	timeout   time.Duration
	threshold float64
	client    *http.Client
}

// maxResponse bounds what an external classifier may answer.
const maxResponse = 1 << 20

// NewHTTP validates cfg and returns the external classifier.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("guard: external classifier URL %q is not an http(s) URL", cfg.URL)
	}
	if cfg.Timeout < 0 || cfg.Threshold < 0 || cfg.Threshold > 1 {
		return nil, errors.New("guard: external classifier timeout and threshold must be non-negative, threshold at most 1")
	}
	h := &HTTP{url: cfg.URL, timeout: cfg.Timeout, threshold: cfg.Threshold, client: cfg.Client}
	p := strings.TrimRight(u.Path, "/")
	h.batch = strings.HasSuffix(p, "/predict") || strings.HasSuffix(p, "/classify")
	if h.timeout == 0 {
		h.timeout = 2 * time.Second
	}
	if h.threshold == 0 {
		h.threshold = DefaultThreshold
	}
	if h.client == nil {
		h.client = &http.Client{}
	}
	return h, nil
}

type label struct {
	Label string  `json:"label"`
	Score float64 `json:"score"`
}

// Classify sends every segment to the endpoint. An external model scores
// "malicious" without the built-in categories: its score is reported as
// injection when the label says injection (or just malicious) and as
// jailbreak when it says jailbreak.
func (h *HTTP) Classify(ctx context.Context, segs []Segment) (Verdict, error) {
	v := Verdict{Scores: make(map[string]float64, nCat), Segment: -1, Classifier: "external"}
	for _, c := range Categories {
		v.Scores[c] = 0
	}
	if len(segs) == 0 {
		return v, nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	var results [][]label
	if h.batch {
		texts := make([]string, len(segs))
		for i, s := range segs {
			texts[i] = s.Text
		}
		r, err := h.post(ctx, map[string]any{"inputs": texts})
		if err != nil {
			return Verdict{}, err
		}
		if results, err = parseLabels(r, len(segs)); err != nil {
			return Verdict{}, err
		}
	} else {
		for _, s := range segs {
			r, err := h.post(ctx, map[string]any{"text": s.Text})
			if err != nil {
				return Verdict{}, err
			}
			ls, err := parseLabels(r, 1)
			if err != nil {
				return Verdict{}, err
			}
			results = append(results, ls[0])
		}
	}
	for i, ls := range results {
		for _, l := range ls {
			cat := ""
			switch strings.ToUpper(l.Label) {
			case "MALICIOUS", "INJECTION", "LABEL_1", "UNSAFE":
				cat = CategoryInjection
			case "JAILBREAK", "LABEL_2":
				cat = CategoryJailbreak
			}
			if cat == "" {
				continue
			}
			s := min(1, max(0, l.Score))
			if s > v.Scores[cat] {
				v.Scores[cat] = s
			}
			if s > v.Score {
				v.Score, v.Category, v.Segment = s, cat, i
			}
		}
	}
	v.Malicious = v.Score >= h.threshold
	return v, nil
}

func (h *HTTP) post(ctx context.Context, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("guard: external classifier request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("guard: external classifier request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		// The URL may carry credentials in its query: say only the host.
		return nil, fmt.Errorf("guard: external classifier %s: %w", req.URL.Host, unwrapURLError(err))
	}
	defer resp.Body.Close()
	r, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("guard: external classifier %s: reading the answer: %w", req.URL.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("guard: external classifier %s: HTTP %d", req.URL.Host, resp.StatusCode)
	}
	if len(r) > maxResponse {
		return nil, fmt.Errorf("guard: external classifier %s: answer over %d bytes", req.URL.Host, maxResponse)
	}
	return r, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// parseLabels reads the answer shapes classifiers use: TEI's
// [[{label,score},...], ...] (one list per input), a flat
// [{label,score},...] (one input), or a single {label,score}.
func parseLabels(r []byte, n int) ([][]label, error) {
	r = bytes.TrimSpace(r)
	var nested [][]label
	if err := json.Unmarshal(r, &nested); err == nil && len(nested) > 0 {
		if len(nested) != n {
			return nil, fmt.Errorf("guard: external classifier answered %d results for %d inputs", len(nested), n)
		}
		return nested, nil
	}
	var flat []label
	if err := json.Unmarshal(r, &flat); err == nil && len(flat) > 0 {
		if n == 1 {
			return [][]label{flat}, nil
		}
		if len(flat) == n {
			out := make([][]label, n)
			for i := range flat {
				out[i] = []label{flat[i]}
			}
			return out, nil
		}
		return nil, fmt.Errorf("guard: external classifier answered %d labels for %d inputs", len(flat), n)
	}
	var one label
	if err := json.Unmarshal(r, &one); err == nil && one.Label != "" && n == 1 {
		return [][]label{{one}}, nil
	}
	return nil, errors.New("guard: external classifier answer is not a list of {label, score}")
}

// Combine joins classifiers. "max": every classifier judges, each
// category scores the highest any gave, and the verdict is malicious when
// any classifier's is (each with its own threshold); a classifier that
// fails is left out, and only when every one fails is the error returned. "external_only": the first classifier alone (the caller
// passes the external one), named "combined".
func Combine(mode string, cs ...Classifier) Classifier {
	return &combined{mode: mode, cs: cs}
}

type combined struct {
	mode string
	cs   []Classifier
}

func (c *combined) Classify(ctx context.Context, segs []Segment) (Verdict, error) {
	if len(c.cs) == 0 {
		return Verdict{}, errors.New("guard: combined classifier has no classifiers")
	}
	switch c.mode {
	case "external_only":
		v, err := c.cs[0].Classify(ctx, segs)
		v.Classifier = "combined"
		return v, err
	case "max", "":
	default:
		return Verdict{}, fmt.Errorf("guard: unknown combine mode %q", c.mode)
	}
	out := Verdict{Scores: make(map[string]float64, nCat), Segment: -1, Classifier: "combined"}
	for _, cat := range Categories {
		out.Scores[cat] = 0
	}
	var errs []error
	for _, cl := range c.cs {
		v, err := cl.Classify(ctx, segs)
		if err != nil {
			// One classifier down (an external endpoint timing out) leaves
			// the others' judgement: the request is still judged.
			errs = append(errs, err)
			continue
		}
		for cat, s := range v.Scores {
			if s > out.Scores[cat] {
				out.Scores[cat] = s
			}
		}
		// A malicious verdict outranks a benign one whatever the scores
		// (thresholds differ between classifiers).
		if v.Malicious && !out.Malicious || v.Malicious == out.Malicious && v.Score > out.Score {
			out.Category, out.Score, out.Segment = v.Category, v.Score, v.Segment
		}
		out.Malicious = out.Malicious || v.Malicious
	}
	if len(errs) == len(c.cs) {
		return Verdict{}, errors.Join(errs...)
	}
	return out, nil
}
