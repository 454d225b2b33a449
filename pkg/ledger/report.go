package ledger

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
)

// Report names one of OpenAI's organization usage endpoints.
type Report string

// Reports answered from a ledger.
const (
	// ReportCompletions is GET /v1/organization/usage/completions: the
	// chat.completions and completions endpoints.
	ReportCompletions Report = "completions"
	// ReportEmbeddings is GET /v1/organization/usage/embeddings.
	ReportEmbeddings Report = "embeddings"
	// ReportCosts is GET /v1/organization/costs: every endpoint, in USD.
	ReportCosts Report = "costs"
	// ReportCodeInterpreterSessions is GET
	// /v1/organization/usage/code_interpreter_sessions: the agent code
	// sandboxes (sandbox buckets).
	ReportCodeInterpreterSessions Report = "code_interpreter_sessions"
)

// Group-by fields. Tenants are OpenAI's projects; a cost line item is a
// model.
const (
	GroupProjectID = "project_id"
	GroupAPIKeyID  = "api_key_id"
	GroupModel     = "model"
	GroupBatch     = "batch"
	GroupLineItem  = "line_item"
)

// BatchLineItemSuffix ends the cost line item of batch lines: a model's
// batch spend is the line item "<model>, batch", its real-time spend
// "<model>".
const BatchLineItemSuffix = ", batch"

// SandboxLineItem is the cost line item of the agent code sandboxes.
const SandboxLineItem = "code interpreter"

// LineItem is the cost line item of a bucket's dimensions.
func LineItem(d Dims) string {
	if d.Endpoint == EndpointSandbox {
		return SandboxLineItem
	}
	if d.Batch {
		return d.Model + BatchLineItemSuffix
	}
	return d.Model
}

// Query is a parsed report request.
type Query struct {
	Report    Report
	StartTime int64 // unix seconds, inclusive
	EndTime   int64 // unix seconds, exclusive
	Width     Width
	// GroupBy holds the group-by fields, each once.
	GroupBy []string
	Limit   int
	// First is the start of the first width-bucket of this page.
	First      int64
	ProjectIDs []string
	APIKeyIDs  []string
	// Models filters models (completions, embeddings) or line items
	// (costs: a model's line items are the model and "<model>, batch").
	Models []string
	// OpenEnd is set when the request had no end_time: the last bucket is
	// then listed whole, not cut at EndTime (now).
	OpenEnd bool
	// Batch is the batch filter (completions, embeddings): true keeps only
	// the lines of Batch API batches, false only real-time requests, nil
	// both.
	Batch *bool
}

func (q Query) grouped(field string) bool { return slices.Contains(q.GroupBy, field) }

type limits struct{ def, max int }

func limitsOf(r Report, w Width) limits {
	if r == ReportCosts {
		return limits{7, 180}
	}
	switch w {
	case Minute:
		return limits{60, 1440}
	case Hour:
		return limits{24, 168}
	}
	return limits{7, 31}
}

func badParam(param, code, format string, args ...any) *contracts.Error {
	return contracts.ErrBadRequest(param, code, fmt.Sprintf(format, args...))
}

// list returns the values of a list parameter, accepting both name=a&name=b
// and the SDKs' name[]=a&name[]=b.
func list(v url.Values, name string) []string {
	var out []string
	for _, k := range []string{name, name + "[]"} {
		for _, s := range v[k] {
			if s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// ParseQuery parses the raw URL query string of a report endpoint the way
// OpenAI documents it: start_time (unix seconds, required), end_time
// (exclusive; default now), bucket_width (1m, 1h, 1d; costs: 1d only;
// default 1d), limit (buckets per page: 1d default 7 max 31, 1h default 24
// max 168, 1m default 60 max 1440; costs default 7 max 180), page (the
// next_page cursor of the previous page), group_by (project_id, api_key_id,
// model, and for completions batch; costs: project_id, line_item) and the
// filters project_ids, api_key_ids, models and batch (true: batch lines
// only, false: real-time requests only; costs: project_ids, line_items);
// user_ids is refused (there are no users). code_interpreter_sessions takes
// group_by project_id and api_key_id, and the filters project_ids and
// api_key_ids. Other parameters are ignored. Errors are
// OpenAI-shaped 400s naming the parameter.
//
// Buckets are aligned to UTC multiples of the width; the first starts at
// start_time and the last ends at end_time when those are not aligned (the
// last is listed whole when end_time is absent). A bucket counts the minute
// buckets whose minute starts inside it.
func ParseQuery(r Report, rawQuery string, now time.Time) (Query, *contracts.Error) {
	q := Query{Report: r}
	switch r {
	case ReportCompletions, ReportEmbeddings, ReportCosts, ReportCodeInterpreterSessions:
	default:
		return q, badParam("", contracts.CodeInvalidRequest, "unknown report %q", string(r))
	}
	v, err := url.ParseQuery(rawQuery)
	if err != nil {
		return q, badParam("", contracts.CodeInvalidRequest, "The query string could not be parsed: %v.", err)
	}
	intParam := func(name string) (int64, bool, *contracts.Error) {
		s := v.Get(name)
		if s == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, true, badParam(name, contracts.CodeInvalidType, "Invalid '%s': expected an integer, got '%s'.", name, s)
		}
		return n, true, nil
	}

	start, ok, perr := intParam("start_time")
	if perr != nil {
		return q, perr
	}
	if !ok {
		return q, badParam("start_time", contracts.CodeMissingParam, "Missing required parameter: 'start_time'.")
	}
	if start < 0 {
		return q, badParam("start_time", contracts.CodeInvalidRequest, "Invalid 'start_time': must not be negative.")
	}
	q.StartTime = start

	end, ok, perr := intParam("end_time")
	if perr != nil {
		return q, perr
	}
	if ok {
		if end <= start {
			return q, badParam("end_time", contracts.CodeInvalidRequest, "Invalid 'end_time': must be after 'start_time'.")
		}
		q.EndTime = end
	} else {
		q.EndTime = max(now.Unix(), start)
		q.OpenEnd = true
	}

	switch bw := v.Get("bucket_width"); bw {
	case "", "1d":
		q.Width = Day
	case "1h":
		q.Width = Hour
	case "1m":
		q.Width = Minute
	default:
		return q, badParam("bucket_width", contracts.CodeInvalidRequest,
			"Invalid 'bucket_width': '%s'. Supported values are %s.", bw, widthsOf(r))
	}
	if r == ReportCosts && q.Width != Day {
		return q, badParam("bucket_width", contracts.CodeInvalidRequest,
			"Invalid 'bucket_width': '%s'. Supported values are %s.", v.Get("bucket_width"), widthsOf(r))
	}

	lim := limitsOf(r, q.Width)
	n, ok, perr := intParam("limit")
	if perr != nil {
		return q, perr
	}
	switch {
	case !ok:
		q.Limit = lim.def
	case n < 1 || n > int64(lim.max):
		return q, badParam("limit", contracts.CodeInvalidRequest,
			"Invalid 'limit': %d. It must be between 1 and %d for bucket_width %s.", n, lim.max, widthName(q.Width))
	default:
		q.Limit = int(n)
	}

	allowed := []string{GroupProjectID, GroupAPIKeyID, GroupModel}
	switch r {
	case ReportCompletions:
		allowed = append(allowed, GroupBatch)
	case ReportCosts:
		allowed = []string{GroupProjectID, GroupLineItem}
	case ReportCodeInterpreterSessions:
		allowed = []string{GroupProjectID, GroupAPIKeyID}
	}
	for _, raw := range list(v, "group_by") {
		for g := range strings.SplitSeq(raw, ",") {
			g = strings.TrimSpace(g)
			if g == "" {
				continue
			}
			if !slices.Contains(allowed, g) {
				return q, badParam("group_by", contracts.CodeInvalidRequest,
					"Invalid 'group_by': '%s'. Supported values are %s.", g, strings.Join(allowed, ", "))
			}
			if !slices.Contains(q.GroupBy, g) {
				q.GroupBy = append(q.GroupBy, g)
			}
		}
	}

	if r == ReportCompletions || r == ReportEmbeddings {
		switch b := v.Get("batch"); b {
		case "":
		case "true", "false":
			b := b == "true"
			q.Batch = &b
		default:
			return q, badParam("batch", contracts.CodeInvalidType, "Invalid 'batch': expected true or false, got '%s'.", b)
		}
	}
	if len(list(v, "user_ids")) > 0 {
		return q, badParam("user_ids", contracts.CodeInvalidRequest,
			"Invalid 'user_ids': aiforge usage has no users; filter by project_ids or api_key_ids.")
	}
	q.ProjectIDs = list(v, "project_ids")
	switch r {
	case ReportCosts:
		q.Models = list(v, "line_items")
	case ReportCodeInterpreterSessions:
		q.APIKeyIDs = list(v, "api_key_ids")
	default:
		q.APIKeyIDs = list(v, "api_key_ids")
		q.Models = list(v, "models")
	}

	q.First = q.Width.Align(q.StartTime)
	if p := v.Get("page"); p != "" {
		first, ok := decodeCursor(p)
		if !ok || first != q.Width.Align(first) || first < q.First || first >= q.EndTime {
			return q, badParam("page", contracts.CodeInvalidRequest,
				"Invalid 'page': use the next_page value of the previous page with the same parameters.")
		}
		q.First = first
	}
	return q, nil
}

func widthsOf(r Report) string {
	if r == ReportCosts {
		return "'1d'"
	}
	return "'1m', '1h', '1d'"
}

func widthName(w Width) string {
	switch w {
	case Minute:
		return "1m"
	case Hour:
		return "1h"
	}
	return "1d"
}

const cursorPrefix = "page_"

func encodeCursor(start int64) string {
	return cursorPrefix + base64.RawURLEncoding.EncodeToString([]byte("aiforge.v1."+strconv.FormatInt(start, 10)))
}

func decodeCursor(s string) (int64, bool) {
	rest, ok := strings.CutPrefix(s, cursorPrefix)
	if !ok {
		return 0, false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return 0, false
	}
	num, ok := strings.CutPrefix(string(b), "aiforge.v1.")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	return n, err == nil
}

// Page is OpenAI's page of time buckets.
type Page[R any] struct {
	Object   string          `json:"object"`
	Data     []TimeBucket[R] `json:"data"`
	HasMore  bool            `json:"has_more"`
	NextPage *string         `json:"next_page"`
}

// TimeBucket is one bucket of a page. Buckets are aligned to UTC multiples
// of the width and clamped to the query's [start_time, end_time).
type TimeBucket[R any] struct {
	Object    string `json:"object"`
	StartTime int64  `json:"start_time"`
	EndTime   int64  `json:"end_time"`
	Results   []R    `json:"results"`
}

// CompletionsResult is organization.usage.completions.result; fields not
// grouped by are null.
type CompletionsResult struct {
	Object            string  `json:"object"`
	InputTokens       int64   `json:"input_tokens"`
	OutputTokens      int64   `json:"output_tokens"`
	InputCachedTokens int64   `json:"input_cached_tokens"`
	InputAudioTokens  int64   `json:"input_audio_tokens"`
	OutputAudioTokens int64   `json:"output_audio_tokens"`
	NumModelRequests  int64   `json:"num_model_requests"`
	ProjectID         *string `json:"project_id"`
	UserID            *string `json:"user_id"`
	APIKeyID          *string `json:"api_key_id"`
	Model             *string `json:"model"`
	Batch             *bool   `json:"batch"`
}

// EmbeddingsResult is organization.usage.embeddings.result.
type EmbeddingsResult struct {
	Object           string  `json:"object"`
	InputTokens      int64   `json:"input_tokens"`
	NumModelRequests int64   `json:"num_model_requests"`
	ProjectID        *string `json:"project_id"`
	UserID           *string `json:"user_id"`
	APIKeyID         *string `json:"api_key_id"`
	Model            *string `json:"model"`
}

// Amount is a sum of money.
type Amount struct {
	Value    float64 `json:"value"`
	Currency string  `json:"currency"`
}

// CostsResult is organization.costs.result; line items are models.
type CostsResult struct {
	Object    string  `json:"object"`
	Amount    Amount  `json:"amount"`
	LineItem  *string `json:"line_item"`
	ProjectID *string `json:"project_id"`
}

// group is one result row before formatting.
type group struct {
	project, key, model string
	batch               bool
	Counters
}

// pageBuckets walks the width-buckets of q's page and calls fn with each
// bucket's clamped bounds and its grouped rows.
func (l *Ledger) pageBuckets(q Query, scope string, fn func(start, end int64, rows []group)) (hasMore bool, next int64) {
	w := int64(q.Width)
	type gk struct {
		project, key, model string
		batch               bool
	}
	sums := map[gk]*Counters{}
	for i, b := 0, q.First; b < q.EndTime; i, b = i+1, b+w {
		if i == q.Limit {
			return true, b
		}
		lo, hi := max(b, q.StartTime), min(b+w, q.EndTime)
		if q.OpenEnd {
			hi = b + w
		}
		clear(sums)
		for _, m := range l.minuteRange(time.Unix(lo, 0), time.Unix(hi, 0)) {
			for d, c := range l.minutes[m] {
				if !q.match(d, scope) {
					continue
				}
				if q.Report == ReportCosts && d.Endpoint == EndpointSandbox && c.CostNano == 0 {
					continue // the code interpreter is a line item only when charged
				}
				var k gk
				if q.grouped(GroupProjectID) {
					k.project = d.Tenant
				}
				if q.grouped(GroupAPIKeyID) {
					k.key = d.KeyID
				}
				if q.grouped(GroupModel) {
					k.model = d.Model
				}
				if q.grouped(GroupLineItem) {
					k.model = LineItem(d)
				}
				if q.grouped(GroupBatch) {
					k.batch = d.Batch
				}
				if s, ok := sums[k]; ok {
					s.Add(*c)
				} else {
					cc := *c
					sums[k] = &cc
				}
			}
		}
		rows := make([]group, 0, len(sums))
		for k, c := range sums {
			rows = append(rows, group{k.project, k.key, k.model, k.batch, *c})
		}
		slices.SortFunc(rows, func(a, b group) int {
			if c := strings.Compare(a.project, b.project); c != 0 {
				return c
			}
			if c := strings.Compare(a.key, b.key); c != 0 {
				return c
			}
			if c := strings.Compare(a.model, b.model); c != 0 {
				return c
			}
			switch {
			case a.batch == b.batch:
				return 0
			case !a.batch:
				return -1
			}
			return 1
		})
		fn(lo, hi, rows)
	}
	return false, 0
}

func (q Query) match(d Dims, scope string) bool {
	if (scope != "" && d.Tenant != scope) || (q.Batch != nil && *q.Batch != d.Batch) {
		return false
	}
	switch q.Report {
	case ReportCompletions:
		if d.Endpoint != events.EndpointChatCompletions && d.Endpoint != events.EndpointCompletions {
			return false
		}
	case ReportEmbeddings:
		if d.Endpoint != events.EndpointEmbeddings {
			return false
		}
	case ReportCodeInterpreterSessions:
		if d.Endpoint != EndpointSandbox {
			return false
		}
	}
	if len(q.ProjectIDs) > 0 && !slices.Contains(q.ProjectIDs, d.Tenant) {
		return false
	}
	if len(q.APIKeyIDs) > 0 && !slices.Contains(q.APIKeyIDs, d.KeyID) {
		return false
	}
	if len(q.Models) > 0 {
		name := d.Model
		if q.Report == ReportCosts {
			name = LineItem(d)
		}
		if !slices.Contains(q.Models, name) {
			return false
		}
	}
	return true
}

func ptrIf(ok bool, s string) *string {
	if !ok {
		return nil
	}
	return &s
}

func buildPage[R any](l *Ledger, q Query, scope string, mk func(group) R) Page[R] {
	p := Page[R]{Object: "page", Data: []TimeBucket[R]{}}
	more, next := l.pageBuckets(q, scope, func(start, end int64, rows []group) {
		tb := TimeBucket[R]{Object: "bucket", StartTime: start, EndTime: end, Results: make([]R, 0, len(rows))}
		for _, g := range rows {
			tb.Results = append(tb.Results, mk(g))
		}
		p.Data = append(p.Data, tb)
	})
	if more {
		p.HasMore = true
		c := encodeCursor(next)
		p.NextPage = &c
	}
	return p
}

// Completions answers GET /v1/organization/usage/completions; scope, when
// not empty, restricts everything to that tenant.
func (l *Ledger) Completions(q Query, scope string) Page[CompletionsResult] {
	return buildPage(l, q, scope, func(g group) CompletionsResult {
		return CompletionsResult{
			Object:            "organization.usage.completions.result",
			InputTokens:       g.InputTokens,
			OutputTokens:      g.OutputTokens,
			InputCachedTokens: g.CachedInputTokens,
			NumModelRequests:  g.Requests,
			ProjectID:         ptrIf(q.grouped(GroupProjectID), g.project),
			APIKeyID:          ptrIf(q.grouped(GroupAPIKeyID), g.key),
			Model:             ptrIf(q.grouped(GroupModel), g.model),
			Batch:             boolIf(q.grouped(GroupBatch), g.batch),
		}
	})
}

func boolIf(ok, b bool) *bool {
	if !ok {
		return nil
	}
	return &b
}

// Embeddings answers GET /v1/organization/usage/embeddings.
func (l *Ledger) Embeddings(q Query, scope string) Page[EmbeddingsResult] {
	return buildPage(l, q, scope, func(g group) EmbeddingsResult {
		return EmbeddingsResult{
			Object:           "organization.usage.embeddings.result",
			InputTokens:      g.InputTokens,
			NumModelRequests: g.Requests,
			ProjectID:        ptrIf(q.grouped(GroupProjectID), g.project),
			APIKeyID:         ptrIf(q.grouped(GroupAPIKeyID), g.key),
			Model:            ptrIf(q.grouped(GroupModel), g.model),
		}
	})
}

// Costs answers GET /v1/organization/costs.
func (l *Ledger) Costs(q Query, scope string) Page[CostsResult] {
	return buildPage(l, q, scope, func(g group) CostsResult {
		return CostsResult{
			Object:    "organization.costs.result",
			Amount:    Amount{Value: float64(g.CostNano) / 1e9, Currency: "usd"},
			LineItem:  ptrIf(q.grouped(GroupLineItem), g.model),
			ProjectID: ptrIf(q.grouped(GroupProjectID), g.project),
		}
	})
}

// CodeInterpreterSessionsResult is
// organization.usage.code_interpreter_sessions.result: NumSessions is the
// containers that ended in the bucket. The rest are aiforge's: api_key_id
// (null unless grouped by), the execs that started in the bucket (how many,
// how many failed, their wall and CPU seconds and gigabyte-seconds: memory
// limit × wall time) and the sessions' own seconds and gigabyte-seconds.
type CodeInterpreterSessionsResult struct {
	Object           string  `json:"object"`
	NumSessions      int64   `json:"num_sessions"`
	ProjectID        *string `json:"project_id"`
	APIKeyID         *string `json:"api_key_id"`
	NumExecs         int64   `json:"num_execs"`
	NumExecErrors    int64   `json:"num_exec_errors"`
	WallSeconds      float64 `json:"wall_seconds"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	GBSeconds        float64 `json:"gb_seconds"`
	SessionSeconds   float64 `json:"session_seconds"`
	SessionGBSeconds float64 `json:"session_gb_seconds"`
}

// CodeInterpreterSessions answers GET
// /v1/organization/usage/code_interpreter_sessions.
func (l *Ledger) CodeInterpreterSessions(q Query, scope string) Page[CodeInterpreterSessionsResult] {
	return buildPage(l, q, scope, func(g group) CodeInterpreterSessionsResult {
		return CodeInterpreterSessionsResult{
			Object:           "organization.usage.code_interpreter_sessions.result",
			NumSessions:      g.SandboxSessions,
			ProjectID:        ptrIf(q.grouped(GroupProjectID), g.project),
			APIKeyID:         ptrIf(q.grouped(GroupAPIKeyID), g.key),
			NumExecs:         g.SandboxExecs,
			NumExecErrors:    g.SandboxErrors,
			WallSeconds:      float64(g.SandboxWallMS) / 1e3,
			CPUSeconds:       float64(g.SandboxCPUMS) / 1e3,
			GBSeconds:        float64(g.SandboxMicroGBSeconds) / 1e6,
			SessionSeconds:   float64(g.SandboxSessionMS) / 1e3,
			SessionGBSeconds: float64(g.SandboxSessionMicroGBSeconds) / 1e6,
		}
	})
}

// ReportJSON answers q as JSON: the OpenAI page body.
func (l *Ledger) ReportJSON(q Query, scope string) ([]byte, error) {
	switch q.Report {
	case ReportCompletions:
		return json.Marshal(l.Completions(q, scope))
	case ReportEmbeddings:
		return json.Marshal(l.Embeddings(q, scope))
	case ReportCosts:
		return json.Marshal(l.Costs(q, scope))
	case ReportCodeInterpreterSessions:
		return json.Marshal(l.CodeInterpreterSessions(q, scope))
	}
	return nil, fmt.Errorf("ledger: unknown report %q", q.Report)
}
