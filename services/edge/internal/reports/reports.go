// Package reports serves usage reports, the usage export and corrections.
// Reports are answered by the usage service over the bus (pkg/query); the
// edge authenticates, scopes a tenant key to its own tenant (project) and
// forwards. The admin key sees every tenant.
package reports

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/query"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// Deps are what the reports need.
type Deps struct {
	NC *nats.Conn
	JS jetstream.JetStream
	// Keys authenticates tenant keys.
	Keys       httpapi.Keys
	AdminKey   string
	Logger     *slog.Logger
	InstanceID string
	// ReportTimeout bounds the wait for a usage report, AuditTimeout for
	// an audit or a ledger dump. Defaults 30s and 5m.
	ReportTimeout, AuditTimeout time.Duration
}

// Service serves the reports.
type Service struct {
	d   Deps
	log *slog.Logger
}

// New builds the reports API.
func New(d Deps) *Service {
	if d.ReportTimeout <= 0 {
		d.ReportTimeout = 30 * time.Second
	}
	if d.AuditTimeout <= 0 {
		d.AuditTimeout = 5 * time.Minute
	}
	return &Service{d: d, log: d.Logger}
}

func (s *Service) admin(h http.HandlerFunc) http.HandlerFunc { return httpapi.Admin(s.d.AdminKey, h) }

// Routes mounts the usage reports, export and corrections.
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/organization/usage/completions", s.report(query.OpCompletions))
	mux.HandleFunc("GET /v1/organization/usage/embeddings", s.report(query.OpEmbeddings))
	mux.HandleFunc("GET /v1/organization/usage/code_interpreter_sessions", s.report(query.OpCodeInterpreterSessions))
	mux.HandleFunc("GET /v1/organization/costs", s.report(query.OpCosts))
	mux.HandleFunc("POST /admin/v1/usage/audit", s.admin(s.adminUsage(query.OpAudit)))
	mux.HandleFunc("GET /admin/v1/usage/ledger", s.admin(s.adminUsage(query.OpLedger)))
	mux.HandleFunc("GET /admin/v1/usage/events", s.admin(s.exportUsage))
	mux.HandleFunc("POST /admin/v1/usage/corrections", s.admin(s.correctUsage))
}

// correctUsage publishes a compensating event: ledgers are never edited,
// a correction adds (possibly negative) deltas to the original request's
// bucket. A client-chosen correction_id makes a retried call count once.
func (s *Service) correctUsage(w http.ResponseWriter, r *http.Request) {
	var c events.UsageCorrectedV1
	if !httpapi.DecodeStrict(w, r, &c) {
		return
	}
	if c.CorrectionID == "" {
		c.CorrectionID = "corr_" + events.NewID()
	}
	if err := c.Validate(); err != nil {
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, err.Error()))
		return
	}
	env := events.Envelope{ID: c.CorrectionID, Source: s.d.InstanceID, Tenant: c.Tenant}
	if _, err := events.Publish(r.Context(), s.d.JS, c, env); err != nil {
		s.log.Error("publish correction", "correction_id", c.CorrectionID, "err", err)
		contracts.Write(w, httpapi.StoreError(r.Context(), err, "usage stream", "The correction could not be recorded."))
		return
	}
	httpapi.WriteJSON(w, http.StatusCreated, c)
}

// report serves an OpenAI usage or costs endpoint.
func (s *Service) report(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		scope, ok := s.reportScope(r)
		if !ok {
			contracts.Write(w, contracts.ErrInvalidAPIKey())
			return
		}
		s.askUsage(w, r, query.UsageRequest{Op: op, Scope: scope, Query: r.URL.RawQuery}, s.d.ReportTimeout)
	}
}

// reportScope: the admin key reads every tenant (""), a tenant key its own.
func (s *Service) reportScope(r *http.Request) (string, bool) {
	if httpapi.IsAdmin(r, s.d.AdminKey) {
		return "", true
	}
	if k := httpapi.KeyOf(s.d.Keys, r); k != nil {
		return k.Tenant, true
	}
	return "", false
}

func (s *Service) adminUsage(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		from, to, apiErr := window(r)
		if apiErr != nil {
			contracts.Write(w, apiErr)
			return
		}
		s.askUsage(w, r, query.UsageRequest{Op: op, Scope: r.URL.Query().Get("tenant"), From: from.Unix(), To: to.Unix()}, s.d.AuditTimeout)
	}
}

// window reads from and to (unix seconds or RFC 3339); to defaults to now,
// from to 24 hours before to.
func window(r *http.Request) (time.Time, time.Time, *contracts.Error) {
	q := r.URL.Query()
	to := time.Now()
	if v := q.Get("to"); v != "" {
		t, err := parseTime(v)
		if err != nil {
			return time.Time{}, time.Time{}, contracts.ErrBadRequest("to", contracts.CodeInvalidRequest, "Invalid 'to': "+err.Error())
		}
		to = t
	}
	from := to.Add(-24 * time.Hour)
	if v := q.Get("from"); v != "" {
		t, err := parseTime(v)
		if err != nil {
			return time.Time{}, time.Time{}, contracts.ErrBadRequest("from", contracts.CodeInvalidRequest, "Invalid 'from': "+err.Error())
		}
		from = t
	}
	if !from.Before(to) {
		return time.Time{}, time.Time{}, contracts.ErrBadRequest("from", contracts.CodeInvalidRequest, "'from' must be before 'to'.")
	}
	return from, to, nil
}

func parseTime(v string) (time.Time, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(n, 0), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, errors.New("expected unix seconds or RFC 3339")
	}
	return t, nil
}

// askUsage forwards q to the usage service and relays its answer: an OpenAI
// page, or an error with the status the service chose.
func (s *Service) askUsage(w http.ResponseWriter, r *http.Request, q query.UsageRequest, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	reply, err := query.AskUsage(ctx, s.d.NC, q)
	if err != nil {
		why := "did not answer in time"
		if errors.Is(err, nats.ErrNoResponders) {
			why = "is not running"
		}
		contracts.Write(w, contracts.ErrServiceUnavailable("usage", why))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if body, status, failed := query.UsageFailure(reply); failed {
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, `{"error":%s}`, body)
		return
	}
	_, _ = w.Write(reply)
}

// exportUsage streams the raw usage events of a window as CloudEvents in
// structured JSON, one per line: the shape OpenMeter, Lago and Stripe meter
// ingestion take. Events are selected by their own time; the scan starts a
// margin earlier in stream time so late arrivals are included.
func (s *Service) exportUsage(w http.ResponseWriter, r *http.Request) {
	from, to, apiErr := window(r)
	if apiErr != nil {
		contracts.Write(w, apiErr)
		return
	}
	tenant := r.URL.Query().Get("tenant")
	ctx := r.Context()
	stream, err := s.d.JS.Stream(ctx, events.StreamUsage)
	if err != nil {
		contracts.Write(w, httpapi.StoreError(ctx, err, "usage stream", "The usage stream could not be read."))
		return
	}
	info, err := stream.Info(ctx)
	if err != nil {
		contracts.Write(w, httpapi.StoreError(ctx, err, "usage stream", "The usage stream could not be read."))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	if info.State.Msgs == 0 {
		return
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy}
	start := from.Add(-ExportLateMargin)
	cfg.OptStartTime = &start
	if tenant != "" {
		cfg.FilterSubjects = []string{events.UsageOfTenant(tenant)}
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		contracts.Write(w, httpapi.StoreError(ctx, err, "usage stream", "The usage stream could not be read."))
		return
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	defer bw.Flush()
	last := info.State.LastSeq
	for {
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			return
		}
		n := 0
		var seq uint64
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			seq = md.Sequence.Stream
			ce, at, ok := cloudEvent(m)
			if ok && !at.Before(from) && at.Before(to) {
				_, _ = bw.Write(ce)
				_ = bw.WriteByte('\n')
			}
		}
		if n == 0 || seq >= last {
			return
		}
	}
}

// ExportLateMargin is how far before a window's start the export scans the
// stream for events that arrived late.
const ExportLateMargin = 15 * time.Minute

// cloudEvent renders a stream message as a structured CloudEvent and returns
// the event's own time: the request's (or sandbox exec's) start, a
// correction's time, a sandbox container's end (when the ledgers count its
// session).
func cloudEvent(m jetstream.Msg) ([]byte, time.Time, bool) {
	env := events.ReadEnvelope(m.Headers())
	var at struct {
		StartedAt  time.Time `json:"started_at"`
		FinishedAt time.Time `json:"finished_at"`
		At         time.Time `json:"at"`
		Kind       string    `json:"kind"`
	}
	if json.Unmarshal(m.Data(), &at) != nil {
		return nil, time.Time{}, false
	}
	t := at.StartedAt
	if env.Type == events.TypeSandboxUsageV1 && at.Kind == events.SandboxUsageContainer {
		t = at.FinishedAt
	}
	if t.IsZero() {
		t = at.At
	}
	ce := map[string]any{
		"specversion":     "1.0",
		"id":              env.ID,
		"type":            env.Type,
		"source":          env.Source,
		"time":            env.Time.UTC().Format(time.RFC3339Nano),
		"subject":         env.Tenant,
		"datacontenttype": "application/json",
		"data":            json.RawMessage(m.Data()),
	}
	b, err := json.Marshal(ce)
	return b, t, err == nil
}
