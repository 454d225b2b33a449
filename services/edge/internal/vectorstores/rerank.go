package vectorstores

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/rerank"
)

// The rerank stage of vector store search and file_search
// (ranking_options.ranker). OpenAI's rankers are "auto" and
// "default-2024-11-15"; aiforge serves those (and "none") with the
// retriever's own ranking, and takes the name of a registered rerank model
// (kind "rerank") as a ranker: the top RerankCandidates(max_num_results)
// candidates are reranked through the model's workers (metered to the
// caller's key, endpoint "rerank"), and the best max_num_results are
// returned in the model's order with its relevance score as their score;
// score_threshold then applies to that score.

// Rankers that keep the retriever's ranking.
const (
	RankerAuto    = "auto"
	RankerDefault = "default-2024-11-15"
	RankerNone    = "none"
)

// MaxCandidates bounds the candidates a rerank stage reads (the
// retriever's largest page).
const MaxCandidates = 50

// RerankCandidates is how many candidates are retrieved for a rerank to
// keep limit of them: four times as many, at most MaxCandidates.
func RerankCandidates(limit int) int { return min(max(4*limit, limit), MaxCandidates) }

// Ranker resolves ranking_options.ranker for key: "" when the
// retriever's ranking stands, else the rerank model's name. param names
// the field in errors.
func (s *Service) Ranker(key *registry.Key, ranker, param string) (string, *contracts.Error) {
	switch ranker {
	case "", RankerAuto, RankerDefault, RankerNone:
		return "", nil
	}
	m, ok := s.d.Directory.Served(ranker)
	if !ok {
		return "", contracts.ErrBadRequest(param, contracts.CodeInvalidValue,
			fmt.Sprintf("Invalid '%s': %q is not %q, %q, %q or a served rerank model.", param, ranker, RankerAuto, RankerDefault, RankerNone))
	}
	if m.Kind != registry.ModelKindRerank {
		return "", contracts.ErrBadRequest(param, contracts.CodeModelKindMismatch,
			fmt.Sprintf("Invalid '%s': the model '%s' is not a rerank model.", param, ranker))
	}
	if !key.Allows(ranker) {
		return "", contracts.ErrModelNotAllowed(ranker)
	}
	if s.d.Rerank == nil {
		return "", contracts.ErrServiceUnavailable("rerank", "is not configured on this edge")
	}
	return ranker, nil
}

// Rerank reorders results by model's relevance to queries, for key's
// tenant and key (who pay for it), and keeps the best limit at or above
// threshold.
func (s *Service) Rerank(ctx context.Context, key *registry.Key, model string, queries []string, results []Result, limit int, threshold float64) ([]Result, *contracts.Error) {
	if len(results) == 0 {
		return results, nil
	}
	docs := make([]string, len(results))
	for i, r := range results {
		docs[i], _ = r.Text().(string)
	}
	resp, err := rerank.Rerank(ctx, s.d.Rerank, rerank.Call{
		Request: rerank.Request{Model: model, Query: strings.Join(queries, "\n"), Documents: docs, TopN: limit},
		Tenant:  key.Tenant, KeyID: key.ID,
	})
	if err != nil {
		s.log.Warn("rerank stage failed", "model", model, "err", err)
		var be *bridge.Error
		switch {
		case errors.Is(err, rerank.ErrRejected):
			return nil, contracts.ErrBadRequest("ranking_options.ranker", contracts.CodeInvalidRequest, "The rerank model refused the candidates: "+err.Error())
		case errors.Is(err, bridge.ErrNoWorker):
			return nil, contracts.ErrNoWorker(model)
		case errors.As(err, &be) && be.Code == contracts.CodeOverloaded:
			return nil, contracts.ErrOverloaded(model)
		}
		return nil, contracts.ErrEngine("The rerank model failed: " + err.Error())
	}
	out := make([]Result, 0, min(limit, len(resp.Results)))
	for _, x := range resp.Results {
		if len(out) == limit {
			break
		}
		if x.RelevanceScore < threshold {
			continue
		}
		r := results[x.Index]
		r.Score = x.RelevanceScore
		out = append(out, r)
	}
	return out, nil
}
