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

// A request the edge made from a stored prompt is recorded as usage v5
// with the prompt and version (and the admission verdict it also had);
// nothing is published as v2 or v4 for it.
func TestUsageV5WithPrompt(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	h.startWorker(modelFor("served", "up", base))
	body := `{"model":"served","messages":[{"role":"user","content":"hello"}],"max_tokens":5}`

	req := newReq("served", events.EndpointChatCompletions, false, false, body)
	req.Header = nats.Header{}
	req.Header.Set(bridge.HdrPromptID, "pmpt_abc")
	req.Header.Set(bridge.HdrPromptVersion, "2")
	req.Header.Set(bridge.HdrAdmissionAction, events.AdmissionFlagged)
	req.Header.Set(bridge.HdrAdmissionCategory, "injection")
	req.Header.Set(bridge.HdrAdmissionScore, "0.7")
	if _, res, err := h.do(testCtx(t), req); err != nil || res.Status != http.StatusOK {
		t.Fatalf("request: %+v %v", res, err)
	}
	ctx := testCtx(t)
	stream, err := h.js.Stream(ctx, events.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	subj := events.Subject(events.TypeUsageRecordedV5, req.Tenant)
	var msg *jetstream.RawStreamMsg
	eventually(t, 10*time.Second, "usage event on "+subj, func() bool {
		m, err := stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		msg = m
		return true
	})
	var ev events.UsageRecordedV5
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if err := ev.Validate(); err != nil {
		t.Fatal(err)
	}
	if ev.PromptID != "pmpt_abc" || ev.PromptVersion != "2" || ev.AdmissionAction != events.AdmissionFlagged || ev.PromptTokens == 0 || ev.CompletionTokens == 0 {
		t.Fatalf("v5 %+v", ev)
	}
	for _, typ := range []string{events.TypeUsageRecordedV2, events.TypeUsageRecordedV4} {
		if n := h.usageCount(events.Subject(typ, req.Tenant)); n != 0 {
			t.Fatalf("also %d %s events", n, typ)
		}
	}
}
