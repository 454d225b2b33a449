package usage

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
)

// fastAgrees decodes body both ways and reports a disagreement: whenever
// the fast path accepts a body, encoding/json must accept it and decode the
// same value.
func fastAgrees(t testing.TB, body []byte, version int) (fastOK bool) {
	t.Helper()
	var in interner
	var fast events.UsageRecordedV3
	fastOK = fastDecodeRecorded(body, &fast, version, &in, nil)
	var slow events.UsageRecordedV3
	var err error
	switch version {
	case 3:
		err = json.Unmarshal(body, &slow)
	case 2:
		err = json.Unmarshal(body, &slow.UsageRecordedV2)
	default:
		err = json.Unmarshal(body, &slow.UsageRecordedV1)
	}
	if !fastOK {
		return false
	}
	if err != nil {
		t.Fatalf("fast path accepted what encoding/json rejects (%v): %s", err, body)
	}
	if len(fast.Reservations) == 0 && len(slow.Reservations) == 0 {
		fast.Reservations, slow.Reservations = nil, nil
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("fast and encoding/json disagree on %s:\nfast %+v\njson %+v", body, fast, slow)
	}
	return true
}

func TestFastDecodeMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	clean := []string{"", "alpha", "mödel/ü", "chat.completions", "key_0123456789abcdef", "日本"}
	escaped := []string{"a\"b", "tab\there", "x\\y", "\u2028", "<html>"}
	str := func() string {
		if r.IntN(50) == 0 {
			return escaped[r.IntN(len(escaped))]
		}
		return clean[r.IntN(len(clean))]
	}
	accepted := 0
	for i := range 3000 {
		at := time.Unix(1_700_000_000+int64(r.IntN(1e8)), int64(r.IntN(1e9)))
		if i%3 == 0 {
			at = at.In(time.FixedZone("", 3600*(r.IntN(20)-10)))
		}
		u := events.UsageRecordedV1{
			RequestID: str(), Tenant: str(), KeyID: str(),
			Model: str(), Endpoint: str(), Stream: r.IntN(2) == 0,
			PromptTokens: r.Int64N(1 << 40), CachedPromptTokens: r.Int64N(100) - 50, CompletionTokens: r.Int64N(1e6),
			Estimated: r.IntN(2) == 0, Status: str(), ErrorCode: str(),
			LatencyMS: r.Float64() * 1e4, TTFTMS: r.NormFloat64() * 1e-9, WorkerID: str(),
			Reporter: str(), StartedAt: at, FinishedAt: at.Add(time.Duration(r.IntN(1e9))),
		}
		var body []byte
		version := 1 + i%3
		ev := events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: u}}
		for range r.IntN(3) {
			ev.Reservations = append(ev.Reservations, events.Reservation{Key: str(), NanoUSD: r.Int64N(1e12)})
		}
		if r.IntN(2) == 0 {
			ev.Batch, ev.BatchID = true, str()
		}
		switch version {
		case 3:
			body, _ = json.Marshal(ev)
		case 2:
			body, _ = json.Marshal(ev.UsageRecordedV2)
		default:
			body, _ = json.Marshal(u)
		}
		if fastAgrees(t, body, version) {
			accepted++
		}
	}
	if accepted < 100 {
		t.Fatalf("the fast path accepted only %d of 3000 bodies", accepted)
	}
	t.Logf("fast path took %d of 3000 (the rest have escapes and went to encoding/json)", accepted)

	// Hand-made edge cases: each is either declined or decoded the same.
	base := `"request_id":"r","tenant":"t","model":"m","endpoint":"chat.completions","status":"ok","reporter":"w","started_at":"2026-01-02T03:04:05Z","finished_at":"2026-01-02T03:04:06.5+01:00"`
	for _, c := range []struct {
		body   string
		fastOK bool
	}{
		{`{` + base + `}`, true},
		{" \n{ " + base + ` , "prompt_tokens" : 12 , "completion_tokens":-3 }` + "\t", true},
		{`{` + base + `,"Tenant":"x"}`, false},              // encoding/json matches names case-insensitively
		{`{` + base + `,"tenant":null}`, false},             // null leaves the field alone in encoding/json
		{`{` + base + `,"prompt_tokens":1.0}`, false},       // not an int64
		{`{` + base + `,"prompt_tokens":012}`, false},       // not JSON
		{`{` + base + `,"prompt_tokens":1e2}`, false},       // not an int64
		{`{` + base + `,"latency_ms":1e2}`, true},           // a float
		{`{` + base + `,"latency_ms":.5}`, false},           // not JSON
		{`{` + base + `,"latency_ms":-0.5E-3}`, true},       //
		{`{` + base + `,"unknown":1}`, false},               // a field it does not know
		{`{` + base + `}x`, false},                          // trailing data
		{`{` + base + `,}`, false},                          // not JSON
		{`{` + base + `,"tenant":"a\u00e9"}`, false},        // escapes
		{`{` + base + `,"tenant":"` + "\xff" + `"}`, false}, // invalid UTF-8 (encoding/json substitutes U+FFFD)
		{`{` + base + `,"started_at":"2026-13-02T03:04:05Z"}`, false},
		{`{` + base + `,"stream":true,"estimated":false}`, true},
		{`{` + base + `,"reservations":[{"key":"k","nano_usd":5},{"nano_usd":6,"key":"t"}]}`, true},
		{`{` + base + `,"reservations":[]}`, true},
		{`{` + base + `,"reservations":null}`, false},
		{`{` + base + `,"reservations":[{"key":"k","nano_usd":5,"x":1}]}`, false},
		{`{` + base + `,"tenant":"a","tenant":"b"}`, true}, // the last one wins in both
		{`{}`, true},
		{`[]`, false},
		{``, false},
	} {
		if got := fastAgrees(t, []byte(c.body), 2); got != c.fastOK {
			t.Errorf("fast path on %s: %v, want %v", c.body, got, c.fastOK)
		}
	}
	// The batch fields are V3's only.
	for _, c := range []struct {
		body    string
		version int
		fastOK  bool
	}{
		{`{` + base + `,"batch":true,"batch_id":"batch_1"}`, 3, true},
		{`{` + base + `,"batch":false,"batch_id":""}`, 3, true},
		{`{` + base + `,"batch":"yes"}`, 3, false},
		{`{` + base + `,"batch_id":null}`, 3, false},
		{`{` + base + `,"batch":true}`, 2, false},
		{`{` + base + `,"batch_id":"b"}`, 1, false},
		{`{` + base + `,"reservations":[]}`, 1, false},
		{`{` + base + `,"reservations":[{"key":"k","nano_usd":5}],"batch":true,"batch_id":"b"}`, 3, true},
	} {
		if got := fastAgrees(t, []byte(c.body), c.version); got != c.fastOK {
			t.Errorf("fast path (v%d) on %s: %v, want %v", c.version, c.body, got, c.fastOK)
		}
	}
}

func FuzzFastDecode(f *testing.F) {
	for _, s := range []string{
		`{"request_id":"r","tenant":"t","prompt_tokens":5,"latency_ms":1.5,"reservations":[{"key":"k","nano_usd":1}]}`,
		`{"started_at":"2026-01-02T03:04:05.123456789Z","stream":false}`,
		`{"tenant":"a\"b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fastAgrees(t, b, 1)
		fastAgrees(t, b, 2)
		fastAgrees(t, b, 3)
	})
}

func TestInternerIsBounded(t *testing.T) {
	var in interner
	for i := range 3 * maxInterned {
		s := in.get([]byte(fmt.Sprint("v", i)))
		if s != fmt.Sprint("v", i) {
			t.Fatal(s)
		}
	}
	if len(in) > maxInterned {
		t.Fatalf("interner holds %d strings", len(in))
	}
}
