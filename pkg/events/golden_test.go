package events

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

var update = flag.Bool("update", false, "write the golden fixtures in testdata/golden that do not exist yet")

// goldenEvents holds one fixed, fully populated value per event type and
// version; testdata/golden/<event type>.json is its wire body, indented.
//
// The rule: a shipped version never changes. Its Go fields keep their names,
// types and meaning, its value here and its fixture are never edited, and
// every fixture ever written keeps decoding into the current Go type of its
// version (TestGoldenFixturesDecode). A new field is a new version: a new Go
// type beside the old one with its own type name, subject and fixture
// (UsageRecordedV2 beside UsageRecordedV1, ModelVerdictV2 beside
// ModelVerdictV1), and consumers read both. The one alternative is an
// optional field (omitempty, its zero value meaning what its absence meant)
// that every old fixture still decodes into unchanged.
//
// A change that makes TestGolden fail is a wire-format break of a shipped
// version. `go test ./pkg/events -run Golden -update` writes only the
// fixtures that do not exist yet, for a version that has not shipped; it
// never rewrites one.
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
	&UsageRecordedV2{
		UsageRecordedV1: UsageRecordedV1{
			RequestID:          "req-01J0A1B2C3D4E5F6G7H8J9K0M1",
			Tenant:             "acme",
			KeyID:              "key-7f3a",
			Model:              "support-lora",
			Endpoint:           EndpointCompletions,
			Stream:             true,
			PromptTokens:       2048,
			CachedPromptTokens: 512,
			CompletionTokens:   99,
			Estimated:          true,
			Status:             UsageStatusCanceled,
			ErrorCode:          "client_closed",
			LatencyMS:          950.5,
			TTFTMS:             88.25,
			WorkerID:           "worker-b2",
			Reporter:           "worker-b2",
			StartedAt:          time.Date(2026, 2, 3, 4, 5, 6, 700000000, time.UTC),
			FinishedAt:         time.Date(2026, 2, 3, 4, 5, 7, 650500000, time.UTC),
		},
		Reservations: []Reservation{{Key: "key/key-7f3a/month/2026-02", NanoUSD: 1500000}},
	},
	&UsageRecordedV3{
		UsageRecordedV2: UsageRecordedV2{
			UsageRecordedV1: UsageRecordedV1{
				RequestID:          "batch_01HZX3J4K5-l41",
				Tenant:             "acme",
				KeyID:              "key-7f3a",
				Model:              "meta-llama/Llama-3.1-8B-Instruct",
				Endpoint:           EndpointChatCompletions,
				Stream:             true,
				PromptTokens:       300,
				CachedPromptTokens: 100,
				CompletionTokens:   40,
				Estimated:          true,
				Status:             UsageStatusError,
				ErrorCode:          "engine_error",
				LatencyMS:          4100.5,
				TTFTMS:             1200.25,
				WorkerID:           "worker-c3",
				Reporter:           "worker-c3",
				StartedAt:          time.Date(2026, 11, 3, 4, 5, 6, 0, time.UTC),
				FinishedAt:         time.Date(2026, 11, 3, 4, 5, 10, 100500000, time.UTC),
			},
			Reservations: []Reservation{{Key: "tenant/acme/month/2026-11", NanoUSD: 2500}},
		},
		Batch:   true,
		BatchID: "batch_01HZX3J4K5",
	},
	&UsageRecordedV4{
		UsageRecordedV3: UsageRecordedV3{
			UsageRecordedV2: UsageRecordedV2{
				UsageRecordedV1: UsageRecordedV1{
					RequestID:          "req-01K0ADM1SS10N",
					Tenant:             "acme",
					KeyID:              "key-7f3a",
					Model:              "chat-large",
					Endpoint:           EndpointChatCompletions,
					Stream:             true,
					PromptTokens:       120,
					CachedPromptTokens: 120,
					CompletionTokens:   9,
					Estimated:          true,
					Status:             UsageStatusCanceled,
					ErrorCode:          "client_closed",
					LatencyMS:          0.8,
					TTFTMS:             0.5,
					WorkerID:           "edge-1",
					Reporter:           "edge-1",
					StartedAt:          time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
					FinishedAt:         time.Date(2026, 12, 1, 10, 0, 0, 800000, time.UTC),
				},
				Reservations: []Reservation{{Key: "tenant/acme/month/2026-12", NanoUSD: 700}},
			},
			Batch:   true,
			BatchID: "batch_golden",
		},
		AdmissionAction:   AdmissionFlagged,
		AdmissionCategory: "jailbreak",
		AdmissionScore:    0.91,
		Router:            "auto",
		RouteClass:        "iac_devops",
		Cache:             CacheSimilar,
	},
	&UsageRecordedV5{
		UsageRecordedV4: UsageRecordedV4{
			UsageRecordedV3: UsageRecordedV3{
				UsageRecordedV2: UsageRecordedV2{
					UsageRecordedV1: UsageRecordedV1{
						RequestID:          "req-01K1PR0MPT5",
						Tenant:             "acme",
						KeyID:              "key-7f3a",
						Model:              "chat-large",
						Endpoint:           EndpointChatCompletions,
						Stream:             true,
						PromptTokens:       300,
						CachedPromptTokens: 100,
						CompletionTokens:   42,
						Estimated:          true,
						Status:             UsageStatusError,
						ErrorCode:          "engine_error",
						LatencyMS:          12.5,
						TTFTMS:             3.25,
						WorkerID:           "worker-c3",
						Reporter:           "worker-c3",
						StartedAt:          time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC),
						FinishedAt:         time.Date(2027, 1, 2, 3, 4, 6, 0, time.UTC),
					},
					Reservations: []Reservation{{Key: "key/key-7f3a/day/2027-01-02", NanoUSD: 1200}},
				},
				Batch:   true,
				BatchID: "batch_prompted",
			},
			AdmissionAction:   AdmissionAllowed,
			AdmissionCategory: "benign",
			AdmissionScore:    0.05,
			Router:            "auto",
			RouteClass:        "support",
			Cache:             CacheExact,
		},
		PromptID:      "pmpt_0123456789abcdef",
		PromptVersion: "3",
	},
	&AdmissionVerdictV1{
		RequestID:  "req-01K0ADM1SS10N",
		Tenant:     "acme",
		KeyID:      "key-7f3a",
		Model:      "auto",
		Endpoint:   EndpointChatCompletions,
		Action:     AdmissionBlocked,
		Category:   "injection",
		Score:      0.97,
		Classifier: "builtin",
		PII:        []string{"email"},
		PIIAction:  "mask",
		At:         time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
	},
	&SandboxUsageV1{
		ID:               "exec_01K0SANDB0X",
		Tenant:           "acme",
		KeyID:            "key-7f3a",
		ContainerID:      "cntr_01K0SANDB0X",
		Kind:             SandboxUsageExec,
		Language:         "python",
		Status:           UsageStatusError,
		ErrorCode:        "exec_timeout",
		ExitCode:         -1,
		WallMS:           2004,
		CPUMS:            1990,
		MemoryLimitBytes: 1 << 30,
		MemoryPeakBytes:  48 << 20,
		GBSeconds:        2.004,
		Warm:             true,
		Node:             "sandbox-1",
		StartedAt:        time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		FinishedAt:       time.Date(2026, 12, 1, 10, 0, 2, 4000000, time.UTC),
	},
	&UsageCorrectedV1{
		CorrectionID:            "corr_2b9e",
		RequestID:               "req-01HZX3J4K5M6N7P8Q9R0S1T2U3",
		Tenant:                  "acme",
		KeyID:                   "key-7f3a",
		Model:                   "meta-llama/Llama-3.1-8B-Instruct",
		Endpoint:                EndpointEmbeddings,
		At:                      time.Date(2025, 6, 1, 9, 30, 0, 125000000, time.UTC),
		DeltaRequests:           -1,
		DeltaPromptTokens:       -1234,
		DeltaCachedPromptTokens: -1024,
		DeltaCompletionTokens:   -567,
		DeltaErrors:             -1,
		Reason:                  "duplicate request replayed by a client bug",
	},
	&BudgetAlertV1{
		Scope:         "tenant",
		ID:            "acme",
		Tenant:        "acme",
		Period:        "month",
		PeriodID:      "2026-02",
		SoftBudgetUSD: 100,
		SpentUSD:      100.25,
		At:            time.Date(2026, 2, 17, 13, 0, 0, 0, time.UTC),
	},
	&DocIngestRequestedV1{
		DocRef:         goldenDocRef,
		ObjectKey:      "files/acme/file-9c1d",
		Filename:       "handbook.pdf",
		ContentSHA256:  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		Chunking:       Chunking{MaxTokens: 800, OverlapTokens: 400},
		EmbeddingModel: "bge-small-en",
		Attributes:     map[string]any{"department": "support", "priority": 2.5, "public": true},
		RequestedAt:    time.Date(2026, 3, 4, 8, 0, 0, 0, time.UTC),
	},
	&DocChunkedV1{
		DocRef:         goldenDocRef,
		ChunksKey:      "chunks/acme/vs_4f2a/file-9c1d/run-71e0.jsonl",
		Chunks:         42,
		Pages:          7,
		ContentSHA256:  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		EmbeddingModel: "bge-small-en",
		Attributes:     map[string]any{"department": "support"},
		Warnings:       []string{"page 3 has no text layer"},
	},
	&DocEmbeddedV1{
		DocRef:        goldenDocRef,
		VectorsKey:    "vectors/acme/vs_4f2a/file-9c1d/run-71e0.jsonl",
		Chunks:        42,
		Dense:         true,
		ContentSHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	},
	&DocIndexedV1{
		DocRef:        goldenDocRef,
		Chunks:        42,
		ContentSHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	},
	&DocFailedV1{
		DocRef:  goldenDocRef,
		Stage:   "embed",
		Code:    "server_error",
		Message: "the embedding model is not served",
	},
	&DocRemovedV1{DocRef: goldenDocRef},
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
		Name:       "llama-lora-support",
		Version:    3,
		Status:     VerdictRejected,
		Reasons:    []ModelReason{{Code: "code_bearing_pickle", Message: "pickle content is code-bearing and never loaded", File: "training_args.bin"}},
		Files:      []ModelFile{{Path: "training_args.bin", Size: 4664, SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"}},
		License:    "needs-review",
		Parameters: 262144,
		DTypes:     map[string]int64{"BF16": 262144},
		Format:     "safetensors",
		ScannedAt:  time.Date(2026, 11, 29, 10, 0, 1, 500000000, time.UTC),
	},
	&ModelVerdictV2{
		ModelVerdictV1: ModelVerdictV1{
			Name:       "llama-lora-support",
			Version:    4,
			Status:     VerdictRejected,
			Reasons:    []ModelReason{{Code: "code_bearing_pickle", Message: "pickle content is code-bearing and never loaded", File: "training_args.bin"}},
			Files:      []ModelFile{{Path: "training_args.bin", Size: 4664, SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"}},
			License:    "needs-review",
			Parameters: 262144,
			DTypes:     map[string]int64{"BF16": 262144},
			Format:     "safetensors",
			ScannedAt:  time.Date(2026, 12, 2, 10, 0, 1, 500000000, time.UTC),
		},
		LicenseName:           "llama3",
		LicenseLink:           "https://llama.meta.com/llama3/license",
		ChatTemplate:          "{% for m in messages %}{{ m.content }}{% endfor %}",
		ChatTemplateTruncated: true,
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
	&BatchLineV1{
		BatchID:  "batch_01HZX3J4K5",
		Tenant:   "acme",
		KeyID:    "key-7f3a",
		Index:    41,
		CustomID: "request-42",
		URL:      "/v1/chat/completions",
		Model:    "meta-llama/Llama-3.1-8B-Instruct",
		// Indented as the fixture holds it, so that it decodes back equal.
		Body:            json.RawMessage("{\n    \"model\": \"meta-llama/Llama-3.1-8B-Instruct\",\n    \"max_tokens\": 16\n  }"),
		EstimatedTokens: 17,
	},
	&BatchResultV1{
		BatchID:      "batch_01HZX3J4K5",
		Tenant:       "acme",
		Index:        41,
		CustomID:     "request-42",
		RequestID:    "batch_01HZX3J4K5-l41",
		StatusCode:   500,
		Body:         json.RawMessage("{\n    \"id\": \"chatcmpl-1\",\n    \"object\": \"chat.completion\"\n  }"),
		BodyObject:   "tenants/acme/batches/batch_01HZX3J4K5/results/41",
		ErrorCode:    "engine_error",
		ErrorMessage: "golden values populate every field",
		Tokens:       25,
		FinishedAt:   time.Date(2025, 6, 1, 9, 30, 2, 250000000, time.UTC),
	},
	&BatchFinishedV1{
		BatchID:   "batch_01HZX3J4K5",
		Tenant:    "acme",
		Status:    "completed",
		Completed: 99,
		Failed:    1,
		At:        time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC),
	},
}

var goldenDocRef = DocRef{Tenant: "acme", StoreID: "vs_4f2a", FileID: "file-9c1d", Run: "run-71e0"}

// goldenRegistry knows every event type and version: those of goldenEvents,
// which TestEveryEventTypeHasGolden holds to every type of the package.
func goldenRegistry(t *testing.T) *Registry {
	t.Helper()
	protos := make([]func() Event, 0, len(goldenEvents))
	seen := map[string]bool{}
	for _, ev := range goldenEvents {
		if seen[ev.EventType()] {
			t.Fatalf("two golden values of %s", ev.EventType())
		}
		seen[ev.EventType()] = true
		typ := reflect.TypeOf(ev).Elem()
		protos = append(protos, func() Event { return reflect.New(typ).Interface().(Event) })
	}
	return NewRegistry(protos...)
}

func goldenPath(typ string) string { return filepath.Join("testdata", "golden", typ+".json") }

func TestGolden(t *testing.T) {
	reg := goldenRegistry(t)
	for _, want := range goldenEvents {
		t.Run(want.EventType(), func(t *testing.T) {
			assertFullyPopulated(t, want.EventType(), reflect.ValueOf(want).Elem())
			m, err := Marshal(want, Envelope{ID: "golden", Source: "golden"})
			if err != nil {
				t.Fatal(err)
			}
			var wire bytes.Buffer
			if err := json.Indent(&wire, m.Data, "", "  "); err != nil {
				t.Fatal(err)
			}
			wire.WriteByte('\n')

			path := goldenPath(want.EventType())
			if _, err := os.Stat(path); *update && os.IsNotExist(err) {
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

// TestGoldenFixturesDecode decodes every fixture ever written into the
// current Go type of its version (the file name is the type name): strictly,
// so a field a fixture carries cannot be dropped from the type, and back to
// the same JSON, so none is read differently.
func TestGoldenFixturesDecode(t *testing.T) {
	reg := goldenRegistry(t)
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < len(goldenEvents) {
		t.Fatalf("%d fixtures for %d event types", len(files), len(goldenEvents))
	}
	for _, path := range files {
		typ := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(typ, func(t *testing.T) {
			fixture, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			mk, ok := reg.types[typ]
			if !ok {
				t.Fatalf("fixture %s has no registered event type", path)
			}
			ev := mk()
			dec := json.NewDecoder(bytes.NewReader(fixture))
			dec.DisallowUnknownFields()
			if err := dec.Decode(ev); err != nil {
				t.Fatalf("decode %s into %T: %v", path, ev, err)
			}
			if err := ev.Validate(); err != nil {
				t.Fatalf("%s decodes into an invalid %T: %v", path, ev, err)
			}
			if ev.EventType() != typ {
				t.Fatalf("%s decodes into %T of type %s", path, ev, ev.EventType())
			}
			h := nats.Header{}
			h.Set(HeaderType, typ)
			if _, _, err := reg.Decode(h, fixture); err != nil {
				t.Fatal(err)
			}
			again, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			var want, got bytes.Buffer
			if err := json.Compact(&want, fixture); err != nil {
				t.Fatal(err)
			}
			if err := json.Compact(&got, again); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("%s reads back as\n%s\nwant\n%s", path, got.Bytes(), want.Bytes())
			}
		})
	}
}

// TestEveryEventTypeHasGolden fails when the package declares an event type
// (a type with an EventType method) that has no golden value, and so no
// fixture and no place in goldenRegistry.
func TestEveryEventTypeHasGolden(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != "EventType" {
				continue
			}
			recv := fn.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			declared = append(declared, recv.(*ast.Ident).Name)
		}
	}
	golden := map[string]string{}
	for _, ev := range goldenEvents {
		golden[reflect.TypeOf(ev).Elem().Name()] = ev.EventType()
	}
	if len(declared) < 14 {
		t.Fatalf("found only %d event types: %v", len(declared), declared)
	}
	for _, name := range declared {
		typ, ok := golden[name]
		if !ok {
			t.Errorf("event type %s has no golden value in goldenEvents (and so no fixture)", name)
			continue
		}
		if _, err := os.Stat(goldenPath(typ)); err != nil {
			t.Errorf("event type %s (%s) has no fixture: %v", name, typ, err)
		}
	}
	for name := range golden {
		if !slices.Contains(declared, name) {
			t.Errorf("golden value of %s, which the package does not declare", name)
		}
	}
}

// assertFullyPopulated fails if a field of the golden value is zero, so a
// fixture exercises every field; it looks into embedded and nested structs
// and the elements of slices.
func assertFullyPopulated(t *testing.T, typ string, v reflect.Value) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f, sf := v.Field(i), v.Type().Field(i)
		if f.IsZero() {
			t.Errorf("golden %s leaves %s.%s zero", typ, v.Type().Name(), sf.Name)
			continue
		}
		switch {
		case f.Kind() == reflect.Struct && f.Type() != reflect.TypeFor[time.Time]():
			assertFullyPopulated(t, typ, f)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct:
			for j := 0; j < f.Len(); j++ {
				assertFullyPopulated(t, typ, f.Index(j))
			}
		}
	}
}
