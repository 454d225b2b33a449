package vectorstore

import (
	"encoding/json"
	"testing"
)

// The record's JSON is what edge replicas of every version wrote: its bytes
// must not change.
func TestFileRecordWire(t *testing.T) {
	r := FileRecord{File: File{ID: "file-1", Object: "vector_store.file", UsageBytes: 3, CreatedAt: 7, VectorStoreID: "vs_1",
		Status: StatusInProgress, ChunkingStrategy: ChunkingStrategy{Type: "static", Static: &StaticChunking{800, 400}},
		Attributes: map[string]any{"a": "b"}}, BatchID: "vsfb_1", ContentSHA256: "ab"}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"file-1","object":"vector_store.file","usage_bytes":3,"created_at":7,"vector_store_id":"vs_1","status":"in_progress",` +
		`"last_error":null,"chunking_strategy":{"type":"static","static":{"max_chunk_size_tokens":800,"chunk_overlap_tokens":400}},` +
		`"attributes":{"a":"b"},"batch_id":"vsfb_1","content_sha256":"ab"}`
	if string(b) != want {
		t.Fatalf("record JSON\n got %s\nwant %s", b, want)
	}
	var back FileRecord
	if err := json.Unmarshal(b, &back); err != nil || back.BatchID != "vsfb_1" || back.Status != StatusInProgress || !back.Live() {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	back.Status = StatusCancelled
	if back.Live() {
		t.Fatal("a cancelled file is live")
	}
}

func TestKeys(t *testing.T) {
	if got := FileKey("acme", "vs_1", "file-2"); got != "acme.vs_1.file-2" {
		t.Fatalf("FileKey = %q", got)
	}
	if got := StoreKey("acme", "vs_1"); got != "acme.vs_1" {
		t.Fatalf("StoreKey = %q", got)
	}
	for id, ok := range map[string]bool{"vs_a": true, "vs_a.b": false, "file-1": false, "vs_*": false} {
		if ValidID("vs_", id) != ok {
			t.Errorf("ValidID(vs_, %q) = %v", id, !ok)
		}
	}
}
