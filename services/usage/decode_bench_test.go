package usage

import (
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
)

func BenchmarkDecode(b *testing.B) {
	at := time.Now()
	u := events.UsageRecordedV1{RequestID: "req-000123", Tenant: "alpha", KeyID: "key_0123456789abcdef", Model: "m1",
		Endpoint: "chat.completions", PromptTokens: 100, CachedPromptTokens: 10, CompletionTokens: 50, Status: "ok",
		Reporter: "worker", StartedAt: at, FinishedAt: at.Add(time.Second), LatencyMS: 1000, TTFTMS: 120, WorkerID: "w-12345678"}
	m, err := events.Marshal(events.UsageRecordedV2{UsageRecordedV1: u,
		Reservations: []events.Reservation{{Key: "k.key_0123456789abcdef.d20261129", NanoUSD: 1000}, {Key: "t.alpha.d20261129", NanoUSD: 1000}}}, events.Envelope{ID: "req-000123"})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d bytes: %s", len(m.Data), m.Data)
	var d decoder
	b.ReportAllocs()
	for b.Loop() {
		if _, _, k, err := d.decode(m.Header, m.Data); k != decodedEvent {
			b.Fatal(err)
		}
	}
}
