package worker

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
)

// usageV4 waits for the one usage v4 event of tenant.
func (h *harness) usageV4(tenant string) (events.UsageRecordedV4, *jetstream.RawStreamMsg) {
	h.t.Helper()
	ctx := testCtx(h.t)
	stream, err := h.js.Stream(ctx, events.StreamUsage)
	if err != nil {
		h.t.Fatal(err)
	}
	subj := events.Subject(events.TypeUsageRecordedV4, tenant)
	var msg *jetstream.RawStreamMsg
	eventually(h.t, 10*time.Second, "usage event on "+subj, func() bool {
		m, err := stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false
		}
		if err != nil {
			h.t.Fatal(err)
		}
		msg = m
		return true
	})
	var ev events.UsageRecordedV4
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		h.t.Fatal(err)
	}
	if err := ev.Validate(); err != nil {
		h.t.Fatalf("usage event invalid: %v", err)
	}
	if n := h.usageCount(subj); n != 1 {
		h.t.Fatalf("%d usage events on %s, want 1", n, subj)
	}
	return ev, msg
}

// A request the edge sent with an admission verdict or a route class is
// recorded as usage v4 carrying them (and nothing as v2 or v3); a batch
// line with them keeps its batch fields; a request without them stays v2.
func TestUsageV4WithAdmissionAndRoute(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	h.startWorker(modelFor("served", "up", base))
	body := `{"model":"served","messages":[{"role":"user","content":"hello"}],"max_tokens":5}`

	flagged := newReq("served", events.EndpointChatCompletions, false, false, body)
	flagged.Reservations = []events.Reservation{{Key: "t.x", NanoUSD: 3}}
	flagged.Header = nats.Header{}
	flagged.Header.Set(bridge.HdrAdmissionAction, events.AdmissionFlagged)
	flagged.Header.Set(bridge.HdrAdmissionCategory, "injection")
	flagged.Header.Set(bridge.HdrAdmissionScore, "0.93")
	if _, res, err := h.do(testCtx(t), flagged); err != nil || res.Status != http.StatusOK {
		t.Fatalf("flagged request: %+v %v", res, err)
	}
	ev, msg := h.usageV4(flagged.Tenant)
	if msg.Header.Get(events.HeaderType) != events.TypeUsageRecordedV4 || msg.Header.Get(nats.MsgIdHdr) != flagged.ID {
		t.Fatalf("type %q id %q", msg.Header.Get(events.HeaderType), msg.Header.Get(nats.MsgIdHdr))
	}
	if ev.AdmissionAction != events.AdmissionFlagged || ev.AdmissionCategory != "injection" || ev.AdmissionScore != 0.93 || ev.Router != "" || ev.Batch {
		t.Fatalf("v4 %+v", ev)
	}
	if ev.PromptTokens == 0 || ev.CompletionTokens == 0 || len(ev.Reservations) != 1 || ev.Status != events.UsageStatusOK {
		t.Fatalf("v4 lacks the v2 fields: %+v", ev)
	}
	for _, typ := range []string{events.TypeUsageRecordedV2, events.TypeUsageRecordedV3} {
		if n := h.usageCount(events.Subject(typ, flagged.Tenant)); n != 0 {
			t.Fatalf("also %d %s events", n, typ)
		}
	}

	routed := newReq("served", events.EndpointChatCompletions, false, false, body)
	routed.Header = nats.Header{}
	routed.Header.Set(bridge.HdrRouter, "auto")
	routed.Header.Set(bridge.HdrRouteClass, "iac_devops")
	if _, res, err := h.do(testCtx(t), routed); err != nil || res.Status != http.StatusOK {
		t.Fatalf("routed request: %+v %v", res, err)
	}
	if ev, _ := h.usageV4(routed.Tenant); ev.Router != "auto" || ev.RouteClass != "iac_devops" || ev.AdmissionAction != "" {
		t.Fatalf("routed v4 %+v", ev)
	}

	line := newReq("served", events.EndpointChatCompletions, false, false, body)
	line.Header = nats.Header{}
	line.Header.Set(bridge.HdrBatchID, "batch_9")
	line.Header.Set(bridge.HdrAdmissionAction, events.AdmissionFlagged)
	line.Header.Set(bridge.HdrAdmissionCategory, "jailbreak")
	line.Header.Set(bridge.HdrAdmissionScore, "0.5")
	if _, err := h.batchClient().Do(testCtx(t), line, func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if ev, _ := h.usageV4(line.Tenant); !ev.Batch || ev.BatchID != "batch_9" || ev.AdmissionCategory != "jailbreak" {
		t.Fatalf("batch line v4 %+v", ev)
	}

	plain := newReq("served", events.EndpointChatCompletions, false, false, body)
	if _, res, err := h.do(testCtx(t), plain); err != nil || res.Status != http.StatusOK {
		t.Fatalf("plain request: %+v %v", res, err)
	}
	h.usageEvent(plain.Tenant)
	if n := h.usageCount(events.Subject(events.TypeUsageRecordedV4, plain.Tenant)); n != 0 {
		t.Fatalf("a plain request published %d v4 events", n)
	}
}
