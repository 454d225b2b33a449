package events

import (
	"errors"
	"fmt"
	"time"
)

// The document flow: a file added to a vector store is ingested (parsed and
// chunked), embedded (dense and sparse vectors) and indexed; each step
// publishes its outcome so the file's status is always known. Every document
// event is keyed by tenant (subjects.go).

// DocRef names one file of one vector store of a tenant.
type DocRef struct {
	Tenant  string `json:"tenant"`
	StoreID string `json:"vector_store_id"`
	FileID  string `json:"file_id"`
	// Run identifies one processing of the file (the ingest request's id);
	// each step's event ids derive from it, so processing the same file
	// again is not mistaken for a duplicate of the last run.
	Run string `json:"run,omitempty"`
}

// EventID is the id of a step's event for this run.
func (r DocRef) EventID(step string) string {
	return step + "-" + r.StoreID + "-" + r.FileID + "-" + r.Run
}

func (r DocRef) validate() error {
	if r.Tenant == "" || r.StoreID == "" || r.FileID == "" {
		return errors.New("tenant, vector_store_id and file_id are required")
	}
	return nil
}

// Chunking is a vector store file's chunking strategy (OpenAI's "static"
// values; "auto" resolves to 800/400).
type Chunking struct {
	MaxTokens     int `json:"max_chunk_size_tokens"`
	OverlapTokens int `json:"chunk_overlap_tokens"`
}

// DocIngestRequestedV1 asks for a file to be processed for a store.
type DocIngestRequestedV1 struct {
	DocRef
	ObjectKey      string         `json:"object_key"`
	Filename       string         `json:"filename"`
	ContentSHA256  string         `json:"content_sha256"`
	Chunking       Chunking       `json:"chunking"`
	EmbeddingModel string         `json:"embedding_model,omitempty"`
	Attributes     map[string]any `json:"attributes,omitempty"`
	RequestedAt    time.Time      `json:"requested_at"`
}

func (DocIngestRequestedV1) EventType() string { return TypeDocIngestRequestedV1 }

func (e DocIngestRequestedV1) Subject() string { return Subject(TypeDocIngestRequestedV1, e.Tenant) }

func (e DocIngestRequestedV1) Validate() error {
	errs := []error{e.DocRef.validate()}
	if e.ObjectKey == "" {
		errs = append(errs, errors.New("object_key is required"))
	}
	if e.Chunking.MaxTokens < 100 || e.Chunking.MaxTokens > 4096 || e.Chunking.OverlapTokens < 0 || e.Chunking.OverlapTokens > e.Chunking.MaxTokens/2 {
		errs = append(errs, fmt.Errorf("chunking %+v out of range (max 100-4096, overlap 0-max/2)", e.Chunking))
	}
	return errors.Join(errs...)
}

// DocChunkedV1: the file's chunks are stored as JSON lines at ChunksKey.
type DocChunkedV1 struct {
	DocRef
	ChunksKey      string         `json:"chunks_key"`
	Chunks         int            `json:"chunks"`
	Pages          int            `json:"pages"`
	ContentSHA256  string         `json:"content_sha256"`
	EmbeddingModel string         `json:"embedding_model,omitempty"`
	Attributes     map[string]any `json:"attributes,omitempty"`
	Warnings       []string       `json:"warnings,omitempty"`
}

func (DocChunkedV1) EventType() string { return TypeDocChunkedV1 }

func (e DocChunkedV1) Subject() string { return Subject(TypeDocChunkedV1, e.Tenant) }

func (e DocChunkedV1) Validate() error {
	errs := []error{e.DocRef.validate()}
	if e.ChunksKey == "" || e.Chunks < 0 {
		errs = append(errs, errors.New("chunks_key is required and chunks must not be negative"))
	}
	return errors.Join(errs...)
}

// DocEmbeddedV1: the file's chunks with their vectors are at VectorsKey.
type DocEmbeddedV1 struct {
	DocRef
	VectorsKey    string `json:"vectors_key"`
	Chunks        int    `json:"chunks"`
	Dense         bool   `json:"dense"`
	ContentSHA256 string `json:"content_sha256"`
}

func (DocEmbeddedV1) EventType() string { return TypeDocEmbeddedV1 }

func (e DocEmbeddedV1) Subject() string { return Subject(TypeDocEmbeddedV1, e.Tenant) }

func (e DocEmbeddedV1) Validate() error {
	errs := []error{e.DocRef.validate()}
	if e.VectorsKey == "" {
		errs = append(errs, errors.New("vectors_key is required"))
	}
	return errors.Join(errs...)
}

// DocIndexedV1: the file is searchable.
type DocIndexedV1 struct {
	DocRef
	Chunks        int    `json:"chunks"`
	ContentSHA256 string `json:"content_sha256"`
}

func (DocIndexedV1) EventType() string { return TypeDocIndexedV1 }

func (e DocIndexedV1) Subject() string { return Subject(TypeDocIndexedV1, e.Tenant) }

func (e DocIndexedV1) Validate() error { return e.DocRef.validate() }

// DocFailedV1: a step gave up on the file; Code and Message become the
// file's last_error.
type DocFailedV1 struct {
	DocRef
	Stage   string `json:"stage"` // ingest, embed, index
	Code    string `json:"code"`  // server_error, unsupported_file, invalid_file
	Message string `json:"message"`
}

func (DocFailedV1) EventType() string { return TypeDocFailedV1 }

func (e DocFailedV1) Subject() string { return Subject(TypeDocFailedV1, e.Tenant) }

func (e DocFailedV1) Validate() error {
	errs := []error{e.DocRef.validate()}
	if e.Stage == "" || e.Code == "" || e.Message == "" {
		errs = append(errs, errors.New("stage, code and message are required"))
	}
	return errors.Join(errs...)
}

// DocRemovedV1: the file left the store (or the store was deleted): its
// chunks go.
type DocRemovedV1 struct {
	DocRef
}

func (DocRemovedV1) EventType() string { return TypeDocRemovedV1 }

func (e DocRemovedV1) Subject() string { return Subject(TypeDocRemovedV1, e.Tenant) }

func (e DocRemovedV1) Validate() error { return e.DocRef.validate() }

// DocChunk is one line (JSON) of the chunks object a DocChunkedV1 points at,
// and of the vectors object of a DocEmbeddedV1 (which adds Terms, Length
// and, with an embedding model, Dense).
type DocChunk struct {
	Index       int               `json:"index"`
	Text        string            `json:"text"`
	Tokens      int               `json:"tokens"`
	Pages       []int             `json:"pages,omitempty"`
	HeadingPath []string          `json:"heading_path,omitempty"`
	Hash        string            `json:"hash"`
	Terms       map[string]uint32 `json:"terms,omitempty"`
	Length      int               `json:"length,omitempty"`
	Dense       []float32         `json:"dense,omitempty"`
}
