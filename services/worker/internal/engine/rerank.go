package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/rerank"
)

// IsReranker reports whether the engine is a rerank model's.
func (c *Client) IsReranker() bool { return c.cfg.Kind == registry.ModelKindRerank }

func (c *Client) teiRerank() bool {
	return c.IsReranker() && c.cfg.Engine.RerankAPI == registry.RerankAPITEI
}

// teiInfo is the identity check of a TEI engine, which lists no models:
// GET /info at its root names the model it loaded (model_id).
func (c *Client) teiInfo(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	served := c.cfg.Served
	u := strings.TrimSuffix(c.cfg.Engine.BaseURL, "/v1") + "/info"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, fmt.Errorf("worker %s: engine request: %w", served, err)
	}
	if c.authHeader != "" {
		req.Header.Set("Authorization", c.authHeader)
	}
	req.Header.Set("Accept", "application/json")
	where := RedactURL(u)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("worker %s: %w: GET %s: %w", served, ErrUnreachable, where, UnwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case err != nil:
		return 0, fmt.Errorf("worker %s: %w: GET %s: reading the answer: %w", served, ErrUnreachable, where, err)
	case resp.StatusCode >= 500:
		return 0, fmt.Errorf("worker %s: %w: GET %s answered %d", served, ErrUnreachable, where, resp.StatusCode)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return 0, kindError(ErrUnauthorized, "worker %s: engine refused the engine API key: GET %s answered %d", served, where, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return 0, kindError(ErrMisnamed, "worker %s: GET %s answered %d; is this a TEI engine (rerank_api %q)?", served, where, resp.StatusCode, registry.RerankAPITEI)
	}
	var info struct {
		ModelID        string `json:"model_id"`
		MaxInputLength int    `json:"max_input_length"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return 0, kindError(ErrMisnamed, "worker %s: GET %s did not answer TEI's info: %w", served, where, err)
	}
	if info.ModelID != c.cfg.Engine.Model {
		return 0, kindError(ErrMisnamed, "worker %s: engine at %s serves %q, not upstream model %q",
			served, RedactURL(c.cfg.Engine.BaseURL), info.ModelID, c.cfg.Engine.Model)
	}
	return max(info.MaxInputLength, 0), nil
}

// teiRequest is TEI's POST /rerank body.
type teiRequest struct {
	Query     string   `json:"query"`
	Texts     []string `json:"texts"`
	RawScores bool     `json:"raw_scores"`
	Truncate  bool     `json:"truncate"`
}

// v1Request is the Jina/Cohere/vLLM POST /v1/rerank body.
type v1Request struct {
	Model           string   `json:"model"`
	Query           string   `json:"query"`
	Documents       []string `json:"documents"`
	TopN            int      `json:"top_n,omitempty"`
	ReturnDocuments bool     `json:"return_documents"`
}

// v1Answer is what the /v1/rerank engines answer: Jina, vLLM and
// Infinity give usage.total_tokens (some prompt_tokens too); Cohere gives
// meta.billed_units.search_units, which are not tokens, and is estimated.
type v1Answer struct {
	Results []struct {
		Index          *int     `json:"index"`
		RelevanceScore *float64 `json:"relevance_score"`
	} `json:"results"`
	Usage *struct {
		TotalTokens  int64 `json:"total_tokens"`
		PromptTokens int64 `json:"prompt_tokens"`
	} `json:"usage"`
}

// forwardRerank sends a rerank request to the engine in its protocol
// (Engine.RerankAPI) and answers rerank.Response: results by descending
// score, at most top_n, with the engine's token count or an estimate.
func (ec *Client) forwardRerank(ctx context.Context, c *Call, w *bridge.ResponseWriter) {
	bad := func(msg string) {
		e := contracts.ErrBadRequest("", contracts.CodeInvalidRequest, msg)
		c.fail(w, &bridge.Error{Status: e.Status, Code: e.Code, Message: e.Message, Body: e.Body()})
	}
	if !ec.IsReranker() {
		bad(fmt.Sprintf("The model '%s' is not a rerank model.", ec.cfg.Served))
		return
	}
	var in rerank.Request
	if err := json.Unmarshal(c.Req.Body, &in); err != nil {
		bad("The rerank request is not valid JSON: " + err.Error())
		return
	}
	if err := in.Validate(); err != nil {
		bad("Invalid rerank request: " + err.Error() + ".")
		return
	}
	tei := ec.cfg.Engine.RerankAPI == registry.RerankAPITEI
	var body []byte
	if tei {
		body, _ = marshalNoEscape(teiRequest{Query: in.Query, Texts: in.Documents, Truncate: true})
	} else {
		body, _ = marshalNoEscape(v1Request{Model: ec.cfg.Engine.Model, Query: in.Query, Documents: in.Documents, TopN: in.TopN})
	}
	ctx, cancel := context.WithTimeoutCause(ctx, ec.cfg.RequestTimeout, errRequestTimeout)
	defer cancel()
	resp := ec.send(ctx, c, w, ec.urls[Rerank], body, hdrJSON)
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	raw, err := readBody(resp, maxResponseBytes)
	if err != nil {
		if c.interrupted(ctx, w) {
			return
		}
		c.engineFailure(w, "The engine's answer was cut short: "+err.Error())
		return
	}
	if isErrorEvent(raw) {
		ec.engineError(c, w, 0, raw)
		return
	}
	results, tokens, err := parseRerank(raw, tei, len(in.Documents))
	if err != nil {
		c.engineFailure(w, "The engine answered a malformed rerank: "+err.Error())
		return
	}
	// Highest first; equal scores keep the documents' order.
	slices.SortStableFunc(results, func(a, b rerank.Result) int {
		switch {
		case a.RelevanceScore > b.RelevanceScore:
			return -1
		case a.RelevanceScore < b.RelevanceScore:
			return 1
		}
		return a.Index - b.Index
	})
	if in.TopN > 0 && len(results) > in.TopN {
		results = results[:in.TopN]
	}
	out := rerank.Response{Object: rerank.ObjectRerank, Model: ec.cfg.Served, Results: results}
	if tokens > 0 {
		c.setUsage(&Usage{PromptTokens: tokens})
		out.Usage = rerank.Usage{PromptTokens: tokens, TotalTokens: tokens}
	} else {
		u := c.Estimate()
		out.Usage = rerank.Usage{PromptTokens: u.PromptTokens, TotalTokens: u.PromptTokens, Estimated: true}
	}
	enc, err := marshalNoEscape(out)
	if err != nil {
		c.fail(w, &bridge.Error{Status: http.StatusInternalServerError, Code: contracts.CodeInternal, Message: "worker: encode the rerank answer"})
		return
	}
	if err := w.Body(ctx, http.StatusOK, "application/json", enc); err != nil {
		c.sendFailed(ctx, w, err)
		return
	}
	c.Outcome = OutcomeOK
}

// parseRerank reads an engine's rerank answer for n documents: TEI's
// [{"index","score"}] or the /v1 shape; every index must name a document
// once. tokens is the engine's count, 0 when it gave none.
func parseRerank(raw []byte, tei bool, n int) (results []rerank.Result, tokens int64, err error) {
	seen := make(map[int]bool, n)
	add := func(i *int, score *float64) error {
		if i == nil || score == nil {
			return fmt.Errorf("a result without index or score")
		}
		if *i < 0 || *i >= n || seen[*i] {
			return fmt.Errorf("result index %d out of range or repeated", *i)
		}
		seen[*i] = true
		results = append(results, rerank.Result{Index: *i, RelevanceScore: *score})
		return nil
	}
	if tei {
		var rs []struct {
			Index *int     `json:"index"`
			Score *float64 `json:"score"`
		}
		if err := json.Unmarshal(raw, &rs); err != nil {
			return nil, 0, err
		}
		for _, r := range rs {
			if err := add(r.Index, r.Score); err != nil {
				return nil, 0, err
			}
		}
		return results, 0, nil
	}
	var a v1Answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, 0, err
	}
	for _, r := range a.Results {
		if err := add(r.Index, r.RelevanceScore); err != nil {
			return nil, 0, err
		}
	}
	if a.Usage != nil {
		tokens = max(a.Usage.TotalTokens, a.Usage.PromptTokens, 0)
	}
	return results, tokens, nil
}
