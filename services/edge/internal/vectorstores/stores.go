// Package vectorstores serves OpenAI's Vector stores API (stores, their
// files, file batches and search). Stores and their files are records in KV
// buckets keyed by tenant first (pkg/vectorstore); adding a file publishes
// an ingest request on the DOCS stream, and the file's status follows the
// document flow's events (RunDocStatus). Search asks the retriever over the
// bus (pkg/query).
package vectorstores

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/vectorstore"
	"github.com/aiforge/aiforge/services/edge/internal/files"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// Deps are what the Vector stores API needs.
type Deps struct {
	// StoresKV holds stores and batches (events.BucketVectorStores),
	// FilesKV the file records (events.BucketVectorStoreFiles).
	StoresKV, FilesKV jetstream.KeyValue
	// FileAPI reads the tenant's files.
	FileAPI   *files.Service
	Directory *directory.View
	// Storage is false when no object store is configured.
	Storage bool
	JS      jetstream.JetStream
	// NC asks the retriever.
	NC *nats.Conn
	// Rerank calls rerank models for the rerank stage of searches
	// (rerank.NewClient, on the rerank subject family); nil: no rerank
	// model can be a ranker.
	Rerank     *bridge.Client
	Logger     *slog.Logger
	InstanceID string
}

// Service is the Vector stores API.
type Service struct {
	d   Deps
	log *slog.Logger
}

// New builds the Vector stores API.
func New(d Deps) *Service { return &Service{d: d, log: d.Logger} }

// Routes mounts the Vector stores API.
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/vector_stores", s.tenantAPI(s.createVectorStore))
	mux.HandleFunc("GET /v1/vector_stores", s.tenantAPI(s.listVectorStores))
	mux.HandleFunc("GET /v1/vector_stores/{vs}", s.tenantAPI(s.getVectorStore))
	mux.HandleFunc("POST /v1/vector_stores/{vs}", s.tenantAPI(s.updateVectorStore))
	mux.HandleFunc("DELETE /v1/vector_stores/{vs}", s.tenantAPI(s.deleteVectorStore))
	mux.HandleFunc("POST /v1/vector_stores/{vs}/files", s.tenantAPI(s.addVectorStoreFile))
	mux.HandleFunc("GET /v1/vector_stores/{vs}/files", s.tenantAPI(s.listVectorStoreFiles))
	mux.HandleFunc("GET /v1/vector_stores/{vs}/files/{file}", s.tenantAPI(s.getVectorStoreFile))
	mux.HandleFunc("POST /v1/vector_stores/{vs}/files/{file}", s.tenantAPI(s.updateVectorStoreFile))
	mux.HandleFunc("DELETE /v1/vector_stores/{vs}/files/{file}", s.tenantAPI(s.deleteVectorStoreFile))
	mux.HandleFunc("POST /v1/vector_stores/{vs}/search", s.tenantAPI(s.searchVectorStore))
	s.batchRoutes(mux)
}

func (s *Service) tenantAPI(h func(http.ResponseWriter, *http.Request, *registry.Key)) http.HandlerFunc {
	return httpapi.TenantAPI(s.d.Directory, s.d.Storage, h)
}

func (s *Service) fileError(w http.ResponseWriter, r *http.Request, id string, err error) {
	files.WriteError(w, r, s.log, id, err)
}

type FileCounts struct {
	InProgress int `json:"in_progress"`
	Completed  int `json:"completed"`
	Failed     int `json:"failed"`
	Cancelled  int `json:"cancelled"`
	Total      int `json:"total"`
}

// VectorStore is OpenAI's vector store object.
type VectorStore struct {
	ID           string            `json:"id"`
	Object       string            `json:"object"`
	CreatedAt    int64             `json:"created_at"`
	Name         string            `json:"name"`
	UsageBytes   int64             `json:"usage_bytes"`
	FileCounts   FileCounts        `json:"file_counts"`
	Status       string            `json:"status"`
	ExpiresAfter *ExpiresAfter     `json:"expires_after,omitempty"`
	ExpiresAt    *int64            `json:"expires_at"`
	LastActiveAt int64             `json:"last_active_at"`
	Metadata     map[string]string `json:"metadata"`
	// EmbeddingModel is aiforge's addition: the served model that embeds
	// this store's chunks; empty means keyword (sparse) search only.
	EmbeddingModel string `json:"embedding_model,omitempty"`
}

func countFiles(files []vectorstore.FileRecord) FileCounts {
	var c FileCounts
	for _, f := range files {
		c.Total++
		switch f.Status {
		case vectorstore.StatusInProgress:
			c.InProgress++
		case vectorstore.StatusCompleted:
			c.Completed++
		case vectorstore.StatusFailed:
			c.Failed++
		case vectorstore.StatusCancelled:
			c.Cancelled++
		}
	}
	return c
}

// storeFiles returns the file records of a store, sorted by file id.
func (s *Service) storeFiles(ctx context.Context, tenant, vsID string) ([]vectorstore.FileRecord, error) {
	entries, err := kv.List[vectorstore.FileRecord](ctx, s.d.FilesKV, vectorstore.FileKey(tenant, vsID, "*"))
	if err != nil {
		return nil, err
	}
	return kv.Values(entries), nil
}

// storeWithCounts recomputes file_counts and status from the store's files.
func (s *Service) storeWithCounts(ctx context.Context, tenant string, vs VectorStore) (VectorStore, error) {
	files, err := s.storeFiles(ctx, tenant, vs.ID)
	if err != nil {
		return vs, err
	}
	vs.FileCounts = countFiles(files)
	vs.UsageBytes = 0
	for _, f := range files {
		vs.UsageBytes += f.UsageBytes
	}
	vs.Status = vectorstore.StatusCompleted
	if vs.FileCounts.InProgress > 0 {
		vs.Status = vectorstore.StatusInProgress
	}
	return vs, nil
}

// writeStore answers vs with its counts.
func (s *Service) writeStore(w http.ResponseWriter, r *http.Request, tenant string, vs VectorStore) {
	vs, err := s.storeWithCounts(r.Context(), tenant, vs)
	if err != nil {
		s.fileError(w, r, vs.ID, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, vs)
}

type vsCreate struct {
	Name             *string                       `json:"name"`
	FileIDs          []string                      `json:"file_ids"`
	ExpiresAfter     *ExpiresAfter                 `json:"expires_after"`
	ChunkingStrategy *vectorstore.ChunkingStrategy `json:"chunking_strategy"`
	Metadata         map[string]string             `json:"metadata"`
	EmbeddingModel   string                        `json:"embedding_model"`
	Description      string                        `json:"description"`
}

// ExpiresAfter is a vector store's expiration policy, as OpenAI's schema
// has it: an anchor (last_active_at) and 1 to 365 days. It is recorded and
// echoed; aiforge does not expire stores.
type ExpiresAfter struct {
	Anchor string `json:"anchor"`
	Days   int    `json:"days"`
}

func validExpiresAfter(e *ExpiresAfter) *contracts.Error {
	if e == nil {
		return nil
	}
	if e.Anchor != "last_active_at" {
		return contracts.ErrBadRequest("expires_after.anchor", contracts.CodeInvalidRequest, "Invalid 'expires_after.anchor': expected last_active_at.")
	}
	if e.Days < 1 || e.Days > 365 {
		return contracts.ErrBadRequest("expires_after.days", contracts.CodeInvalidRequest, "Invalid 'expires_after.days': expected an integer from 1 to 365.")
	}
	return nil
}

func validMetadata(m map[string]string) *contracts.Error {
	if len(m) > 16 {
		return contracts.ErrBadRequest("metadata", contracts.CodeInvalidRequest, "Invalid 'metadata': at most 16 keys.")
	}
	for k, v := range m {
		if len(k) > 64 || len(v) > 512 {
			return contracts.ErrBadRequest("metadata", contracts.CodeInvalidRequest, "Invalid 'metadata': keys up to 64 and values up to 512 characters.")
		}
	}
	return nil
}

// resolveChunking turns a chunking_strategy into token bounds; auto is
// OpenAI's 800/400.
func resolveChunking(c *vectorstore.ChunkingStrategy) (events.Chunking, *contracts.Error) {
	if c == nil || c.Type == "" || c.Type == "auto" {
		return events.Chunking{MaxTokens: 800, OverlapTokens: 400}, nil
	}
	if c.Type != "static" || c.Static == nil {
		return events.Chunking{}, contracts.ErrBadRequest("chunking_strategy", contracts.CodeInvalidRequest, "Invalid 'chunking_strategy': type must be auto or static (with 'static').")
	}
	ch := events.Chunking{MaxTokens: c.Static.MaxChunkSizeTokens, OverlapTokens: c.Static.ChunkOverlapTokens}
	if ch.MaxTokens < 100 || ch.MaxTokens > 4096 {
		return ch, contracts.ErrBadRequest("chunking_strategy.static.max_chunk_size_tokens", contracts.CodeInvalidRequest, "max_chunk_size_tokens must be between 100 and 4096.")
	}
	if ch.OverlapTokens < 0 || ch.OverlapTokens > ch.MaxTokens/2 {
		return ch, contracts.ErrBadRequest("chunking_strategy.static.chunk_overlap_tokens", contracts.CodeInvalidRequest, "chunk_overlap_tokens must be between 0 and half of max_chunk_size_tokens.")
	}
	return ch, nil
}

func strategyOf(ch events.Chunking) vectorstore.ChunkingStrategy {
	return vectorstore.ChunkingStrategy{Type: "static", Static: &vectorstore.StaticChunking{MaxChunkSizeTokens: ch.MaxTokens, ChunkOverlapTokens: ch.OverlapTokens}}
}

func (s *Service) createVectorStore(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	var req vsCreate
	if !httpapi.Decode(w, r, &req) {
		return
	}
	if e := validMetadata(req.Metadata); e != nil {
		contracts.Write(w, e)
		return
	}
	if e := validExpiresAfter(req.ExpiresAfter); e != nil {
		contracts.Write(w, e)
		return
	}
	if req.EmbeddingModel != "" {
		if _, ok := s.d.Directory.Served(req.EmbeddingModel); !ok {
			contracts.Write(w, contracts.ErrModelNotFound(req.EmbeddingModel))
			return
		}
		if !k.Allows(req.EmbeddingModel) {
			contracts.Write(w, contracts.ErrModelNotAllowed(req.EmbeddingModel))
			return
		}
	}
	chunking, cerr := resolveChunking(req.ChunkingStrategy)
	if cerr != nil {
		contracts.Write(w, cerr)
		return
	}
	now := time.Now().Unix()
	vs := VectorStore{ID: httpapi.SortableID("vs_"), Object: "vector_store", CreatedAt: now, LastActiveAt: now,
		Metadata: req.Metadata, ExpiresAfter: req.ExpiresAfter, EmbeddingModel: req.EmbeddingModel, Status: vectorstore.StatusCompleted}
	if vs.Metadata == nil {
		vs.Metadata = map[string]string{}
	}
	if req.Name != nil {
		vs.Name = *req.Name
	}
	if _, err := kv.Create(r.Context(), s.d.StoresKV, vectorstore.StoreKey(k.Tenant, vs.ID), vs); err != nil {
		s.fileError(w, r, vs.ID, err)
		return
	}
	for _, fid := range req.FileIDs {
		if _, e := s.attachFile(r.Context(), k, vs, fid, nil, chunking, ""); e != nil {
			contracts.Write(w, e)
			return
		}
	}
	s.writeStore(w, r, k.Tenant, vs)
}

func (s *Service) loadStore(w http.ResponseWriter, r *http.Request, k *registry.Key) (VectorStore, bool) {
	id := r.PathValue("vs")
	if !vectorstore.ValidID("vs_", id) {
		httpapi.NotFound(w, "vector store", id)
		return VectorStore{}, false
	}
	vs, _, err := kv.Get[VectorStore](r.Context(), s.d.StoresKV, vectorstore.StoreKey(k.Tenant, id))
	if err != nil {
		if errors.Is(err, kv.ErrNotFound) {
			httpapi.NotFound(w, "vector store", id)
		} else {
			s.fileError(w, r, id, err)
		}
		return vs, false
	}
	return vs, true
}

func (s *Service) getVectorStore(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	if vs, ok := s.loadStore(w, r, k); ok {
		s.writeStore(w, r, k.Tenant, vs)
	}
}

func (s *Service) updateVectorStore(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	var req vsCreate
	if !httpapi.Decode(w, r, &req) {
		return
	}
	if e := validMetadata(req.Metadata); e != nil {
		contracts.Write(w, e)
		return
	}
	if e := validExpiresAfter(req.ExpiresAfter); e != nil {
		contracts.Write(w, e)
		return
	}
	vs, _, err := kv.Update(r.Context(), s.d.StoresKV, vectorstore.StoreKey(k.Tenant, vs.ID), func(v *VectorStore, exists bool) error {
		if !exists {
			return kv.ErrNotFound // deleted since it was loaded
		}
		if req.Name != nil {
			v.Name = *req.Name
		}
		if req.Metadata != nil {
			v.Metadata = req.Metadata
		}
		if req.ExpiresAfter != nil {
			v.ExpiresAfter = req.ExpiresAfter
		}
		return nil
	})
	if errors.Is(err, kv.ErrNotFound) {
		httpapi.NotFound(w, "vector store", r.PathValue("vs"))
		return
	}
	if err != nil {
		s.fileError(w, r, r.PathValue("vs"), err)
		return
	}
	s.writeStore(w, r, k.Tenant, vs)
}

func (s *Service) deleteVectorStore(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	files, err := s.storeFiles(r.Context(), k.Tenant, vs.ID)
	if err != nil {
		s.fileError(w, r, vs.ID, err)
		return
	}
	for _, f := range files {
		if err := s.removeFile(r.Context(), k.Tenant, vs.ID, f.ID); err != nil {
			s.fileError(w, r, vs.ID, err)
			return
		}
	}
	if err := s.deleteBatches(r.Context(), k.Tenant, vs.ID); err != nil {
		s.fileError(w, r, vs.ID, err)
		return
	}
	if err := kv.Delete(r.Context(), s.d.StoresKV, vectorstore.StoreKey(k.Tenant, vs.ID)); err != nil && !errors.Is(err, kv.ErrNotFound) {
		s.fileError(w, r, vs.ID, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": vs.ID, "object": "vector_store.deleted", "deleted": true})
}

func (s *Service) listVectorStores(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	limit, order, ok := httpapi.ListParams(w, r, 20, 100)
	if !ok {
		return
	}
	entries, err := kv.List[VectorStore](r.Context(), s.d.StoresKV, k.Tenant+".*")
	if err != nil {
		s.fileError(w, r, "", err)
		return
	}
	all := kv.Values(entries)
	httpapi.SortByCreated(all, order, func(v VectorStore) (int64, string) { return v.CreatedAt, v.ID })
	items, more := httpapi.PageAfter(all, r.URL.Query().Get("after"), func(v VectorStore) string { return v.ID }, limit)
	for i := range items {
		if items[i], err = s.storeWithCounts(r.Context(), k.Tenant, items[i]); err != nil {
			s.fileError(w, r, items[i].ID, err)
			return
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ListPage(items, more, func(v VectorStore) string { return v.ID }))
}
