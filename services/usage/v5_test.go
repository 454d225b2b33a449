package usage

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
)

// UsageRecordedV5 (a request made from a stored prompt) decodes on the
// fast path and on encoding/json's alike, as the V3 it extends; a V5
// without its prompt is invalid, and V5 fields are refused in a V4 body.
func TestDecodeV5(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 0, 123, time.UTC)
	u := events.UsageRecordedV1{RequestID: "req_5", Tenant: "acme", KeyID: "key_a", Model: "m1", Endpoint: events.EndpointChatCompletions,
		PromptTokens: 30, CompletionTokens: 4, Status: events.UsageStatusOK, Reporter: "w", StartedAt: at, FinishedAt: at.Add(time.Second)}
	v5 := events.UsageRecordedV5{UsageRecordedV4: events.UsageRecordedV4{UsageRecordedV3: events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: u}},
		AdmissionAction: events.AdmissionAllowed}, PromptID: "pmpt_1", PromptVersion: "7"}
	body, err := json.Marshal(v5)
	if err != nil {
		t.Fatal(err)
	}
	var in interner
	var got events.UsageRecordedV3
	var x v4Fields
	if !fastDecodeRecorded(body, &got, 5, &in, &x) {
		t.Fatalf("fast path refused %s", body)
	}
	if x.PromptID != "pmpt_1" || x.PromptVersion != "7" || got.PromptTokens != 30 || x.AdmissionAction != events.AdmissionAllowed {
		t.Fatalf("fast path decoded %+v %+v", got, x)
	}
	if fastDecodeRecorded(body, &events.UsageRecordedV3{}, 4, &in, &v4Fields{}) {
		t.Fatal("V5 fields accepted as a V4 body")
	}
	for name, b := range map[string][]byte{"fast": body, "slow": append([]byte(`{"unknown_later_field":1,`), body[1:]...)} {
		var dec decoder
		hdr := map[string][]string{events.HeaderType: {events.TypeUsageRecordedV5}, events.HeaderID: {"req_5"}}
		_, ev, kind, err := dec.decode(hdr, b)
		if kind != decodedEvent || err != nil {
			t.Fatalf("%s decode: %v %v", name, kind, err)
		}
		if v3, ok := ev.(*events.UsageRecordedV3); !ok || v3.RequestID != "req_5" || v3.CompletionTokens != 4 {
			t.Fatalf("%s decoded %T %+v, want the V3 it extends", name, ev, ev)
		}
	}
	v5.PromptVersion = ""
	bad, _ := json.Marshal(v5)
	var dec decoder
	if _, _, kind, _ := dec.decode(map[string][]string{events.HeaderType: {events.TypeUsageRecordedV5}}, bad); kind != decodedInvalid {
		t.Fatalf("a V5 without its prompt version decoded as %v", kind)
	}
}
