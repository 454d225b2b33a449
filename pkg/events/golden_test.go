package events

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden fixtures in testdata/golden")

// goldenEvents holds one fixed, fully populated value per shipped event
// version; testdata/golden/<event type>.json is its wire body, indented.
//
// A shipped fixture is never edited, and neither is its value here: the
// fixture is what consumers already in production decode. A change that
// makes this test fail is a wire-format break. To change an event, add a new
// version (UsageRecordedV2, "aiforge.usage.recorded.v2") with a new fixture
// file beside the old one; run `go test ./events -run Golden -update` only to
// create the fixture of a version that has not shipped.
var goldenEvents = []Event{
	&UsageRecordedV1{
		RequestID:          "req-01HZX3J4K5M6N7P8Q9R0S1T2U3",
		Tenant:             "acme",
		KeyID:              "key-7f3a",
		Model:              "meta-llama/Llama-3.1-8B-Instruct",
		Endpoint:           EndpointChatCompletions,
		Stream:             true,
		PromptTokens:       1234,
		CachedPromptTokens: 1024,
		CompletionTokens:   567,
		Estimated:          true,
		Status:             UsageStatusError,
		ErrorCode:          "engine_disconnected",
		LatencyMS:          1875.25,
		TTFTMS:             142.5,
		WorkerID:           "worker-a1",
		Reporter:           "edge-0",
		StartedAt:          time.Date(2025, 6, 1, 9, 30, 0, 125000000, time.UTC),
		FinishedAt:         time.Date(2025, 6, 1, 9, 30, 2, 250000000, time.UTC),
	},
	&ModelUploadedV1{
		Name:       "llama-lora-support",
		Version:    3,
		Kind:       ModelKindAdapter,
		BaseModel:  "meta-llama/Llama-3.1-8B-Instruct",
		Source:     ModelSource{Type: ModelSourceHub, Repo: "acme/support-lora", Revision: "main", Commit: "0123456789abcdef0123456789abcdef01234567"},
		Prefix:     "models/llama-lora-support/v3/",
		Files:      []ModelFile{{Path: "adapter_model.safetensors", Size: 1048584, SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}},
		Manifest:   map[string]string{"adapter_model.safetensors": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
		UploadedAt: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC),
	},
	&ModelVerdictV1{
		Name:                  "llama-lora-support",
		Version:               3,
		Status:                VerdictRejected,
		Reasons:               []ModelReason{{Code: "code_bearing_pickle", Message: "pickle content is code-bearing and never loaded", File: "training_args.bin"}},
		Files:                 []ModelFile{{Path: "training_args.bin", Size: 4664, SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"}},
		License:               "needs-review",
		LicenseName:           "llama3",
		LicenseLink:           "https://llama.meta.com/llama3/license",
		Parameters:            262144,
		DTypes:                map[string]int64{"BF16": 262144},
		Format:                "safetensors",
		ChatTemplate:          "{% for m in messages %}{{ m.content }}{% endfor %}",
		ChatTemplateTruncated: true,
		ScannedAt:             time.Date(2026, 11, 29, 10, 0, 1, 500000000, time.UTC),
	},
	&ModelPullRequestedV1{
		PullID:      "pull-5e1c",
		Name:        "llama-lora-support",
		Kind:        ModelKindAdapter,
		BaseModel:   "meta-llama/Llama-3.1-8B-Instruct",
		Repo:        "acme/support-lora",
		Revision:    "main",
		RequestedAt: time.Date(2026, 11, 29, 9, 59, 0, 0, time.UTC),
	},
}

func goldenRegistry() *Registry {
	return NewRegistry(
		func() Event { return new(UsageRecordedV1) },
		func() Event { return new(ModelUploadedV1) },
		func() Event { return new(ModelVerdictV1) },
		func() Event { return new(ModelPullRequestedV1) },
	)
}

func TestGolden(t *testing.T) {
	reg := goldenRegistry()
	for _, want := range goldenEvents {
		t.Run(want.EventType(), func(t *testing.T) {
			if !reg.Known(want.EventType()) {
				t.Fatalf("%s is not in the golden registry", want.EventType())
			}
			assertFullyPopulated(t, want)
			m, err := Marshal("aiforge.golden", want, Envelope{ID: "golden", Source: "golden"})
			if err != nil {
				t.Fatal(err)
			}
			var wire bytes.Buffer
			if err := json.Indent(&wire, m.Data, "", "  "); err != nil {
				t.Fatal(err)
			}
			wire.WriteByte('\n')

			path := filepath.Join("testdata", "golden", want.EventType()+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, wire.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			fixture, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create the fixture of a new version)", err)
			}
			if !bytes.Equal(wire.Bytes(), fixture) {
				t.Errorf("wire format of %s changed; shipped fixtures are never edited, add a new version\n got: %s\nwant: %s", want.EventType(), wire.Bytes(), fixture)
			}

			_, got, err := reg.Decode(m.Header, fixture)
			if err != nil {
				t.Fatalf("decode fixture: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("fixture decodes to\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// assertFullyPopulated fails if a field of the golden value is zero, so a
// fixture exercises every field.
func assertFullyPopulated(t *testing.T, ev Event) {
	t.Helper()
	v := reflect.ValueOf(ev).Elem()
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Errorf("golden %s leaves %s zero", ev.EventType(), v.Type().Field(i).Name)
		}
	}
}
