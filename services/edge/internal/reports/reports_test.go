package reports

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/query"
)

const adminKey = "0123456789abcdef-admin"

func serve(t *testing.T, nc *nats.Conn) http.Handler {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	New(Deps{NC: nc, JS: js, AdminKey: adminKey, Logger: slog.New(slog.DiscardHandler), ReportTimeout: 200 * time.Millisecond, AuditTimeout: 200 * time.Millisecond}).Routes(mux)
	return mux
}

func get(t *testing.T, h http.Handler, path string) (int, string, []byte) {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	return rec.Code, body.Error.Code, rec.Body.Bytes()
}

// Without a usage service a report is service_unavailable (503), and so
// is a usage service that does not answer in time: neither is a model's
// or an engine's failure.
func TestUsageServiceDownOrSlow(t *testing.T) {
	ns, nc := natstest.JetStream(t)
	h := serve(t, nc)
	if status, code, body := get(t, h, "/v1/organization/usage/completions?start_time=0"); status != http.StatusServiceUnavailable || code != "service_unavailable" {
		t.Fatalf("usage service down: %d %s", status, body)
	}

	slow := natstest.Conn(t, ns, "slow-usage")
	if _, err := slow.Subscribe(events.UsageQuery, func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := slow.Flush(); err != nil {
		t.Fatal(err)
	}
	if status, code, body := get(t, h, "/admin/v1/usage/ledger"); status != http.StatusServiceUnavailable || code != "service_unavailable" {
		t.Fatalf("slow usage service: %d %s", status, body)
	}
}

// A usage service's answer and its errors are relayed with their status.
func TestUsageAnswersRelayed(t *testing.T) {
	ns, nc := natstest.JetStream(t)
	h := serve(t, nc)
	usage := natstest.Conn(t, ns, "usage")
	if _, err := usage.Subscribe(events.UsageQuery, func(m *nats.Msg) {
		var req query.UsageRequest
		_ = json.Unmarshal(m.Data, &req)
		r := nats.NewMsg(m.Reply)
		r.Header.Set(query.UsageReplyHeader, "1")
		if req.Op == query.OpLedger {
			r.Data, _ = json.Marshal(query.LedgerReply{Object: "list", Data: nil})
		} else {
			code := "invalid_request"
			r.Data, _ = json.Marshal(query.ErrorReply{Status: 400, Error: query.ErrorBody{Message: "bad", Type: "invalid_request_error", Code: &code}})
		}
		_ = usage.PublishMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	if err := usage.Flush(); err != nil {
		t.Fatal(err)
	}
	if status, _, body := get(t, h, "/admin/v1/usage/ledger"); status != http.StatusOK || string(body) != `{"object":"list","from":0,"to":0,"last_seq":0,"data":null}` {
		t.Fatalf("ledger: %d %s", status, body)
	}
	if status, code, body := get(t, h, "/v1/organization/costs?start_time=0"); status != http.StatusBadRequest || code != "invalid_request" {
		t.Fatalf("error relayed as %d %s", status, body)
	}
}

// GET /v1/organization/usage/code_interpreter_sessions asks the usage
// service for op code_interpreter_sessions with the raw query and relays
// OpenAI's page: num_sessions per project, and aiforge's exec figures.
func TestCodeInterpreterSessionsReport(t *testing.T) {
	ns, nc := natstest.JetStream(t)
	h := serve(t, nc)
	t0 := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	led := ledger.New()
	led.Apply(1, "", &events.SandboxUsageV1{ID: "x1", Tenant: "acme", KeyID: "k1", ContainerID: "cntr_1", Kind: events.SandboxUsageExec,
		Status: events.UsageStatusOK, WallMS: 1500, CPUMS: 900, MemoryLimitBytes: 1 << 29, GBSeconds: 0.75,
		StartedAt: t0.Add(time.Minute), FinishedAt: t0.Add(time.Minute + 1500*time.Millisecond)}, nil)
	led.Apply(2, "", &events.SandboxUsageV1{ID: "c1", Tenant: "acme", KeyID: "k1", ContainerID: "cntr_1", Kind: events.SandboxUsageContainer,
		Status: events.UsageStatusOK, WallMS: 120000, MemoryLimitBytes: 1 << 29, GBSeconds: 60,
		StartedAt: t0, FinishedAt: t0.Add(2 * time.Minute)}, nil)

	usage := natstest.Conn(t, ns, "usage")
	asked := make(chan query.UsageRequest, 1)
	if _, err := usage.Subscribe(events.UsageQuery, func(m *nats.Msg) {
		var req query.UsageRequest
		_ = json.Unmarshal(m.Data, &req)
		asked <- req
		r := nats.NewMsg(m.Reply)
		r.Header.Set(query.UsageReplyHeader, "1")
		q, perr := ledger.ParseQuery(ledger.Report(req.Op), req.Query, t0.Add(24*time.Hour))
		if perr != nil {
			r.Data, _ = json.Marshal(query.NewErrorReply(perr))
		} else {
			r.Data, _ = led.ReportJSON(q, req.Scope)
		}
		_ = usage.PublishMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	if err := usage.Flush(); err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/v1/organization/usage/code_interpreter_sessions?start_time=%d&end_time=%d&group_by=project_id", t0.Unix(), t0.Add(24*time.Hour).Unix())
	status, _, body := get(t, h, path)
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	if req := <-asked; req.Op != query.OpCodeInterpreterSessions || req.Scope != "" || !strings.Contains(req.Query, "group_by=project_id") {
		t.Fatalf("asked %+v", req)
	}
	want := fmt.Sprintf(`{"object":"page","data":[{"object":"bucket","start_time":%d,"end_time":%d,"results":[`+
		`{"object":"organization.usage.code_interpreter_sessions.result","num_sessions":1,"project_id":"acme","api_key_id":null,`+
		`"num_execs":1,"num_exec_errors":0,"wall_seconds":1.5,"cpu_seconds":0.9,"gb_seconds":0.75,"session_seconds":120,"session_gb_seconds":60}]}],`+
		`"has_more":false,"next_page":null}`, t0.Unix(), t0.Add(24*time.Hour).Unix())
	if string(body) != want {
		t.Fatalf("page\n%s\nwant\n%s", body, want)
	}
	// OpenAI's errors come back as they are
	if status, code, body := get(t, h, fmt.Sprintf("/v1/organization/usage/code_interpreter_sessions?start_time=%d&group_by=model", t0.Unix())); status != http.StatusBadRequest || code != "invalid_request" {
		t.Fatalf("group_by=model: %d %s", status, body)
	}
	<-asked
}

// The export selects sandbox usage by the time the ledgers count it: an
// exec by its start, a container by its end (it may have started long
// before the window).
func TestExportSelectsSandboxUsageByItsLedgerTime(t *testing.T) {
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	h := serve(t, nc)
	now := time.Now().UTC().Truncate(time.Second)
	for _, u := range []events.SandboxUsageV1{
		{ID: "x-in", Tenant: "acme", ContainerID: "c", Kind: events.SandboxUsageExec, Status: events.UsageStatusOK, StartedAt: now.Add(-time.Minute), FinishedAt: now.Add(-time.Minute)},
		{ID: "x-out", Tenant: "acme", ContainerID: "c", Kind: events.SandboxUsageExec, Status: events.UsageStatusOK, StartedAt: now.Add(-3 * time.Hour), FinishedAt: now.Add(-3 * time.Hour)},
		{ID: "c-in", Tenant: "acme", ContainerID: "c", Kind: events.SandboxUsageContainer, Status: events.UsageStatusOK, StartedAt: now.Add(-3 * time.Hour), FinishedAt: now.Add(-time.Minute)},
	} {
		if _, err := events.Publish(ctx, js, u, events.Envelope{ID: u.ID, Source: "test", Tenant: u.Tenant}); err != nil {
			t.Fatal(err)
		}
	}
	status, _, body := get(t, h, fmt.Sprintf("/admin/v1/usage/events?from=%d&to=%d", now.Add(-time.Hour).Unix(), now.Unix()))
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	var ids []string
	for line := range strings.Lines(string(body)) {
		var ce struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(line), &ce); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ce.ID)
	}
	if strings.Join(ids, ",") != "x-in,c-in" {
		t.Fatalf("exported %v, want x-in and c-in", ids)
	}
}
