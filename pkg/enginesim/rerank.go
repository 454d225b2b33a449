package enginesim

import (
	"cmp"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// The simulator's reranker, on both rerank protocols:
//
//   - TEI: POST /rerank {"query","texts"} answered [{"index","score"}] by
//     descending score, without usage; GET /info names Models[0] as
//     model_id, as TEI names the model it loaded.
//   - vLLM / Jina / Cohere style: POST /v1/rerank
//     {"model","query","documents","top_n","return_documents"} answered
//     {"id","model","results":[{"index","relevance_score","document"?}],
//     "usage":{"total_tokens"}}.
//
// The score is RerankScore: deterministic and lexical, so that tests can
// predict the order.

// maxRerankDocuments bounds the documents of one request.
const maxRerankDocuments = 10000

// RerankScore is the simulator's relevance of doc to query: the cosine of
// their sets of distinct terms (lower-cased runs of letters and digits),
// |Q∩D| / sqrt(|Q|·|D|), in [0, 1]; 0 when either has no term.
func RerankScore(query, doc string) float64 {
	q, d := termSet(query), termSet(doc)
	if len(q) == 0 || len(d) == 0 {
		return 0
	}
	n := 0
	for t := range q {
		if d[t] {
			n++
		}
	}
	return float64(n) / math.Sqrt(float64(len(q))*float64(len(d)))
}

func termSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, f := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		out[f] = true
	}
	return out
}

// rerankTokens is the simulator's token count of a rerank: the words of
// the query and of each document, the query counted once per document (a
// cross-encoder reads each pair).
func rerankTokens(query string, docs []string) int {
	q := countWords(query)
	n := 0
	for _, d := range docs {
		n += q + countWords(d)
	}
	return n
}

type scored struct {
	index int
	score float64
}

// rank scores docs and orders them by descending score (stable).
func rank(query string, docs []string) []scored {
	out := make([]scored, len(docs))
	for i, d := range docs {
		out[i] = scored{i, RerankScore(query, d)}
	}
	slices.SortStableFunc(out, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	return out
}

// serveRerank answers POST /rerank (tei) or POST /v1/rerank.
func (s *Sim) serveRerank(w http.ResponseWriter, r *http.Request, tei bool) {
	s.requests.Add(1)
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	s.recordHeaders(r.Header, true)
	if !s.authorized(r) {
		s.reject(w, errUnauthorized)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		s.reject(w, badRequest("could not read request body: "+err.Error(), ""))
		return
	}
	s.recordBody(body)
	var req struct {
		Model           string            `json:"model"`
		Query           string            `json:"query"`
		Texts           []string          `json:"texts"`
		Documents       []json.RawMessage `json:"documents"`
		TopN            *int              `json:"top_n"`
		ReturnDocuments bool              `json:"return_documents"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.reject(w, malformed(err))
		return
	}
	docs := req.Texts
	model := s.models[0]
	if !tei {
		m, aerr := s.resolveModel(req.Model)
		if aerr != nil {
			s.reject(w, aerr)
			return
		}
		model = m
		docs = make([]string, len(req.Documents))
		for i, d := range req.Documents {
			var str string
			var obj struct {
				Text string `json:"text"`
			}
			switch {
			case json.Unmarshal(d, &str) == nil:
				docs[i] = str
			case json.Unmarshal(d, &obj) == nil:
				docs[i] = obj.Text
			default:
				s.reject(w, badRequest("documents must be strings or {\"text\"} objects", "documents"))
				return
			}
		}
	}
	param := "documents"
	if tei {
		param = "texts"
	}
	switch {
	case req.Query == "":
		s.reject(w, badRequest("query must not be empty", "query"))
		return
	case len(docs) == 0:
		s.reject(w, badRequest(param+" must not be empty", param))
		return
	case len(docs) > maxRerankDocuments:
		s.reject(w, badRequest("too many "+param, param))
		return
	case req.TopN != nil && *req.TopN < 1:
		s.reject(w, badRequest("top_n must be at least 1", "top_n"))
		return
	}
	f, failing := s.takeFailure()
	if failing && s.failNonStream(w, r, f) {
		return
	}
	ranked := rank(req.Query, docs)
	if req.TopN != nil && *req.TopN < len(ranked) {
		ranked = ranked[:*req.TopN]
	}
	var out []byte
	if tei {
		type teiResult struct {
			Index int     `json:"index"`
			Score float64 `json:"score"`
		}
		rs := make([]teiResult, len(ranked))
		for i, x := range ranked {
			rs[i] = teiResult{x.index, x.score}
		}
		out, _ = json.Marshal(rs)
	} else {
		type doc struct {
			Text string `json:"text"`
		}
		type result struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
			Document       *doc    `json:"document,omitempty"`
		}
		rs := make([]result, len(ranked))
		for i, x := range ranked {
			rs[i] = result{Index: x.index, RelevanceScore: x.score}
			if req.ReturnDocuments {
				rs[i].Document = &doc{docs[x.index]}
			}
		}
		out, _ = json.Marshal(map[string]any{"id": "rerank-" + strconv.FormatUint(s.seq.Add(1), 10), "model": model, "results": rs,
			"usage": map[string]int{"total_tokens": rerankTokens(req.Query, docs)}})
	}
	s.writeJSON(w, http.StatusOK, out)
	s.completed.Add(1)
}

// serveInfo answers TEI's GET /info.
func (s *Sim) serveInfo(w http.ResponseWriter, r *http.Request) {
	s.recordHeaders(r.Header, false)
	if !s.authorized(r) {
		s.writeError(w, errUnauthorized)
		return
	}
	out, _ := json.Marshal(map[string]any{"model_id": s.models[0], "model_type": map[string]any{"reranker": map[string]any{}},
		"max_input_length": 512, "version": "enginesim"})
	s.writeJSON(w, http.StatusOK, out)
}
