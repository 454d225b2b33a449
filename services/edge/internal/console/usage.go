package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/spend"
)

// The usage page reads the usage service's reports through the edge's own
// report endpoints: completions by day, model and key (tokens, requests),
// costs by day and line item, and, for the cost of each key (which the
// OpenAI-shaped costs report does not group by), the ledger's buckets of
// the same window.

// maxUsageDays bounds the window (the reports' 1d limit is 31 buckets).
const maxUsageDays = 31

// series is one named row of values of a chart.
type series struct {
	Name   string    `json:"name"`
	Values []float64 `json:"values"`
}

// chart is what console.js draws: bars per label, one per series.
type chart struct {
	Labels []string `json:"labels"`
	Series []series `json:"series"`
}

// usageRow is a total for one day, model, line item or key.
type usageRow struct {
	Label        string
	Sub          string
	Requests     int64
	InputTokens  int64
	OutputTokens int64
	CostUSD      float64
	HasCost      bool
}

type usageData struct {
	Days       int
	DayChoices []int
	From       string
	PerDay     []usageRow
	PerModel   []usageRow
	PerLine    []usageRow
	PerKey     []usageRow
	// KeyCostError says why the keys' costs are missing.
	KeyCostError string
	TotalCost    float64
	Charts       map[string]chart
}

type completionsPage struct {
	Data []struct {
		StartTime int64 `json:"start_time"`
		Results   []struct {
			InputTokens  int64   `json:"input_tokens"`
			OutputTokens int64   `json:"output_tokens"`
			Requests     int64   `json:"num_model_requests"`
			APIKeyID     *string `json:"api_key_id"`
			Model        *string `json:"model"`
		} `json:"results"`
	} `json:"data"`
}

type costsPage struct {
	Data []struct {
		StartTime int64 `json:"start_time"`
		Results   []struct {
			Amount struct {
				Value float64 `json:"value"`
			} `json:"amount"`
			LineItem *string `json:"line_item"`
		} `json:"results"`
	} `json:"data"`
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func dayOf(unix int64) string { return time.Unix(unix, 0).UTC().Format("2006-01-02") }

func (s *Service) usagePage(r *http.Request) (string, any, error) {
	days := 7
	if v := r.URL.Query().Get("days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxUsageDays {
			return "usage", usageData{Days: days, DayChoices: []int{1, 7, 14, 31}}, &apiError{Status: 400, Message: fmt.Sprintf("'days' must be from 1 to %d.", maxUsageDays)}
		}
		days = n
	}
	now := s.d.Now().UTC()
	start := now.Truncate(24*time.Hour).AddDate(0, 0, -(days - 1))
	d := usageData{Days: days, DayChoices: []int{1, 7, 14, 31}, From: start.Format("2006-01-02"), Charts: map[string]chart{}}
	ctx, cancel := pageCtx(r)
	defer cancel()

	// One row per day of the window, so an idle day shows as zero.
	dayIndex := map[string]int{}
	for i := range days {
		day := start.AddDate(0, 0, i).Format("2006-01-02")
		dayIndex[day] = i
		d.PerDay = append(d.PerDay, usageRow{Label: day, HasCost: true})
	}
	var errs []error
	q := fmt.Sprintf("?start_time=%d&bucket_width=1d&limit=%d", start.Unix(), days)
	var comp completionsPage
	if err := s.call(ctx, http.MethodGet, "/v1/organization/usage/completions"+q+"&group_by=model,api_key_id", nil, &comp); err != nil {
		errs = append(errs, err)
	}
	models, keys := map[string]*usageRow{}, map[string]*usageRow{}
	row := func(m map[string]*usageRow, label string) *usageRow {
		if m[label] == nil {
			m[label] = &usageRow{Label: label}
		}
		return m[label]
	}
	for _, b := range comp.Data {
		i, ok := dayIndex[dayOf(b.StartTime)]
		for _, res := range b.Results {
			for _, u := range []*usageRow{row(models, str(res.Model)), row(keys, str(res.APIKeyID))} {
				u.Requests += res.Requests
				u.InputTokens += res.InputTokens
				u.OutputTokens += res.OutputTokens
			}
			if ok {
				d.PerDay[i].Requests += res.Requests
				d.PerDay[i].InputTokens += res.InputTokens
				d.PerDay[i].OutputTokens += res.OutputTokens
			}
		}
	}
	var costs costsPage
	if err := s.call(ctx, http.MethodGet, "/v1/organization/costs"+q+"&group_by=line_item", nil, &costs); err != nil {
		errs = append(errs, err)
	}
	lines := map[string]*usageRow{}
	for _, b := range costs.Data {
		i, ok := dayIndex[dayOf(b.StartTime)]
		for _, res := range b.Results {
			l := row(lines, str(res.LineItem))
			l.CostUSD += res.Amount.Value
			l.HasCost = true
			d.TotalCost += res.Amount.Value
			if ok {
				d.PerDay[i].CostUSD += res.Amount.Value
			}
		}
	}
	// A model's cost is its line item's (real-time and batch together).
	for _, l := range lines {
		name := l.Label
		if n := len(name) - len(ledger.BatchLineItemSuffix); n > 0 && name[n:] == ledger.BatchLineItemSuffix {
			name = name[:n]
		}
		if m := models[name]; m != nil {
			m.CostUSD += l.CostUSD
			m.HasCost = true
		}
	}
	if lc, err := s.ledgerCosts(ctx, start, now); err != nil {
		d.KeyCostError = messageOf(err)
	} else {
		for id, usd := range lc.keys {
			k := row(keys, id)
			k.CostUSD += usd
			k.HasCost = true
		}
	}
	names := s.keyNames(r)
	for id, k := range keys {
		if n, ok := names[id]; ok {
			k.Sub = n
		}
	}
	d.PerModel = sorted(models)
	d.PerLine = sorted(lines)
	d.PerKey = sorted(keys)

	labels := make([]string, len(d.PerDay))
	in, out, cost := make([]float64, len(d.PerDay)), make([]float64, len(d.PerDay)), make([]float64, len(d.PerDay))
	for i, u := range d.PerDay {
		labels[i], in[i], out[i], cost[i] = u.Label[5:], float64(u.InputTokens), float64(u.OutputTokens), u.CostUSD
	}
	d.Charts["daily_tokens"] = chart{Labels: labels, Series: []series{{"input tokens", in}, {"output tokens", out}}}
	d.Charts["daily_cost"] = chart{Labels: labels, Series: []series{{"cost (USD)", cost}}}
	d.Charts["model_tokens"] = rowsChart(d.PerModel, "tokens", func(u usageRow) float64 { return float64(u.InputTokens + u.OutputTokens) })
	d.Charts["line_cost"] = rowsChart(d.PerLine, "cost (USD)", func(u usageRow) float64 { return u.CostUSD })
	d.Charts["key_tokens"] = rowsChart(d.PerKey, "tokens", func(u usageRow) float64 { return float64(u.InputTokens + u.OutputTokens) })
	d.Charts["key_cost"] = rowsChart(d.PerKey, "cost (USD)", func(u usageRow) float64 { return u.CostUSD })
	return "usage", d, errors.Join(errs...)
}

// costs are the costs of keys and tenants over a window.
type costs struct{ keys, tenants map[string]float64 }

// ledgerCosts sums the ledger's minute buckets of [from, to] by key and by
// tenant: the spend the OpenAI-shaped costs report does not group by key.
// The usage service refuses a window whose buckets do not fit in one bus
// message (the error says so).
func (s *Service) ledgerCosts(ctx context.Context, from, to time.Time) (costs, error) {
	var reply struct {
		Data []ledger.Bucket `json:"data"`
	}
	if err := s.call(ctx, http.MethodGet, fmt.Sprintf("/admin/v1/usage/ledger?from=%d&to=%d", from.Unix(), to.Unix()+60), nil, &reply); err != nil {
		return costs{}, err
	}
	c := costs{keys: map[string]float64{}, tenants: map[string]float64{}}
	for _, b := range reply.Data {
		usd := spend.NanoToUSD(b.CostNano)
		c.tenants[b.Tenant] += usd
		if b.KeyID != "" {
			c.keys[b.KeyID] += usd
		}
	}
	return c, nil
}

// messageOf is an error as the page shows it.
func messageOf(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Message
	}
	return err.Error()
}

// keyNames maps key ids to "name (tenant)" for the labels; a failure
// leaves the ids alone.
func (s *Service) keyNames(r *http.Request) map[string]string {
	ks, err := list[keyInfo](r.Context(), s, "/admin/v1/keys")
	out := map[string]string{}
	if err != nil {
		return out
	}
	for _, k := range ks {
		if k.Name != "" {
			out[k.ID] = k.Name + " (" + k.Tenant + ")"
		} else {
			out[k.ID] = k.Tenant
		}
	}
	return out
}

// maxRows bounds the rows of a per-model, per-line or per-key table.
const maxRows = 50

// sorted lists rows by cost, then tokens, largest first.
func sorted(m map[string]*usageRow) []usageRow {
	out := make([]usageRow, 0, len(m))
	for _, u := range m {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b usageRow) int {
		if c := cmp.Compare(b.CostUSD, a.CostUSD); c != 0 {
			return c
		}
		if c := cmp.Compare(b.InputTokens+b.OutputTokens, a.InputTokens+a.OutputTokens); c != 0 {
			return c
		}
		return cmp.Compare(a.Label, b.Label)
	})
	if len(out) > maxRows {
		out = out[:maxRows]
	}
	return out
}

func rowsChart(rows []usageRow, name string, v func(usageRow) float64) chart {
	c := chart{Series: []series{{Name: name}}}
	for _, u := range rows {
		label := u.Label
		if u.Sub != "" {
			label = u.Sub
		}
		if label == "" {
			label = "(none)"
		}
		c.Labels = append(c.Labels, label)
		c.Series[0].Values = append(c.Series[0].Values, v(u))
	}
	return c
}
