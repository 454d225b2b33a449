package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

func getJSON(t *testing.T, url, token string, out any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := readAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

type completionsPage struct {
	Object string `json:"object"`
	Data   []struct {
		StartTime int64 `json:"start_time"`
		Results   []struct {
			Object           string  `json:"object"`
			InputTokens      int64   `json:"input_tokens"`
			OutputTokens     int64   `json:"output_tokens"`
			NumModelRequests int64   `json:"num_model_requests"`
			ProjectID        *string `json:"project_id"`
			APIKeyID         *string `json:"api_key_id"`
			Model            *string `json:"model"`
		} `json:"results"`
	} `json:"data"`
	HasMore bool `json:"has_more"`
}

// TestUsageReportsAuditAndExport: requests through the edge show up in the
// OpenAI-shaped usage and cost reports, scoped to the tenant for a tenant
// key; the audit finds no difference; the export has one CloudEvent each.
func TestUsageReportsAuditAndExport(t *testing.T) {
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, EmbeddingDims: 4})
	s := startStack(t, stackOpts{})
	ctx := context.Background()
	if err := s.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "chat", "engine": map[string]any{"base_url": base, "model": "up"},
		"price": map[string]any{"input_per_mtok_usd": 2, "output_per_mtok_usd": 8}}, nil); err != nil {
		t.Fatal(err)
	}
	acme, acmeID := s.tenantKey("acme")
	globex, _ := s.tenantKey("globex")
	probe, _ := s.tenantKey("probe")
	s.waitServed(probe, "chat")
	start := time.Now().Add(-time.Minute)

	var wantIn, wantOut int64
	for i := 0; i < 6; i++ {
		key := acme
		if i%3 == 2 {
			key = globex
		}
		st, body := s.post(key, "/v1/chat/completions", fmt.Sprintf(`{"model":"chat","messages":[{"role":"user","content":"report %d"}],"max_tokens":%d}`, i, 3+i))
		if st != 200 {
			t.Fatalf("%d %s", st, body)
		}
		var r struct {
			Usage struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal(body, &r)
		if key == acme {
			wantIn += r.Usage.PromptTokens
			wantOut += r.Usage.CompletionTokens
		}
	}
	st, _ := s.post(acme, "/v1/embeddings", `{"model":"chat","input":["a b c","d e"]}`)
	if st != 200 {
		t.Fatalf("embeddings %d", st)
	}

	q := "?start_time=" + strconv.FormatInt(start.Unix(), 10) + "&bucket_width=1h&group_by=project_id&group_by=model"
	var page completionsPage
	// The usage service folds asynchronously: wait for the acme totals.
	eventually(t, 10*time.Second, func() bool {
		page = completionsPage{}
		if getJSON(t, s.url+"/v1/organization/usage/completions"+q, acme, &page) != 200 {
			return false
		}
		var in, out int64
		for _, b := range page.Data {
			for _, r := range b.Results {
				in += r.InputTokens
				out += r.OutputTokens
			}
		}
		return in == wantIn && out == wantOut
	}, "acme's usage in the report")
	for _, b := range page.Data {
		for _, r := range b.Results {
			if r.ProjectID == nil || *r.ProjectID != "acme" || r.Model == nil || *r.Model != "chat" || r.Object != "organization.usage.completions.result" {
				t.Fatalf("a tenant key saw another project or a wrong shape: %+v", r)
			}
		}
	}
	// The admin key sees both tenants.
	var all completionsPage
	getJSON(t, s.url+"/v1/organization/usage/completions"+q, adminKey, &all)
	projects := map[string]bool{}
	for _, b := range all.Data {
		for _, r := range b.Results {
			if r.ProjectID != nil {
				projects[*r.ProjectID] = true
			}
		}
	}
	if !projects["acme"] || !projects["globex"] {
		t.Fatalf("admin report projects = %v", projects)
	}
	// Embeddings and costs.
	// The embeddings call's usage event is published after its answer, so
	// it may be folded after the completions seen above: wait for it too.
	var emb completionsPage
	eventually(t, 10*time.Second, func() bool {
		emb = completionsPage{}
		getJSON(t, s.url+"/v1/organization/usage/embeddings?start_time="+strconv.FormatInt(start.Unix(), 10)+"&group_by=api_key_id", acme, &emb)
		for _, b := range emb.Data {
			for _, r := range b.Results {
				if r.APIKeyID != nil && *r.APIKeyID == acmeID && r.NumModelRequests == 1 && r.InputTokens > 0 {
					return true
				}
			}
		}
		return false
	}, "acme's embeddings call in the embeddings report")
	var costs struct {
		Data []struct {
			Results []struct {
				Amount struct {
					Value    float64 `json:"value"`
					Currency string  `json:"currency"`
				} `json:"amount"`
			} `json:"results"`
		} `json:"data"`
	}
	getJSON(t, s.url+"/v1/organization/costs?start_time="+strconv.FormatInt(start.Unix(), 10), acme, &costs)
	var total float64
	for _, b := range costs.Data {
		for _, r := range b.Results {
			total += r.Amount.Value
		}
	}
	if want := (float64(wantIn)*2 + float64(wantOut)*8) / 1e6; total < want*0.999 {
		t.Fatalf("costs %v, want at least the chat cost %v", total, want)
	}
	// Bad parameters name the parameter.
	if st := getJSON(t, s.url+"/v1/organization/usage/completions?bucket_width=1d", acme, nil); st != 400 {
		t.Fatalf("missing start_time: %d", st)
	}
	// A bad key gets nothing.
	if st := getJSON(t, s.url+"/v1/organization/costs?start_time=1", "sk-af-0000000000000000-x", nil); st != 401 {
		t.Fatalf("bad key: %d", st)
	}

	// Audit: no difference.
	var audit struct {
		EventsReplayed int64             `json:"events_replayed"`
		Differences    []json.RawMessage `json:"differences"`
	}
	window := "?from=" + strconv.FormatInt(start.Add(-time.Hour).Unix(), 10) + "&to=" + strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	if err := s.admin.Do(ctx, "POST", "/admin/v1/usage/audit"+window, nil, &audit); err != nil {
		t.Fatal(err)
	}
	if audit.EventsReplayed < 7 || len(audit.Differences) != 0 {
		t.Fatalf("audit = %+v", audit)
	}

	// Export: one CloudEvent per request (plus the waitServed pings).
	req, _ := http.NewRequest("GET", s.url+"/admin/v1/usage/events"+window+"&tenant=globex", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := readAll(resp.Body)
	sc := bufio.NewScanner(bytes.NewReader(body))
	n := 0
	for sc.Scan() {
		var ce struct {
			SpecVersion string          `json:"specversion"`
			ID          string          `json:"id"`
			Type        string          `json:"type"`
			Subject     string          `json:"subject"`
			Data        json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ce); err != nil || ce.SpecVersion != "1.0" || ce.ID == "" || ce.Subject != "globex" || len(ce.Data) == 0 {
			t.Fatalf("not a CloudEvent of globex: %s", sc.Bytes())
		}
		n++
	}
	if n != 2 {
		t.Fatalf("exported %d globex events, want 2", n)
	}
}

// TestCorrectionIsACompensatingEvent: a correction changes the ledger by its
// deltas, once, however often it is posted.
func TestCorrectionIsACompensatingEvent(t *testing.T) {
	_, base := sim(t, enginesim.Config{Models: []string{"up"}})
	s := startStack(t, stackOpts{})
	ctx := context.Background()
	key, keyID := s.tenantKey("acme")
	s.register("chat", base, "up")
	probe, _ := s.tenantKey("probe")
	s.waitServed(probe, "chat")
	start := time.Now().Add(-time.Minute)
	st, body := s.post(key, "/v1/chat/completions", chatBody("chat", 10, false))
	if st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	q := s.url + "/v1/organization/usage/completions?start_time=" + strconv.FormatInt(start.Unix(), 10) + "&bucket_width=1h"
	output := func() int64 {
		var p completionsPage
		getJSON(t, q, key, &p)
		var out int64
		for _, b := range p.Data {
			for _, r := range b.Results {
				out += r.OutputTokens
			}
		}
		return out
	}
	eventually(t, 10*time.Second, func() bool { return output() == 10 }, "usage folded")
	corr := map[string]any{"correction_id": "corr-test-1", "request_id": "req_x", "tenant": "acme", "key_id": keyID, "model": "chat",
		"endpoint": "chat.completions", "at": time.Now().UTC(), "delta_completion_tokens": -4, "reason": "engine over-reported"}
	for i := 0; i < 2; i++ {
		if err := s.admin.Do(ctx, "POST", "/admin/v1/usage/corrections", corr, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A later request is folded after both corrections (stream order): the
	// total then shows whether the correction counted once or twice.
	if st, body := s.post(key, "/v1/chat/completions", chatBody("chat", 1, false)); st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	eventually(t, 10*time.Second, func() bool { return output() != 10 && output() != 6 }, "marker folded")
	if got := output(); got != 7 {
		t.Fatalf("output tokens %d, want 10 - 4 + 1 = 7", got)
	}
	if err := s.admin.Do(ctx, "POST", "/admin/v1/usage/corrections", map[string]any{"tenant": "acme"}, nil); err == nil {
		t.Fatal("an incomplete correction was accepted")
	}
}
