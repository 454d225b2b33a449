package catalog

import (
	"context"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
)

// The MODELS stream holds verdicts of both versions: a v2 verdict brings the
// licence name and link and the chat template, a v1 verdict none of them.
func TestApplyVerdictOfEveryVersion(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	for _, name := range []string{"acme/v1", "acme/v2"} {
		if _, err := s.AddVersion(ctx, name, events.ModelKindModel, "", Version{Status: StatusScanning}); err != nil {
			t.Fatal(err)
		}
	}
	base := events.ModelVerdictV1{Version: 1, Status: events.VerdictPublished, License: "needs-review", Parameters: 7,
		Format: "gguf", ScannedAt: time.Now().UTC()}

	old := base
	old.Name = "acme/v1"
	got, err := s.ApplyVerdict(ctx, old)
	if err != nil || got.Status != StatusPublished || got.Parameters != 7 || got.License != "needs-review" ||
		got.LicenseName != "" || got.ChatTemplate != "" {
		t.Fatalf("v1 verdict: %+v, %v", got, err)
	}

	cur := events.ModelVerdictV2{ModelVerdictV1: base, LicenseName: "llama3", LicenseLink: "https://llama.meta.com/llama3/license",
		ChatTemplate: "{{ messages }}", ChatTemplateTruncated: true}
	cur.Name = "acme/v2"
	got, err = s.ApplyVerdict(ctx, &cur)
	if err != nil || got.Status != StatusPublished || got.Parameters != 7 || got.LicenseName != "llama3" ||
		got.LicenseLink != cur.LicenseLink || got.ChatTemplate != cur.ChatTemplate || !got.ChatTemplateTruncated {
		t.Fatalf("v2 verdict: %+v, %v", got, err)
	}
}
