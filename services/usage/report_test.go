package usage

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/query"
)

// Reports are parsed with the official OpenAI Go SDK's response types and
// their query strings are built with the SDK's params (which write list
// parameters as name[]=v).
func TestReportsOverTheBus(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	pubs := h.mixed(3000)
	h.publish(pubs)
	r := h.start(Config{}, nil)
	waitFolded(t, r.svc, h.lastSeq())

	start, end := h.base.Unix(), h.base.Add(48*time.Hour).Unix()
	var all []ledger.Bucket
	r.svc.Ledger(func(l *ledger.Ledger) { all = l.Buckets(time.Time{}, time.Time{}, "") })
	total := func(scope string, endpoints ...string) ledger.Counters {
		var c ledger.Counters
		for _, b := range all {
			if (scope == "" || b.Tenant == scope) && (len(endpoints) == 0 || contains(endpoints, b.Endpoint)) {
				c.Add(b.Counters)
			}
		}
		return c
	}
	wantComp := map[string]ledger.Counters{}
	wantEmb := map[string]ledger.Counters{}
	wantCost := map[string]ledger.Counters{}
	for _, scope := range []string{"", "alpha"} {
		wantComp[scope] = total(scope, events.EndpointChatCompletions, events.EndpointCompletions)
		wantEmb[scope] = total(scope, events.EndpointEmbeddings)
		wantCost[scope] = total(scope)
	}

	widths := map[string]int64{"1d": 86400, "1h": 3600, "1m": 60}
	groupings := [][]string{nil, {"model"}, {"api_key_id"}, {"project_id"}, {"project_id", "model"}, {"project_id", "api_key_id", "model"}}
	for _, scope := range []string{"", "alpha"} {
		for _, gb := range groupings {
			for _, bw := range []string{"1d", "1h", "1m"} {
				name := fmt.Sprintf("scope=%q group_by=%v bucket_width=%s", scope, gb, bw)
				var comp ledger.Counters
				var emb ledger.Counters
				starts := map[int64]int{}
				page := ""
				pages := 0
				for {
					p := openai.AdminOrganizationUsageCompletionsParams{StartTime: start, EndTime: openai.Int(end), GroupBy: gb,
						BucketWidth: openai.AdminOrganizationUsageCompletionsParamsBucketWidth(bw)}
					if bw == "1m" {
						p.Limit = openai.Int(1000) // 2880 minutes: three pages
					}
					if page != "" {
						p.Page = openai.String(page)
					}
					v, err := p.URLQuery()
					if err != nil {
						t.Fatal(err)
					}
					raw := h.query(query.UsageRequest{Op: query.OpCompletions, Scope: scope, Query: v.Encode()})
					var res openai.AdminOrganizationUsageCompletionsResponse
					if err := json.Unmarshal(raw, &res); err != nil {
						t.Fatalf("%s: %v: %s", name, err, raw)
					}
					if res.Object != "page" {
						t.Fatalf("%s: %s", name, raw)
					}
					pages++
					for _, b := range res.Data {
						starts[b.StartTime]++
						if b.EndTime-b.StartTime != widths[bw] || b.Object != "bucket" {
							t.Fatalf("%s: bucket %d-%d", name, b.StartTime, b.EndTime)
						}
						for _, u := range b.Results {
							c := u.AsOrganizationUsageCompletionsResult()
							if c.Object != "organization.usage.completions.result" {
								t.Fatalf("%s: result %s", name, u.RawJSON())
							}
							comp.Requests += c.NumModelRequests
							comp.InputTokens += c.InputTokens
							comp.OutputTokens += c.OutputTokens
							comp.CachedInputTokens += c.InputCachedTokens
							checkNull(t, name, "project_id", c.JSON.ProjectID.Raw(), contains(gb, "project_id"))
							checkNull(t, name, "api_key_id", c.JSON.APIKeyID.Raw(), contains(gb, "api_key_id"))
							checkNull(t, name, "model", c.JSON.Model.Raw(), contains(gb, "model"))
							checkNull(t, name, "user_id", c.JSON.UserID.Raw(), false)
							checkNull(t, name, "batch", c.JSON.Batch.Raw(), false)
							if scope != "" && contains(gb, "project_id") && c.ProjectID != scope {
								t.Fatalf("%s: scope %s sees project %s", name, scope, c.ProjectID)
							}
						}
					}
					// embeddings, same parameters
					ep := openai.AdminOrganizationUsageEmbeddingsParams{StartTime: start, EndTime: openai.Int(end), GroupBy: gb,
						BucketWidth: openai.AdminOrganizationUsageEmbeddingsParamsBucketWidth(bw), Limit: p.Limit, Page: p.Page}
					ev, _ := ep.URLQuery()
					raw = h.query(query.UsageRequest{Op: query.OpEmbeddings, Scope: scope, Query: ev.Encode()})
					var er openai.AdminOrganizationUsageEmbeddingsResponse
					if err := json.Unmarshal(raw, &er); err != nil {
						t.Fatal(err)
					}
					for _, b := range er.Data {
						for _, u := range b.Results {
							e := u.AsOrganizationUsageEmbeddingsResult()
							if e.Object != "organization.usage.embeddings.result" {
								t.Fatalf("%s: %s", name, u.RawJSON())
							}
							emb.Requests += e.NumModelRequests
							emb.InputTokens += e.InputTokens
						}
					}
					if !res.HasMore {
						if res.JSON.NextPage.Raw() != "null" {
							t.Fatalf("%s: last page next_page %s", name, res.JSON.NextPage.Raw())
						}
						break
					}
					page = res.NextPage
				}
				wantBuckets := int((end - start) / widths[bw])
				if len(starts) != wantBuckets {
					t.Fatalf("%s: %d distinct buckets over %d pages, want %d", name, len(starts), pages, wantBuckets)
				}
				for s, n := range starts {
					if n != 1 {
						t.Fatalf("%s: bucket %d listed %d times", name, s, n)
					}
				}
				w := wantComp[scope]
				if comp.Requests != w.Requests || comp.InputTokens != w.InputTokens || comp.OutputTokens != w.OutputTokens ||
					comp.CachedInputTokens != w.CachedInputTokens {
					t.Fatalf("%s: completions %+v, want %+v", name, comp, w)
				}
				if emb.Requests != wantEmb[scope].Requests || emb.InputTokens != wantEmb[scope].InputTokens {
					t.Fatalf("%s: embeddings %+v, want %+v", name, emb, wantEmb[scope])
				}
			}
		}
		for _, gb := range [][]string{nil, {"line_item"}, {"project_id"}, {"project_id", "line_item"}} {
			p := openai.AdminOrganizationUsageCostsParams{StartTime: start, EndTime: openai.Int(end), GroupBy: gb, Limit: openai.Int(1)}
			var usd float64
			days := 0
			for {
				v, _ := p.URLQuery()
				raw := h.query(query.UsageRequest{Op: query.OpCosts, Scope: scope, Query: v.Encode()})
				var res openai.AdminOrganizationUsageCostsResponse
				if err := json.Unmarshal(raw, &res); err != nil {
					t.Fatal(err)
				}
				for _, b := range res.Data {
					days++
					for _, u := range b.Results {
						c := u.AsOrganizationCostsResult()
						if c.Object != "organization.costs.result" || c.Amount.Currency != "usd" {
							t.Fatalf("costs result %s", u.RawJSON())
						}
						checkNull(t, "costs", "line_item", c.JSON.LineItem.Raw(), contains(gb, "line_item"))
						checkNull(t, "costs", "project_id", c.JSON.ProjectID.Raw(), contains(gb, "project_id"))
						usd += c.Amount.Value
					}
				}
				if !res.HasMore {
					break
				}
				p.Page = openai.String(res.NextPage)
			}
			if days != 2 || int64(math.Round(usd*1e9)) != wantCost[scope].CostNano {
				t.Fatalf("costs scope=%q group_by=%v: %d days, %.9f USD, want 2 days, %d nano", scope, gb, days, usd, wantCost[scope].CostNano)
			}
		}
	}

	// Bad parameters: OpenAI-shaped 400s naming the parameter.
	for _, c := range []struct{ op, query, param string }{
		{query.OpCompletions, "bucket_width=1d", "start_time"},
		{query.OpCompletions, fmt.Sprintf("start_time=%d&bucket_width=2h", start), "bucket_width"},
		{query.OpCompletions, fmt.Sprintf("start_time=%d&limit=32", start), "limit"},
		{query.OpEmbeddings, fmt.Sprintf("start_time=%d&bucket_width=1m&limit=1441", start), "limit"},
		{query.OpCosts, fmt.Sprintf("start_time=%d&bucket_width=1h", start), "bucket_width"},
		{query.OpCompletions, fmt.Sprintf("start_time=%d&group_by=user_id", start), "group_by"},
		{query.OpCompletions, fmt.Sprintf("start_time=%d&page=bogus", start), "page"},
	} {
		raw := h.query(query.UsageRequest{Op: c.op, Query: c.query})
		var er query.ErrorReply
		if err := json.Unmarshal(raw, &er); err != nil || er.Status != 400 || er.Error.Param == nil || *er.Error.Param != c.param ||
			er.Error.Type != "invalid_request_error" || er.Error.Message == "" || er.Error.Code == nil {
			t.Errorf("%s?%s: %s", c.op, c.query, raw)
		}
		if !strings.Contains(string(raw), `"error":{"message":`) {
			t.Errorf("not OpenAI-shaped: %s", raw)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func checkNull(t *testing.T, name, field, raw string, grouped bool) {
	t.Helper()
	if raw == "" {
		t.Fatalf("%s: %s omitted; OpenAI writes it (null when not grouped)", name, field)
	}
	if (raw == "null") == grouped {
		t.Fatalf("%s: %s = %s (grouped: %v)", name, field, raw, grouped)
	}
}
