package reports

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
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
