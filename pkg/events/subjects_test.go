package events

import (
	"strings"
	"testing"
)

// matches reports whether a NATS subject filter (with * and >) matches a
// literal subject.
func matches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

// streamsOf names the streams whose subjects capture subject.
func streamsOf(subject string) []string {
	var out []string
	for _, sc := range Streams(StreamOptions{}) {
		for _, f := range sc.Subjects {
			if matches(f, subject) {
				out = append(out, sc.Name)
			}
		}
	}
	return out
}

var eventFilters = []string{
	UsageRecordedAll, UsageCorrectedAll, BudgetAlertAll,
	DocsIngestRequestedAll, DocsChunkedAll, DocsEmbeddedAll, DocsIndexedAll, DocsFailedAll, DocsRemovedAll,
	ModelsUploadedAll, ModelsVerdictAll, ModelsPullRequestedAll,
	BatchLinesAll, BatchResultsAll, BatchFinishedAll,
	AdmissionVerdictAll,
	UsageSandboxAll,
}

// TestEventSubjects holds every event type to the scheme: published on its
// type name plus one token, captured by exactly one stream, matched by
// exactly one of the named filters, and the stream of its domain.
func TestEventSubjects(t *testing.T) {
	domainStream := map[string]string{"usage": StreamUsage, "budget": StreamBudget, "docs": StreamDocs, "models": StreamModels, "batch": StreamBatch, "admission": StreamAdmission}
	seen := map[string]string{}
	for _, ev := range goldenEvents {
		typ, subj := ev.EventType(), ev.Subject()
		if rest, ok := strings.CutPrefix(subj, typ+"."); !ok || strings.Contains(rest, ".") {
			t.Errorf("%s is published on %q, not on its type name plus one token", typ, subj)
		}
		if other, dup := seen[subj]; dup {
			t.Errorf("%s and %s share the subject %q", typ, other, subj)
		}
		seen[subj] = typ
		if err := validSubject(subj, false); err != nil {
			t.Error(err)
		}
		domain := strings.Split(typ, ".")[1]
		if got := streamsOf(subj); len(got) != 1 || got[0] != domainStream[domain] {
			t.Errorf("%s (%s) is captured by streams %v, want [%s]", subj, typ, got, domainStream[domain])
		}
		var filters []string
		for _, f := range eventFilters {
			if matches(f, subj) {
				filters = append(filters, f)
			}
		}
		if len(filters) != 1 {
			t.Errorf("%s (%s) is matched by filters %v, want exactly one", subj, typ, filters)
		}
	}
	for _, f := range append(eventFilters, UsageOfTenant("acme"), DeadLetterOf(StreamDocs)) {
		if err := validSubject(f, true); err != nil {
			t.Error(err)
		}
	}
}

// TestUsageSubjects: v2 usage has its own subject, and the per-tenant
// filter reads every usage event of the tenant, v1 and v2 and corrections,
// including v2 events published on v1's subject before it had its own.
func TestUsageSubjects(t *testing.T) {
	u := *usage(1)
	v2 := UsageRecordedV2{UsageRecordedV1: u}
	cor := UsageCorrectedV1{Tenant: "acme"}
	if got, want := u.Subject(), "aiforge.usage.recorded.v1.acme"; got != want {
		t.Errorf("v1 subject %q, want %q", got, want)
	}
	if got, want := v2.Subject(), "aiforge.usage.recorded.v2.acme"; got != want {
		t.Errorf("v2 subject %q, want %q", got, want)
	}
	for _, subj := range []string{u.Subject(), v2.Subject(), cor.Subject()} {
		if !matches(UsageOfTenant("acme"), subj) {
			t.Errorf("UsageOfTenant(acme) misses %s", subj)
		}
		if matches(UsageOfTenant("acme-2"), subj) || matches(UsageOfTenant("ac"), subj) {
			t.Errorf("another tenant's filter matches %s", subj)
		}
	}
	for _, subj := range []string{u.Subject(), v2.Subject()} {
		if !matches(UsageRecordedAll, subj) || matches(UsageCorrectedAll, subj) {
			t.Errorf("recorded filter and %s", subj)
		}
	}
	if got := UsageOfTenant("a.b"); got != "aiforge.usage.*.*.a%2Eb" {
		t.Errorf("UsageOfTenant(a.b) = %q", got)
	}
}

// TestCoreSubjectsOutsideStreams: request/reply and inference subjects must
// lie outside every stream, or JetStream would store (and answer) them.
func TestCoreSubjectsOutsideStreams(t *testing.T) {
	for _, subj := range []string{UsageQuery, RetrieverQuery, Infer("m.x"), InferDirect("m", "w1"), InferPing("m"), InferControl("w1"),
		Embed("m.x"), EmbedDirect("m", "w1"), EmbedPing("m")} {
		if got := streamsOf(subj); len(got) != 0 {
			t.Errorf("%s is captured by streams %v", subj, got)
		}
	}
	if got := InferDirect("a.b", "w1"); got != "aiforge.infer.v1.a%2Eb.w.w1" {
		t.Errorf("InferDirect = %q", got)
	}
	if got := InferPing("a.b"); got != "aiforge.infer.v1.a%2Eb.ping" {
		t.Errorf("InferPing = %q", got)
	}
	if got := EmbedDirect("a.b", "w1"); got != "aiforge.embed.v1.a%2Eb.w.w1" {
		t.Errorf("EmbedDirect = %q", got)
	}
	if got := EmbedPing("a.b"); got != "aiforge.embed.v1.a%2Eb.ping" {
		t.Errorf("EmbedPing = %q", got)
	}
	if matches("aiforge.infer.v1.>", Embed("m")) || matches("aiforge.embed.v1.>", Infer("m")) {
		t.Errorf("the inference and embedding families overlap")
	}
	if got := InferControl("w1"); got != "aiforge.infer.ctl.v1.w1" {
		t.Errorf("InferControl = %q", got)
	}
	if got := DeadLetter(StreamDocs, "embedder"); got != "aiforge.deadletter.DOCS.embedder" || !matches(DeadLetterOf(StreamDocs), got) ||
		matches(DeadLetterOf(StreamUsage), got) || len(streamsOf(got)) != 1 || streamsOf(got)[0] != StreamDeadLetter {
		t.Errorf("dead letter subject %q", got)
	}
}

// TestPublishEveryEvent publishes every golden event through a real
// JetStream: each lands on its own subject in the stream of its domain.
func TestPublishEveryEvent(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	for _, ev := range goldenEvents {
		ack, err := Publish(ctx, js, ev, Envelope{Source: "test"})
		if err != nil {
			t.Fatalf("%s: %v", ev.EventType(), err)
		}
		st, err := js.Stream(ctx, ack.Stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetMsg(ctx, ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != ev.Subject() || m.Header.Get(HeaderType) != ev.EventType() || streamsOf(m.Subject)[0] != ack.Stream {
			t.Errorf("%s stored on %s in %s", ev.EventType(), m.Subject, ack.Stream)
		}
	}
}
