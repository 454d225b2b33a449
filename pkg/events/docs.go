package events

import (
	"errors"
	"fmt"
	"time"
)

// The document flow: a file added to a vector store is ingested (parsed and
// chunked), embedded (dense and sparse vectors) and indexed; each step
// publishes its outcome so the file's status is always known.
const (
	// DocsIngestRequestedT asks ingest to process a file of a store: Token(tenant).
	DocsIngestRequestedT = "aiforge.docs.ingest.requested.v1.%s"
	// DocsChunkedT says a file's chunks are in the object store: Token(tenant).
	DocsChunkedT = "aiforge.docs.chunked.v1.%s"
	// DocsEmbeddedT says a file's vectors are in the object store: Token(tenant).
	DocsEmbeddedT = "aiforge.docs.embedded.v1.%s"
	// DocsIndexedT says a file is searchable: Token(tenant).
	DocsIndexedT = "aiforge.docs.indexed.v1.%s"
	// DocsFailedT says a step failed for good: Token(tenant).
	DocsFailedT = "aiforge.docs.failed.v1.%s"
	// DocsRemovedT asks every step to forget a file of a store: Token(tenant).
	DocsRemovedT = "aiforge.docs.removed.v1.%s"
	// DocsAll matches every document event.
	DocsAll = "aiforge.docs.>"
	// StreamDocs holds the document flow's events.
	StreamDocs = "DOCS"
)

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

// TypeDocIngestRequestedV1 is the type name of DocIngestRequestedV1.
const TypeDocIngestRequestedV1 = "aiforge.docs.ingest.requested.v1"

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

// TypeDocChunkedV1 is the type name of DocChunkedV1.
const TypeDocChunkedV1 = "aiforge.docs.chunked.v1"

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

func (e DocChunkedV1) Validate() error {
	errs := []error{e.DocRef.validate()}
	if e.ChunksKey == "" || e.Chunks < 0 {
		errs = append(errs, errors.New("chunks_key is required and chunks must not be negative"))
	}
	return errors.Join(errs...)
}

// TypeDocEmbeddedV1 is the type name of DocEmbeddedV1.
const TypeDocEmbeddedV1 = "aiforge.docs.embedded.v1"

// DocEmbeddedV1: the file's chunks with their vectors are at VectorsKey.
type DocEmbeddedV1 struct {
	DocRef
	VectorsKey    string `json:"vectors_key"`
	Chunks        int    `json:"chunks"`
	Dense         bool   `json:"dense"`
	ContentSHA256 string `json:"content_sha256"`
}

func (DocEmbeddedV1) EventType() string { return TypeDocEmbeddedV1 }

func (e DocEmbeddedV1) Validate() error {
	errs := []error{e.DocRef.validate()}
	if e.VectorsKey == "" {
		errs = append(errs, errors.New("vectors_key is required"))
	}
	return errors.Join(errs...)
}

// TypeDocIndexedV1 is the type name of DocIndexedV1.
const TypeDocIndexedV1 = "aiforge.docs.indexed.v1"

// DocIndexedV1: the file is searchable.
type DocIndexedV1 struct {
	DocRef
	Chunks        int    `json:"chunks"`
	ContentSHA256 string `json:"content_sha256"`
}

func (DocIndexedV1) EventType() string { return TypeDocIndexedV1 }

func (e DocIndexedV1) Validate() error { return e.DocRef.validate() }

// TypeDocFailedV1 is the type name of DocFailedV1.
const TypeDocFailedV1 = "aiforge.docs.failed.v1"

// DocFailedV1: a step gave up on the file; Code and Message become the
// file's last_error.
type DocFailedV1 struct {
	DocRef
	Stage   string `json:"stage"` // ingest, embed, index
	Code    string `json:"code"`  // server_error, unsupported_file, invalid_file
	Message string `json:"message"`
}

func (DocFailedV1) EventType() string { return TypeDocFailedV1 }

func (e DocFailedV1) Validate() error {
	errs := []error{e.DocRef.validate()}
	if e.Stage == "" || e.Code == "" || e.Message == "" {
		errs = append(errs, errors.New("stage, code and message are required"))
	}
	return errors.Join(errs...)
}

// TypeDocRemovedV1 is the type name of DocRemovedV1.
const TypeDocRemovedV1 = "aiforge.docs.removed.v1"

// DocRemovedV1: the file left the store (or the store was deleted): its
// chunks go.
type DocRemovedV1 struct {
	DocRef
}

func (DocRemovedV1) EventType() string { return TypeDocRemovedV1 }

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
