package guard

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// promptGuard is a stand-in for Prompt Guard behind TEI: texts holding
// "attack" score malicious.
func promptGuard(t *testing.T, shape string, calls *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var body struct {
			Text   string   `json:"text"`
			Inputs []string `json:"inputs"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		score := func(s string) []map[string]any {
			m := 0.01
			if strings.Contains(s, "attack") {
				m = 0.99
			}
			return []map[string]any{{"label": "MALICIOUS", "score": m}, {"label": "BENIGN", "score": 1 - m}}
		}
		switch shape {
		case "batch":
			var out [][]map[string]any
			for _, s := range body.Inputs {
				out = append(out, score(s))
			}
			_ = json.NewEncoder(w).Encode(out)
		case "flat":
			_ = json.NewEncoder(w).Encode(score(body.Text))
		case "broken":
			_, _ = w.Write([]byte(`{"oops": true}`))
		case "500":
			http.Error(w, "down", http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

var twoSegs = []Segment{{Role: "user", Text: "hello"}, {Role: "tool", Source: SourceTool, Text: "an attack"}}

func TestHTTPBatchedTEI(t *testing.T) {
	var calls atomic.Int32
	srv := promptGuard(t, "batch", &calls)
	h, err := NewHTTP(HTTPConfig{URL: srv.URL + "/predict"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.Classify(context.Background(), twoSegs)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Malicious || v.Segment != 1 || v.Category != CategoryInjection || v.Score != 0.99 || v.Classifier != "external" || calls.Load() != 1 {
		t.Fatalf("verdict %+v after %d calls", v, calls.Load())
	}
}

func TestHTTPPerSegment(t *testing.T) {
	var calls atomic.Int32
	srv := promptGuard(t, "flat", &calls)
	h, err := NewHTTP(HTTPConfig{URL: srv.URL + "/score"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.Classify(context.Background(), twoSegs)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Malicious || v.Segment != 1 || calls.Load() != 2 {
		t.Fatalf("verdict %+v after %d calls", v, calls.Load())
	}
	v, err = h.Classify(context.Background(), twoSegs[:1])
	if err != nil || v.Malicious || v.Score != 0.01 {
		t.Fatalf("benign verdict %+v, %v", v, err)
	}
}

func TestHTTPErrorsAreErrors(t *testing.T) {
	for _, shape := range []string{"broken", "500"} {
		var calls atomic.Int32
		srv := promptGuard(t, shape, &calls)
		h, err := NewHTTP(HTTPConfig{URL: srv.URL + "/classify"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Classify(context.Background(), twoSegs); err == nil {
			t.Errorf("%s: no error", shape)
		}
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	h, _ := NewHTTP(HTTPConfig{URL: srv.URL + "/predict?token=s3cret"})
	_, err := h.Classify(context.Background(), twoSegs)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("unreachable endpoint: %v", err)
	}
	for _, bad := range []string{"", "ftp://x/predict", "not a url"} {
		if _, err := NewHTTP(HTTPConfig{URL: bad}); err == nil {
			t.Errorf("URL %q accepted", bad)
		}
	}
}

func TestCombine(t *testing.T) {
	var calls atomic.Int32
	srv := promptGuard(t, "batch", &calls)
	ext, err := NewHTTP(HTTPConfig{URL: srv.URL + "/predict"})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuiltin(BuiltinConfig{})
	destructive := []Segment{{Role: "user", Text: "Execute rm -rf / --no-preserve-root now."}}

	v, err := Combine("max", b, ext).Classify(context.Background(), destructive)
	if err != nil || !v.Malicious || v.Category != CategoryDestructive || v.Classifier != "combined" {
		t.Fatalf("max, built-in catches: %+v, %v", v, err)
	}
	v, err = Combine("max", b, ext).Classify(context.Background(), []Segment{{Text: "an attack the lexicon does not know"}})
	if err != nil || !v.Malicious || v.Category != CategoryInjection {
		t.Fatalf("max, external catches: %+v, %v", v, err)
	}
	v, err = Combine("external_only", ext, b).Classify(context.Background(), destructive)
	if err != nil || v.Malicious || v.Classifier != "combined" {
		t.Fatalf("external_only judged by the built-in: %+v, %v", v, err)
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "x", http.StatusServiceUnavailable) }))
	defer down.Close()
	bad, _ := NewHTTP(HTTPConfig{URL: down.URL + "/predict"})
	// The external classifier down: the built-in one still judges.
	if v, err := Combine("max", b, bad).Classify(context.Background(), destructive); err != nil || !v.Malicious || v.Category != CategoryDestructive {
		t.Fatalf("with the external classifier down: %+v, %v", v, err)
	}
	if _, err := Combine("max", bad).Classify(context.Background(), destructive); err == nil {
		t.Fatal("every classifier failed and no error was returned")
	}
	if _, err := Combine("vote", b).Classify(context.Background(), destructive); err == nil {
		t.Fatal("unknown mode accepted")
	}
}
