// Package vectorstore holds the vector store file record that the edge
// writes to the events.BucketVectorStoreFiles bucket and the retriever reads
// while indexing: its shape, its key scheme and its statuses.
package vectorstore

import "strings"

// Statuses of a vector store file (OpenAI's).
const (
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusFailed     = "failed"
	StatusCancelled  = "cancelled"
)

// FileKey is the KV key of a file's record in a store of a tenant. Passing
// "*" as file gives the filter of every file of the store.
func FileKey(tenant, store, file string) string { return tenant + "." + store + "." + file }

// StoreKey is the KV key of a vector store of a tenant
// (events.BucketVectorStores).
func StoreKey(tenant, store string) string { return tenant + "." + store }

// ValidID reports whether id has the prefix and can be part of a KV key.
func ValidID(prefix, id string) bool {
	return strings.HasPrefix(id, prefix) && len(id) < 80 && !strings.ContainsAny(id, ".*> \t/")
}

// ChunkingStrategy is OpenAI's chunking_strategy.
type ChunkingStrategy struct {
	Type   string          `json:"type"`
	Static *StaticChunking `json:"static,omitempty"`
}

// StaticChunking is the static chunking strategy's bounds.
type StaticChunking struct {
	MaxChunkSizeTokens int `json:"max_chunk_size_tokens"`
	ChunkOverlapTokens int `json:"chunk_overlap_tokens"`
}

// LastError is a vector store file's last_error.
type LastError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// File is OpenAI's vector store file object.
type File struct {
	ID               string           `json:"id"`
	Object           string           `json:"object"`
	UsageBytes       int64            `json:"usage_bytes"`
	CreatedAt        int64            `json:"created_at"`
	VectorStoreID    string           `json:"vector_store_id"`
	Status           string           `json:"status"`
	LastError        *LastError       `json:"last_error"`
	ChunkingStrategy ChunkingStrategy `json:"chunking_strategy"`
	Attributes       map[string]any   `json:"attributes"`
	// Warnings is aiforge's addition, e.g. a chunk size clamped to the
	// embedding model's input window.
	Warnings []string `json:"warnings,omitempty"`
}

// FileRecord is what the bucket stores under FileKey: the API object plus
// the batch that added it and the digest of the content it was added with.
type FileRecord struct {
	File
	BatchID       string `json:"batch_id,omitempty"`
	ContentSHA256 string `json:"content_sha256,omitempty"`
}

// Live reports whether the file should be indexed: a cancelled file's
// chunks are not kept.
func (r FileRecord) Live() bool { return r.Status != StatusCancelled }
