package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
)

// TestVectorStoresAPIWithTheSDK covers the store and file records, the
// ingest request on the bus, and the file status following the document
// flow's events (published here by hand in place of the pipeline).
func TestVectorStoresAPIWithTheSDK(t *testing.T) {
	ns := natstest.Server(t)
	s := externalStack(t, ns.ClientURL(), []string{"edge"}, nil)
	acme, _ := s.tenantKey("acme")
	globex, _ := s.tenantKey("globex")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(acme), option.WithMaxRetries(0))
	other := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(globex), option.WithMaxRetries(0))

	file, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("# Guide\n\nConnect the device."), "guide.md", "text/markdown"), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := client.VectorStores.New(ctx, openai.VectorStoreNewParams{Name: openai.String("docs"), Metadata: map[string]string{"team": "support"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(vs.ID, "vs_") || vs.Name != "docs" || vs.FileCounts.Total != 0 {
		t.Fatalf("store = %+v", vs)
	}
	vf, err := client.VectorStores.Files.New(ctx, vs.ID, openai.VectorStoreFileNewParams{
		FileID:     file.ID,
		Attributes: map[string]openai.VectorStoreFileNewParamsAttributeUnion{"lang": {OfString: openai.String("en")}, "year": {OfFloat: openai.Float(2026)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if vf.Status != openai.VectorStoreFileStatusInProgress || vf.VectorStoreID != vs.ID || vf.ChunkingStrategy.Static.MaxChunkSizeTokens != 800 {
		t.Fatalf("store file = %+v", vf)
	}

	// The ingest request is on the DOCS stream.
	js, _ := jetstream.New(natstest.Conn(t, ns, "docs-reader"))
	stream, err := js.Stream(ctx, events.StreamDocs)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, events.Subject(events.TypeDocIngestRequestedV1, "acme"))
	if err != nil || !strings.Contains(string(m.Data), file.ID) || !strings.Contains(string(m.Data), `"lang":"en"`) {
		t.Fatalf("ingest request: %v %s", err, m.Data)
	}

	// Another tenant sees neither the store nor its files.
	var apiErr *openai.Error
	if _, err := other.VectorStores.Get(ctx, vs.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("other tenant: %v", err)
	}
	if _, err := other.VectorStores.Files.New(ctx, vs.ID, openai.VectorStoreFileNewParams{FileID: file.ID}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("other tenant adding a file: %v", err)
	}

	// The status follows the flow's events.
	ref := events.DocRef{Tenant: "acme", StoreID: vs.ID, FileID: file.ID}
	if _, err := events.Publish(ctx, js, events.DocIndexedV1{DocRef: ref, Chunks: 1}, events.Envelope{Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool {
		got, err := client.VectorStores.Files.Get(ctx, vs.ID, file.ID)
		return err == nil && got.Status == openai.VectorStoreFileStatusCompleted
	}, "file completed")
	got, _ := client.VectorStores.Get(ctx, vs.ID)
	if got.FileCounts.Completed != 1 || got.FileCounts.Total != 1 || got.Status != openai.VectorStoreStatusCompleted {
		t.Fatalf("store after indexing = %+v", got.FileCounts)
	}
	failedRef := ref
	if _, err := events.Publish(ctx, js, events.DocFailedV1{DocRef: failedRef, Stage: "ingest", Code: "unsupported_file", Message: "no text layer"}, events.Envelope{Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool {
		got, err := client.VectorStores.Files.Get(ctx, vs.ID, file.ID)
		return err == nil && got.Status == openai.VectorStoreFileStatusFailed && got.LastError.Message == "no text layer"
	}, "file failed with last_error")

	// A step that dead-lettered the file's message fails it as well.
	if _, err := events.Publish(ctx, js, events.DocIndexedV1{DocRef: ref, Chunks: 1}, events.Envelope{Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool {
		got, err := client.VectorStores.Files.Get(ctx, vs.ID, file.ID)
		return err == nil && got.Status == openai.VectorStoreFileStatusCompleted
	}, "file completed again")
	dead := events.DocChunkedV1{DocRef: ref, ChunksKey: "k", Chunks: 1}
	dl, err := events.Marshal(dead, events.Envelope{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	dl.Subject = events.DeadLetter(events.StreamDocs, "embedder")
	if _, err := js.PublishMsg(ctx, dl); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool {
		got, err := client.VectorStores.Files.Get(ctx, vs.ID, file.ID)
		return err == nil && got.Status == openai.VectorStoreFileStatusFailed && strings.Contains(got.LastError.Message, "gave up")
	}, "dead-lettered file failed")

	list, err := client.VectorStores.Files.List(ctx, vs.ID, openai.VectorStoreFileListParams{})
	if err != nil || len(list.Data) != 1 {
		t.Fatalf("files: %v %+v", err, list)
	}
	stores, err := client.VectorStores.List(ctx, openai.VectorStoreListParams{})
	if err != nil || len(stores.Data) != 1 || stores.Data[0].ID != vs.ID {
		t.Fatalf("stores: %v %+v", err, stores)
	}
	if _, err := client.VectorStores.Update(ctx, vs.ID, openai.VectorStoreUpdateParams{Name: openai.String("renamed")}); err != nil {
		t.Fatal(err)
	}
	if d, err := client.VectorStores.Files.Delete(ctx, vs.ID, file.ID); err != nil || !d.Deleted {
		t.Fatalf("remove file: %v", err)
	}
	if _, err := stream.GetLastMsgForSubject(ctx, events.Subject(events.TypeDocRemovedV1, "acme")); err != nil {
		t.Fatalf("no removal event: %v", err)
	}
	if d, err := client.VectorStores.Delete(ctx, vs.ID); err != nil || !d.Deleted {
		t.Fatalf("delete store: %v", err)
	}
	if _, err := client.VectorStores.Get(ctx, vs.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("deleted store: %v", err)
	}
}
