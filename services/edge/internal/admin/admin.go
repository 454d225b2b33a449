// Package admin serves the admin API of the registry: tenants, API keys,
// model bindings and prices. Every write is also noted in the directory,
// so this replica sees it before its watch does.
package admin

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/pkg/spend"
	"github.com/aiforge/aiforge/pkg/tenantbucket"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
	"github.com/aiforge/aiforge/services/edge/internal/models"
	"github.com/aiforge/aiforge/services/edge/internal/semcache"
)

// Deps are what the admin API needs.
type Deps struct {
	Store     *registry.Store
	Directory *directory.View
	AdminKey  string
	Logger    *slog.Logger
	// SecretsKey is the workers' public key: an engine api_key given to
	// the API is sealed to it before it is stored. Nil: a binding with an
	// api_key is refused (the registry never stores one in clear).
	SecretsKey *sealed.PublicKey
	// Budgets is the spend bucket (events.BucketBudgets), read to show
	// spend, reservations and what is left; nil shows none.
	Budgets jetstream.KeyValue
	// Now is the clock of the budget views; default time.Now.
	Now func() time.Time
	// BatchQueues is the batch scheduler's configuration
	// (events.BucketBatchQueues); nil: its API answers 503.
	BatchQueues jetstream.KeyValue
	// NC asks the batch service for the scheduler's state
	// (events.BatchQuery), waiting up to BatchQueryTimeout (default 5s).
	NC                *nats.Conn
	BatchQueryTimeout time.Duration
	// Cache is the semantic cache, purged by DELETE /admin/v1/cache; nil
	// answers 503.
	Cache *semcache.Cache
	// TenantBuckets holds the tenants' model buckets
	// (/admin/v1/tenants/{id}/model-bucket); nil answers 503.
	TenantBuckets *tenantbucket.Store
}

// Service is the registry admin API.
type Service struct {
	d     Deps
	store *registry.Store
	log   *slog.Logger
}

// New builds the admin API.
func New(d Deps) *Service {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.BatchQueryTimeout <= 0 {
		d.BatchQueryTimeout = 5 * time.Second
	}
	return &Service{d: d, store: d.Store, log: d.Logger}
}

// budgetView is the spend of a key or tenant in the current budget period.
type budgetView struct {
	Period   string     `json:"period"`
	PeriodID string     `json:"period_id"`
	ResetsAt *time.Time `json:"resets_at,omitempty"`
	// LimitUSD is the hard budget; absent when there is none.
	LimitUSD     *float64 `json:"limit_usd,omitempty"`
	SoftLimitUSD *float64 `json:"soft_limit_usd,omitempty"`
	SpentUSD     float64  `json:"spent_usd"`
	// ReservedUSD is set aside for the requests in flight (live holds:
	// expired ones are left out).
	ReservedUSD      float64 `json:"reserved_usd"`
	RequestsInFlight int     `json:"requests_in_flight"`
	// RemainingUSD is what new requests can reserve: limit - spent -
	// reserved, at least 0; absent without a hard budget.
	RemainingUSD *float64 `json:"remaining_usd,omitempty"`
}

// budget reads the budget entry of limits l; nil when the entry cannot be
// read (the view is then shown without it).
func (s *Service) budget(r *http.Request, l registry.Limits, entryOf func(periodID string) string) *budgetView {
	if s.d.Budgets == nil {
		return nil
	}
	now := s.d.Now()
	pid := spend.PeriodID(l.Period(), now)
	e, err := spend.Get(r.Context(), s.d.Budgets, entryOf(pid))
	if err != nil {
		s.log.Warn("budget entry unreadable", "entry", entryOf(pid), "err", err)
		return nil
	}
	e = e.Live(now)
	v := &budgetView{Period: l.Period(), PeriodID: pid, SpentUSD: spend.NanoToUSD(e.SpentNano),
		ReservedUSD: spend.NanoToUSD(e.ReservedNano), RequestsInFlight: len(e.Holds)}
	if end := spend.PeriodEnd(l.Period(), now); !end.IsZero() {
		v.ResetsAt = &end
	}
	if l.MaxBudgetUSD > 0 {
		limit := l.MaxBudgetUSD
		left := spend.NanoToUSD(e.RemainingNano(spend.USDToNano(limit)))
		v.LimitUSD, v.RemainingUSD = &limit, &left
	}
	if l.SoftBudgetUSD > 0 {
		soft := l.SoftBudgetUSD
		v.SoftLimitUSD = &soft
	}
	return v
}

func (s *Service) keyBudget(r *http.Request, k registry.Key) *budgetView {
	return s.budget(r, k.Limits, func(pid string) string { return spend.KeyEntry(k.ID, pid) })
}

// tenantView is a tenant with its spend; its webhook is shown without the
// secret.
type tenantView struct {
	registry.Tenant
	Webhook *webhookView `json:"webhook,omitempty"`
	Budget  *budgetView  `json:"budget,omitempty"`
}

func (s *Service) viewTenant(r *http.Request, t registry.Tenant) tenantView {
	return tenantView{Tenant: t, Webhook: viewWebhook(t.ID, t.Webhook), Budget: s.budget(r, t.Limits, func(pid string) string { return spend.TenantEntry(t.ID, pid) })}
}

// Routes mounts the admin API; it answers in OpenAI's error shape like the
// rest of the edge.
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /admin/v1/tenants", s.admin(s.createTenant))
	mux.HandleFunc("GET /admin/v1/tenants", s.admin(s.listTenants))
	mux.HandleFunc("GET /admin/v1/tenants/{id}", s.admin(s.getTenant))
	mux.HandleFunc("PATCH /admin/v1/tenants/{id}", s.admin(s.patchTenant))
	mux.HandleFunc("PATCH /admin/v1/keys/{id}", s.admin(s.patchKey))
	mux.HandleFunc("POST /admin/v1/prices", s.admin(s.setPrice))
	mux.HandleFunc("GET /admin/v1/prices", s.admin(s.listPrices))
	mux.HandleFunc("POST /admin/v1/keys", s.admin(s.createKey))
	mux.HandleFunc("GET /admin/v1/keys", s.admin(s.listKeys))
	mux.HandleFunc("GET /admin/v1/keys/{id}", s.admin(s.getKey))
	mux.HandleFunc("DELETE /admin/v1/keys/{id}", s.admin(s.revokeKey))
	mux.HandleFunc("POST /admin/v1/models", s.admin(s.registerModel))
	mux.HandleFunc("GET /admin/v1/models", s.admin(s.listAdminModels))
	mux.HandleFunc("GET /admin/v1/models/{name...}", s.admin(s.getAdminModel))
	mux.HandleFunc("DELETE /admin/v1/models/{name...}", s.admin(s.deleteModel))
	s.batchRoutes(mux)
	s.webhookRoutes(mux)
	s.modelBucketRoutes(mux)
	s.routerRoutes(mux)
}

func (s *Service) admin(h http.HandlerFunc) http.HandlerFunc { return httpapi.Admin(s.d.AdminKey, h) }

func (s *Service) storeError(w http.ResponseWriter, r *http.Request, err error, what string) {
	switch {
	case errors.Is(err, registry.ErrNotFound):
		contracts.Write(w, contracts.ErrNotFound(what+" not found."))
	case errors.Is(err, registry.ErrExists):
		contracts.Write(w, contracts.ErrConflict(what+" already exists."))
	case errors.Is(err, registry.ErrInvalid):
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, err.Error()))
	default:
		s.log.Error("admin store error", "what", what, "err", err)
		contracts.Write(w, httpapi.StoreError(r.Context(), err, "registry", "The registry could not be reached."))
	}
}

func (s *Service) createTenant(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID string `json:"id"`
		// Admission is the tenant's policy; absent: block
		// (registry.DefaultTenantAdmission).
		Admission *admissionPatch `json:"admission"`
		// TraceContent records the tenant's prompts and completions in
		// its traces (registry.Tenant.TraceContent); absent: false.
		TraceContent *bool `json:"trace_content"`
	}
	if !httpapi.DecodeStrict(w, r, &req) {
		return
	}
	if !registry.ValidTenantID(req.ID) {
		contracts.Write(w, contracts.ErrBadRequest("id", contracts.CodeInvalidRequest, "Tenant id must be 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or digit."))
		return
	}
	var adm *registry.AdmissionPolicy
	if req.Admission != nil {
		def := registry.DefaultTenantAdmission()
		adm = req.Admission.apply(&def)
		if !validAdmission(w, adm) {
			return
		}
	}
	t, err := s.store.CreateTenantWith(r.Context(), req.ID, registry.TenantOptions{Admission: adm, TraceContent: req.TraceContent != nil && *req.TraceContent})
	if err != nil {
		s.storeError(w, r, err, "Tenant '"+req.ID+"'")
		return
	}
	s.d.Directory.NoteTenant(t)
	httpapi.WriteJSON(w, http.StatusCreated, t)
}

func (s *Service) listTenants(w http.ResponseWriter, r *http.Request) {
	ts, err := s.store.ListTenants(r.Context())
	if err != nil {
		s.storeError(w, r, err, "Tenants")
		return
	}
	data := make([]tenantView, 0, len(ts))
	for _, t := range ts {
		data = append(data, s.viewTenant(r, t))
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Service) getTenant(w http.ResponseWriter, r *http.Request) {
	t, err := s.store.GetTenant(r.Context(), r.PathValue("id"))
	if err != nil {
		s.storeError(w, r, err, "Tenant '"+r.PathValue("id")+"'")
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, s.viewTenant(r, t))
}

// keyView is a key as the API shows it: never the hash, the secret only
// once, at creation.
type keyView struct {
	ID        string    `json:"id"`
	Object    string    `json:"object"`
	Key       string    `json:"key,omitempty"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	Models    []string  `json:"models"`
	CreatedAt time.Time `json:"created_at"`
	registry.Limits
	// Admission is the key's override of its tenant's admission policy.
	Admission *registry.AdmissionPolicy `json:"admission,omitempty"`
	// Budget is the key's spend in its current budget period (GET only).
	Budget *budgetView `json:"budget,omitempty"`
}

func viewKey(k registry.Key, secret string) keyView {
	return keyView{ID: k.ID, Object: "api_key", Key: secret, Tenant: k.Tenant, Name: k.Name, Models: k.Models, CreatedAt: k.CreatedAt, Limits: k.Limits, Admission: k.Admission}
}

// limitsPatch is a partial update of limits: absent fields stay.
type limitsPatch struct {
	RPM           *int64   `json:"rpm"`
	TPM           *int64   `json:"tpm"`
	MaxBudgetUSD  *float64 `json:"max_budget_usd"`
	BudgetPeriod  *string  `json:"budget_period"`
	SoftBudgetUSD *float64 `json:"soft_budget_usd"`
	// MaxConcurrentRequests: 0 removes the bound.
	MaxConcurrentRequests *int64 `json:"max_concurrent_requests"`
}

func (p limitsPatch) apply(l *registry.Limits) {
	if p.RPM != nil {
		l.RPM = *p.RPM
	}
	if p.TPM != nil {
		l.TPM = *p.TPM
	}
	if p.MaxBudgetUSD != nil {
		l.MaxBudgetUSD = *p.MaxBudgetUSD
	}
	if p.BudgetPeriod != nil {
		l.BudgetPeriod = *p.BudgetPeriod
	}
	if p.SoftBudgetUSD != nil {
		l.SoftBudgetUSD = *p.SoftBudgetUSD
	}
	if p.MaxConcurrentRequests != nil {
		l.MaxConcurrentRequests = *p.MaxConcurrentRequests
	}
}

func (s *Service) patchKey(w http.ResponseWriter, r *http.Request) {
	var p struct {
		limitsPatch
		Admission *admissionPatch `json:"admission"`
	}
	if !httpapi.DecodeStrict(w, r, &p) {
		return
	}
	k, err := s.store.UpdateKeyLimits(r.Context(), r.PathValue("id"), p.apply)
	if err != nil {
		s.storeError(w, r, err, "Key '"+r.PathValue("id")+"'")
		return
	}
	if p.Admission != nil {
		var ok bool
		if k, ok = s.patchKeyAdmission(w, r, k.ID, p.Admission); !ok {
			return
		}
	}
	s.d.Directory.NoteKey(k)
	httpapi.WriteJSON(w, http.StatusOK, viewKey(k, ""))
}

func (s *Service) patchTenant(w http.ResponseWriter, r *http.Request) {
	var p struct {
		limitsPatch
		Admission *admissionPatch `json:"admission"`
		// TraceContent turns the recording of the tenant's prompts and
		// completions in its traces on or off; absent: unchanged.
		TraceContent *bool `json:"trace_content"`
	}
	if !httpapi.DecodeStrict(w, r, &p) {
		return
	}
	if p.RPM != nil || p.TPM != nil {
		contracts.Write(w, contracts.ErrBadRequest("rpm", contracts.CodeInvalidRequest, "Rate limits are set per key, not per tenant."))
		return
	}
	t, err := s.store.UpdateTenantLimits(r.Context(), r.PathValue("id"), p.apply)
	if err != nil {
		s.storeError(w, r, err, "Tenant '"+r.PathValue("id")+"'")
		return
	}
	if p.Admission != nil {
		var ok bool
		if t, ok = s.patchTenantAdmission(w, r, t.ID, p.Admission); !ok {
			return
		}
	}
	if p.TraceContent != nil && *p.TraceContent != t.TraceContent {
		id := t.ID
		if t, err = s.store.SetTenantTraceContent(r.Context(), id, *p.TraceContent); err != nil {
			s.storeError(w, r, err, "Tenant '"+id+"'")
			return
		}
		s.log.Info("tenant trace content changed", "tenant", t.ID, "trace_content", t.TraceContent)
	}
	s.d.Directory.NoteTenant(t)
	httpapi.WriteJSON(w, http.StatusOK, s.viewTenant(r, t))
}

// priceIn is a price as the admin API takes it.
type priceIn struct {
	Model                 string     `json:"model"`
	InputPerMTokUSD       float64    `json:"input_per_mtok_usd"`
	CachedInputPerMTokUSD *float64   `json:"cached_input_per_mtok_usd"`
	OutputPerMTokUSD      float64    `json:"output_per_mtok_usd"`
	EffectiveFrom         *time.Time `json:"effective_from"`
	// BatchDiscount is the fraction batch lines pay less (0 to 1);
	// absent: registry.DefaultBatchDiscount.
	BatchDiscount *float64 `json:"batch_discount"`
	// The sandbox prices, for model registry.SandboxPriceModel only.
	PerGBSecondUSD float64 `json:"per_gb_second_usd"`
	PerSessionUSD  float64 `json:"per_session_usd"`
}

func (p priceIn) price() registry.Price {
	out := registry.Price{InputPerMTokUSD: p.InputPerMTokUSD, OutputPerMTokUSD: p.OutputPerMTokUSD, CachedInputPerMTokUSD: p.InputPerMTokUSD, BatchDiscount: p.BatchDiscount,
		PerGBSecondUSD: p.PerGBSecondUSD, PerSessionUSD: p.PerSessionUSD}
	if p.CachedInputPerMTokUSD != nil {
		out.CachedInputPerMTokUSD = *p.CachedInputPerMTokUSD
	}
	if p.EffectiveFrom != nil {
		out.EffectiveFrom = p.EffectiveFrom.UTC()
	}
	return out
}

func (s *Service) storePrice(r *http.Request, model string, p priceIn) (registry.PriceHistory, error) {
	h, err := s.store.SetPrice(r.Context(), model, p.price())
	if err == nil {
		s.d.Directory.NotePrice(h)
	}
	return h, err
}

func (s *Service) setPrice(w http.ResponseWriter, r *http.Request) {
	var p priceIn
	if !httpapi.DecodeStrict(w, r, &p) {
		return
	}
	if p.Model == "" {
		contracts.Write(w, contracts.ErrBadRequest("model", contracts.CodeMissingParam, "Missing required parameter: 'model'."))
		return
	}
	if p.Model != registry.SandboxPriceModel && (p.PerGBSecondUSD != 0 || p.PerSessionUSD != 0) {
		contracts.Write(w, contracts.ErrBadRequest("model", contracts.CodeInvalidRequest,
			"per_gb_second_usd and per_session_usd are the sandboxes' prices: set them on model '"+registry.SandboxPriceModel+"'."))
		return
	}
	h, err := s.storePrice(r, p.Model, p)
	if err != nil {
		s.storeError(w, r, err, "Price of '"+p.Model+"'")
		return
	}
	httpapi.WriteJSON(w, http.StatusCreated, h)
}

func (s *Service) listPrices(w http.ResponseWriter, r *http.Request) {
	hs, err := s.store.ListPrices(r.Context())
	if err != nil {
		s.storeError(w, r, err, "Prices")
		return
	}
	if hs == nil {
		hs = []registry.PriceHistory{}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": hs})
}

func (s *Service) createKey(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tenant string   `json:"tenant"`
		Name   string   `json:"name"`
		Models []string `json:"models"`
		registry.Limits
		// Admission overrides the tenant's policy field by field.
		Admission *registry.AdmissionPolicy `json:"admission"`
	}
	if !httpapi.DecodeStrict(w, r, &req) {
		return
	}
	if !validAdmission(w, req.Admission) {
		return
	}
	if req.Tenant == "" {
		contracts.Write(w, contracts.ErrBadRequest("tenant", contracts.CodeMissingParam, "Missing required parameter: 'tenant'."))
		return
	}
	for _, m := range req.Models {
		if m == "" {
			contracts.Write(w, contracts.ErrBadRequest("models", contracts.CodeInvalidRequest, "Model names in 'models' must not be empty."))
			return
		}
	}
	k, secret, err := s.store.CreateKey(r.Context(), req.Tenant, req.Name, req.Models, req.Limits)
	if err != nil {
		s.storeError(w, r, err, "Key")
		return
	}
	if req.Admission != nil {
		if k, err = s.store.SetKeyAdmission(r.Context(), k.ID, req.Admission); err != nil {
			s.storeError(w, r, err, "Key")
			return
		}
	}
	// Make the key usable on this replica before answering, so that a client
	// using it at once is not refused by a watcher that lags by a millisecond.
	s.d.Directory.NoteKey(k)
	s.log.Info("api key created", "key_id", k.ID, "tenant", k.Tenant)
	httpapi.WriteJSON(w, http.StatusCreated, viewKey(k, secret))
}

func (s *Service) listKeys(w http.ResponseWriter, r *http.Request) {
	ks, err := s.store.ListKeys(r.Context(), r.URL.Query().Get("tenant"))
	if err != nil {
		s.storeError(w, r, err, "Keys")
		return
	}
	data := make([]keyView, 0, len(ks))
	for _, k := range ks {
		v := viewKey(k, "")
		v.Budget = s.keyBudget(r, k)
		data = append(data, v)
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Service) getKey(w http.ResponseWriter, r *http.Request) {
	k, err := s.store.GetKey(r.Context(), r.PathValue("id"))
	if err != nil {
		s.storeError(w, r, err, "Key '"+r.PathValue("id")+"'")
		return
	}
	v := viewKey(k, "")
	v.Budget = s.keyBudget(r, k)
	httpapi.WriteJSON(w, http.StatusOK, v)
}

func (s *Service) revokeKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.store.RevokeKey(r.Context(), id); err != nil {
		s.storeError(w, r, err, "Key '"+id+"'")
		return
	}
	// The watcher does the same on every replica; doing it here too means
	// this replica refuses the key before the call returns.
	s.d.Directory.NoteKeyDeleted(id) // ends the key's requests in flight
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "api_key", "deleted": true})
}

type modelView struct {
	Name          string            `json:"name"`
	Kind          string            `json:"kind,omitempty"`
	Object        string            `json:"object"`
	Engine        registry.Engine   `json:"engine"`
	Engines       []registry.Engine `json:"engines,omitempty"`
	Routing       string            `json:"routing,omitempty"`
	Fallbacks     []string          `json:"fallbacks,omitempty"`
	ContextWindow int               `json:"context_window,omitempty"`
	// Cache is the model's semantic cache policy.
	Cache *registry.CachePolicy `json:"cache,omitempty"`
	// HybridSearch is an embedding model's default fusion in hybrid search.
	HybridSearch *registry.HybridSearch `json:"hybrid_search,omitempty"`
	OwnedBy      string                 `json:"owned_by,omitempty"`
	CreatedAt    time.Time              `json:"created_at"`
	// Status is what the model's worker replicas report (engine health,
	// verified upstream and key, slots, last error).
	Status *models.Status `json:"status,omitempty"`
}

func viewModel(m registry.Model) modelView {
	m = m.Redacted()
	return modelView{Name: m.Name, Kind: m.Kind, Object: "model_binding", Engine: m.Engine, Engines: m.Engines, Routing: m.Routing,
		Fallbacks: m.Fallbacks, ContextWindow: m.ContextWindow, Cache: m.Cache, HybridSearch: m.HybridSearch, OwnedBy: m.OwnedBy, CreatedAt: m.CreatedAt}
}

func (s *Service) registerModel(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name          string                 `json:"name"`
		Kind          string                 `json:"kind"`
		Engine        registry.Engine        `json:"engine"`
		Engines       []registry.Engine      `json:"engines"`
		Routing       string                 `json:"routing"`
		Fallbacks     []string               `json:"fallbacks"`
		ContextWindow int                    `json:"context_window"`
		OwnedBy       string                 `json:"owned_by"`
		Price         *priceIn               `json:"price"`
		Cache         *registry.CachePolicy  `json:"cache"`
		HybridSearch  *registry.HybridSearch `json:"hybrid_search"`
	}
	if !httpapi.DecodeStrict(w, r, &req) {
		return
	}
	m := registry.Model{Name: req.Name, Kind: req.Kind, Engine: req.Engine, Engines: req.Engines, Routing: req.Routing,
		Fallbacks: req.Fallbacks, ContextWindow: req.ContextWindow, OwnedBy: req.OwnedBy, Cache: req.Cache, HybridSearch: req.HybridSearch}
	if e := s.checkModelName(m); e != nil {
		contracts.Write(w, e)
		return
	}
	if e := prepareEngines(&m); e != nil {
		contracts.Write(w, e)
		return
	}
	if err := registry.ValidateModel(m); err != nil {
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, err.Error()))
		return
	}
	if m.HasClearEngineKey() {
		if s.d.SecretsKey == nil {
			contracts.Write(w, contracts.ErrBadRequest("engine.api_key", contracts.CodeInvalidRequest,
				"This edge cannot store engine API keys: it has no secrets public key to seal them with (give it the workers' public key: AIFORGE_SECRETS_PUBLIC_KEY_FILE)."))
			return
		}
		if err := m.SealEngineKey(*s.d.SecretsKey); err != nil {
			s.log.Error("seal engine api key", "model", m.Name, "err", err)
			contracts.Write(w, contracts.ErrInternal("The engine API key could not be sealed."))
			return
		}
	}
	status := http.StatusCreated
	if old, err := s.store.GetModel(r.Context(), m.Name); err == nil {
		m.CreatedAt = old.CreatedAt
		status = http.StatusOK
	}
	if req.Price != nil {
		if err := req.Price.price().Validate(); err != nil {
			contracts.Write(w, contracts.ErrBadRequest("price", contracts.CodeInvalidRequest, err.Error()))
			return
		}
	}
	if err := s.store.PutModel(r.Context(), m); err != nil {
		s.storeError(w, r, err, "Model '"+m.Name+"'")
		return
	}
	if req.Price != nil {
		if _, err := s.storePrice(r, m.Name, *req.Price); err != nil {
			s.storeError(w, r, err, "Price of '"+m.Name+"'")
			return
		}
	}
	stored, err := s.store.GetModel(r.Context(), m.Name)
	if err != nil {
		s.storeError(w, r, err, "Model '"+m.Name+"'")
		return
	}
	s.d.Directory.NoteModel(stored)
	s.log.Info("model registered", "model", m.Name, "engine", m.Engine.BaseURL, "upstream", m.Engine.Model)
	httpapi.WriteJSON(w, status, viewModel(stored))
}

func (s *Service) listAdminModels(w http.ResponseWriter, r *http.Request) {
	ms, err := s.store.ListModels(r.Context())
	if err != nil {
		s.storeError(w, r, err, "Models")
		return
	}
	data := make([]modelView, 0, len(ms))
	for _, m := range ms {
		v := viewModel(m)
		st := models.StatusOf(s.d.Directory, m.Name)
		v.Status = &st
		data = append(data, v)
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Service) getAdminModel(w http.ResponseWriter, r *http.Request) {
	m, err := s.store.GetModel(r.Context(), r.PathValue("name"))
	if err != nil {
		s.storeError(w, r, err, "Model '"+r.PathValue("name")+"'")
		return
	}
	v := viewModel(m)
	st := models.StatusOf(s.d.Directory, m.Name)
	v.Status = &st
	httpapi.WriteJSON(w, http.StatusOK, v)
}

func (s *Service) deleteModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.store.DeleteModel(r.Context(), name); err != nil {
		s.storeError(w, r, err, "Model '"+name+"'")
		return
	}
	s.d.Directory.NoteModelDeleted(name)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": name, "object": "model_binding", "deleted": true})
}
