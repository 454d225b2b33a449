package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/registry"
)

// The admin API's answers, as the console reads them.

type budgetInfo struct {
	Period           string   `json:"period"`
	LimitUSD         *float64 `json:"limit_usd"`
	SoftLimitUSD     *float64 `json:"soft_limit_usd"`
	SpentUSD         float64  `json:"spent_usd"`
	ReservedUSD      float64  `json:"reserved_usd"`
	RequestsInFlight int      `json:"requests_in_flight"`
	RemainingUSD     *float64 `json:"remaining_usd"`
}

type tenantInfo struct {
	registry.Tenant
	Budget *budgetInfo `json:"budget"`
	Keys   []keyInfo   `json:"-"`
	// Spent is the tenant's cost over the spend window (the ledger's).
	Spent float64 `json:"-"`
}

// Budgeted reports whether a budget entry is kept (a hard or soft budget).
func (b *budgetInfo) Budgeted() bool { return b != nil && (b.LimitUSD != nil || b.SoftLimitUSD != nil) }

type keyInfo struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name"`
	Models    []string  `json:"models"`
	CreatedAt time.Time `json:"created_at"`
	registry.Limits
	Budget *budgetInfo `json:"budget"`
	Spent  float64     `json:"-"`
}

type modelStatus struct {
	State    string                 `json:"state"`
	Servable int                    `json:"servable_replicas"`
	Replicas []registry.WorkerState `json:"replicas"`
}

type modelInfo struct {
	Name          string            `json:"name"`
	Engine        registry.Engine   `json:"engine"`
	Engines       []registry.Engine `json:"engines"`
	Routing       string            `json:"routing"`
	Fallbacks     []string          `json:"fallbacks"`
	ContextWindow int               `json:"context_window"`
	CreatedAt     time.Time         `json:"created_at"`
	Status        *modelStatus      `json:"status"`
}

// EngineURLs are the model's engines.
func (m modelInfo) EngineURLs() []string {
	var out []string
	for _, e := range append([]registry.Engine{m.Engine}, m.Engines...) {
		if e.BaseURL != "" {
			out = append(out, e.BaseURL+" ("+e.Model+")")
		}
	}
	return slices.Compact(out)
}

type modelsData struct {
	Models  []modelInfo
	Catalog []catalog.Entry
}

func (s *Service) modelsPage(r *http.Request) (string, any, error) {
	ctx, cancel := pageCtx(r)
	defer cancel()
	var d modelsData
	var errs []error
	var err error
	if d.Models, err = list[modelInfo](ctx, s, "/admin/v1/models"); err != nil {
		errs = append(errs, err)
	}
	if d.Catalog, err = list[catalog.Entry](ctx, s, "/admin/v1/catalog"); err != nil {
		errs = append(errs, err)
	}
	return "models", d, errors.Join(errs...)
}

type tenantsData struct {
	Tenants []tenantInfo
	Periods []string
	// SpendDays is the window of the spend columns; SpendError says why
	// they are missing.
	SpendDays  int
	SpendError string
}

// spendDays is the window of the tenants page's spend columns.
const spendDays = 30

func (s *Service) tenantsData(r *http.Request) (tenantsData, error) {
	ctx, cancel := pageCtx(r)
	defer cancel()
	ts, err := list[tenantInfo](ctx, s, "/admin/v1/tenants")
	if err != nil {
		return tenantsData{}, err
	}
	ks, err := list[keyInfo](ctx, s, "/admin/v1/keys")
	if err != nil {
		return tenantsData{}, err
	}
	byTenant := map[string]int{}
	for i, t := range ts {
		byTenant[t.ID] = i
	}
	slices.SortFunc(ks, func(a, b keyInfo) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for _, k := range ks {
		if i, ok := byTenant[k.Tenant]; ok {
			ts[i].Keys = append(ts[i].Keys, k)
		}
	}
	d := tenantsData{Tenants: ts, Periods: []string{"total", "daily", "weekly", "monthly"}, SpendDays: spendDays}
	now := s.d.Now()
	c, err := s.ledgerCosts(ctx, now.Add(-spendDays*24*time.Hour), now)
	if err != nil {
		d.SpendError = messageOf(err)
		return d, nil
	}
	for i := range d.Tenants {
		d.Tenants[i].Spent = c.tenants[d.Tenants[i].ID]
		for j := range d.Tenants[i].Keys {
			d.Tenants[i].Keys[j].Spent = c.keys[d.Tenants[i].Keys[j].ID]
		}
	}
	return d, nil
}

func (s *Service) tenantsPage(r *http.Request) (string, any, error) {
	d, err := s.tenantsData(r)
	return "tenants", d, err
}

func (s *Service) createTenant(w http.ResponseWriter, r *http.Request, _ session) {
	id := strings.TrimSpace(r.PostForm.Get("id"))
	err := s.call(r.Context(), http.MethodPost, "/admin/v1/tenants", map[string]string{"id": id}, nil)
	if err == nil {
		s.log.Info("console: tenant created", "tenant", id)
	}
	back(w, r, "/console/tenants", "Tenant "+id+" created.", err)
}

func (s *Service) createKey(w http.ResponseWriter, r *http.Request, sess session) {
	req := map[string]any{"tenant": strings.TrimSpace(r.PostForm.Get("tenant")), "name": strings.TrimSpace(r.PostForm.Get("name"))}
	var models []string
	for m := range strings.SplitSeq(r.PostForm.Get("models"), ",") {
		if m = strings.TrimSpace(m); m != "" {
			models = append(models, m)
		}
	}
	if len(models) > 0 {
		req["models"] = models
	}
	var k struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	if err := s.call(r.Context(), http.MethodPost, "/admin/v1/keys", req, &k); err != nil {
		back(w, r, "/console/tenants", "", err)
		return
	}
	s.log.Info("console: api key created", "key_id", k.ID)
	// The secret is shown once, in this answer: never in a URL (a redirect
	// would put it in the history), never stored.
	d, err := s.tenantsData(r)
	v := view{Title: "tenants", Nav: "tenants", CSRF: sess.CSRF, Data: d, Secret: k.Key,
		Notice: "Key " + k.ID + " created. Copy its secret now: it is not shown again."}
	if err != nil {
		v.Error = s.shown(err, "tenants")
	}
	s.render(w, http.StatusOK, "tenants", v)
}

func (s *Service) revokeKey(w http.ResponseWriter, r *http.Request, _ session) {
	id := r.PathValue("id")
	err := s.call(r.Context(), http.MethodDelete, "/admin/v1/keys/"+url.PathEscape(id), nil, nil)
	if err == nil {
		s.log.Info("console: api key revoked", "key_id", id)
	}
	back(w, r, "/console/tenants", "Key "+id+" revoked.", err)
}

// limitsPatch reads the limit fields of a form: an empty field is left as
// it is.
func limitsPatch(f url.Values, rates bool) (map[string]any, error) {
	p := map[string]any{}
	ints := []string{"max_concurrent_requests"}
	if rates {
		ints = append(ints, "rpm", "tpm")
	}
	for _, name := range ints {
		if v := strings.TrimSpace(f.Get(name)); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, &apiError{Status: 400, Message: fmt.Sprintf("'%s' must be a whole number, 0 or more.", name)}
			}
			p[name] = n
		}
	}
	for _, name := range []string{"max_budget_usd", "soft_budget_usd"} {
		if v := strings.TrimSpace(f.Get(name)); v != "" {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 {
				return nil, &apiError{Status: 400, Message: fmt.Sprintf("'%s' must be a number of dollars, 0 or more.", name)}
			}
			p[name] = x
		}
	}
	if v := strings.TrimSpace(f.Get("budget_period")); v != "" {
		p["budget_period"] = v
	}
	if len(p) == 0 {
		return nil, &apiError{Status: 400, Message: "Nothing to change: fill in at least one limit."}
	}
	return p, nil
}

func (s *Service) keyLimits(w http.ResponseWriter, r *http.Request, _ session) {
	id := r.PathValue("id")
	p, err := limitsPatch(r.PostForm, true)
	if err == nil {
		err = s.call(r.Context(), http.MethodPatch, "/admin/v1/keys/"+url.PathEscape(id), p, nil)
	}
	back(w, r, "/console/tenants", "Limits of key "+id+" saved.", err)
}

func (s *Service) tenantLimits(w http.ResponseWriter, r *http.Request, _ session) {
	id := r.PathValue("id")
	p, err := limitsPatch(r.PostForm, false)
	if err == nil {
		err = s.call(r.Context(), http.MethodPatch, "/admin/v1/tenants/"+url.PathEscape(id), p, nil)
	}
	back(w, r, "/console/tenants", "Limits of tenant "+id+" saved.", err)
}

// Formatting for the templates.

func formatUSD(v float64) string {
	if v != 0 && v < 0.01 && v > -0.01 {
		return fmt.Sprintf("$%.6f", v)
	}
	return fmt.Sprintf("$%.2f", v)
}

func formatUnix(v int64) string {
	if v == 0 {
		return ""
	}
	return time.Unix(v, 0).UTC().Format("2006-01-02 15:04:05Z")
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func derefF(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func pct(n, d int64) int64 {
	if d <= 0 {
		return 0
	}
	return n * 100 / d
}

// bounded cuts s to n bytes for showing.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}
