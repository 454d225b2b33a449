package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// The Vector stores API as OpenAI defines it. Stores and their files are
// records in KV buckets keyed by tenant first; adding a file publishes an
// ingest request on the DOCS stream, and the file's status follows the
// document flow's events (see docStatus).

// FileCounts is OpenAI's file_counts.
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
	ExpiresAfter any               `json:"expires_after"`
	ExpiresAt    *int64            `json:"expires_at"`
	LastActiveAt int64             `json:"last_active_at"`
	Metadata     map[string]string `json:"metadata"`
	// EmbeddingModel is aiforge's addition: the served model that embeds
	// this store's chunks; empty means keyword (sparse) search only.
	EmbeddingModel string `json:"embedding_model,omitempty"`
}

// ChunkingStrategy is OpenAI's chunking_strategy.
type ChunkingStrategy struct {
	Type   string `json:"type"`
	Static *struct {
		MaxChunkSizeTokens int `json:"max_chunk_size_tokens"`
		ChunkOverlapTokens int `json:"chunk_overlap_tokens"`
	} `json:"static,omitempty"`
}

// LastError is a vector store file's last_error.
type LastError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// VectorStoreFile is OpenAI's vector store file object.
type VectorStoreFile struct {
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
	Warnings      []string `json:"warnings,omitempty"`
	BatchID       string   `json:"-"`
	ContentSHA256 string   `json:"-"`
}

type vsFileRecord struct {
	VectorStoreFile
	BatchID       string `json:"batch_id,omitempty"`
	ContentSHA256 string `json:"content_sha256,omitempty"`
}

const (
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusFailed     = "failed"
	statusCancelled  = "cancelled"
)

func (s *Service) vectorStoreRoutes(mux *http.ServeMux) {
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

func vsKey(tenant, vs string) string           { return tenant + "." + vs }
func vsFileKey(tenant, vs, file string) string { return tenant + "." + vs + "." + file }

func validID(prefix, id string) bool {
	return strings.HasPrefix(id, prefix) && len(id) < 80 && !strings.ContainsAny(id, ".*> \t/")
}

func notFound(w http.ResponseWriter, what, id string) {
	contracts.Write(w, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Code: contracts.CodeNotFound,
		Message: fmt.Sprintf("No such %s: %s", what, id)})
}

func kvGet[T any](ctx context.Context, kv jetstream.KeyValue, key string) (T, uint64, error) {
	var v T
	e, err := kv.Get(ctx, key)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return v, 0, registry.ErrNotFound
		}
		return v, 0, err
	}
	return v, e.Revision(), json.Unmarshal(e.Value(), &v)
}

func kvPut(ctx context.Context, kv jetstream.KeyValue, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, key, b)
	return err
}

// kvList returns every value whose key matches the filter.
func kvList[T any](ctx context.Context, kv jetstream.KeyValue, filter string) ([]T, error) {
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, err
	}
	var out []T
	for key := range lister.Keys() {
		v, _, err := kvGet[T](ctx, kv, key)
		if err == nil {
			out = append(out, v)
		}
	}
	return out, nil
}

// countFiles tallies files by status.
func countFiles(files []vsFileRecord) FileCounts {
	var c FileCounts
	for _, f := range files {
		c.Total++
		switch f.Status {
		case statusInProgress:
			c.InProgress++
		case statusCompleted:
			c.Completed++
		case statusFailed:
			c.Failed++
		case statusCancelled:
			c.Cancelled++
		}
	}
	return c
}

// storeWithCounts recomputes file_counts and status from the store's files.
func (s *Service) storeWithCounts(ctx context.Context, tenant string, vs VectorStore) VectorStore {
	files, _ := kvList[vsFileRecord](ctx, s.vsFilesKV, vsFileKey(tenant, vs.ID, "*"))
	vs.FileCounts = countFiles(files)
	vs.UsageBytes = 0
	for _, f := range files {
		vs.UsageBytes += f.UsageBytes
	}
	vs.Status = statusCompleted
	if vs.FileCounts.InProgress > 0 {
		vs.Status = statusInProgress
	}
	return vs
}

type vsCreate struct {
	Name             *string           `json:"name"`
	FileIDs          []string          `json:"file_ids"`
	ExpiresAfter     any               `json:"expires_after"`
	ChunkingStrategy *ChunkingStrategy `json:"chunking_strategy"`
	Metadata         map[string]string `json:"metadata"`
	EmbeddingModel   string            `json:"embedding_model"`
	Description      string            `json:"description"`
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			contracts.Write(w, contracts.ErrBadRequest(te.Field, contracts.CodeInvalidType, "Invalid type for '"+te.Field+"'."))
			return false
		}
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not valid JSON: "+trimJSONErr(err)))
		return false
	}
	return true
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
func resolveChunking(c *ChunkingStrategy) (events.Chunking, *contracts.Error) {
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

func strategyOf(ch events.Chunking) ChunkingStrategy {
	cs := ChunkingStrategy{Type: "static"}
	cs.Static = &struct {
		MaxChunkSizeTokens int `json:"max_chunk_size_tokens"`
		ChunkOverlapTokens int `json:"chunk_overlap_tokens"`
	}{ch.MaxTokens, ch.OverlapTokens}
	return cs
}

func (s *Service) createVectorStore(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	var req vsCreate
	if !decodeBody(w, r, &req) {
		return
	}
	if e := validMetadata(req.Metadata); e != nil {
		contracts.Write(w, e)
		return
	}
	if req.EmbeddingModel != "" {
		if _, ok := s.lookupModel(req.EmbeddingModel); !ok {
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
	vs := VectorStore{ID: sortableID("vs_"), Object: "vector_store", CreatedAt: now, LastActiveAt: now,
		Metadata: req.Metadata, ExpiresAfter: req.ExpiresAfter, EmbeddingModel: req.EmbeddingModel, Status: statusCompleted}
	if vs.Metadata == nil {
		vs.Metadata = map[string]string{}
	}
	if req.Name != nil {
		vs.Name = *req.Name
	}
	if err := kvPut(r.Context(), s.vsKV, vsKey(k.Tenant, vs.ID), vs); err != nil {
		s.fileError(w, vs.ID, err)
		return
	}
	for _, fid := range req.FileIDs {
		if _, e := s.attachFile(r.Context(), k, vs, fid, nil, chunking, ""); e != nil {
			contracts.Write(w, e)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.storeWithCounts(r.Context(), k.Tenant, vs))
}

func (s *Service) loadStore(w http.ResponseWriter, r *http.Request, k *registry.Key) (VectorStore, bool) {
	id := r.PathValue("vs")
	if !validID("vs_", id) {
		notFound(w, "vector store", id)
		return VectorStore{}, false
	}
	vs, _, err := kvGet[VectorStore](r.Context(), s.vsKV, vsKey(k.Tenant, id))
	if err != nil {
		if errors.Is(err, registry.ErrNotFound) {
			notFound(w, "vector store", id)
		} else {
			s.fileError(w, id, err)
		}
		return vs, false
	}
	return vs, true
}

func (s *Service) getVectorStore(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	if vs, ok := s.loadStore(w, r, k); ok {
		writeJSON(w, http.StatusOK, s.storeWithCounts(r.Context(), k.Tenant, vs))
	}
}

func (s *Service) updateVectorStore(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	var req vsCreate
	if !decodeBody(w, r, &req) {
		return
	}
	if e := validMetadata(req.Metadata); e != nil {
		contracts.Write(w, e)
		return
	}
	if req.Name != nil {
		vs.Name = *req.Name
	}
	if req.Metadata != nil {
		vs.Metadata = req.Metadata
	}
	if req.ExpiresAfter != nil {
		vs.ExpiresAfter = req.ExpiresAfter
	}
	if err := kvPut(r.Context(), s.vsKV, vsKey(k.Tenant, vs.ID), vs); err != nil {
		s.fileError(w, vs.ID, err)
		return
	}
	writeJSON(w, http.StatusOK, s.storeWithCounts(r.Context(), k.Tenant, vs))
}

func (s *Service) deleteVectorStore(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	files, _ := kvList[vsFileRecord](r.Context(), s.vsFilesKV, vsFileKey(k.Tenant, vs.ID, "*"))
	for _, f := range files {
		s.removeFile(r.Context(), k.Tenant, vs.ID, f.ID)
	}
	if lister, err := s.vsKV.ListKeysFiltered(r.Context(), vsKey(k.Tenant, vs.ID)+".*"); err == nil {
		for key := range lister.Keys() {
			_ = s.vsKV.Delete(r.Context(), key) // the store's batches
		}
	}
	if err := s.vsKV.Delete(r.Context(), vsKey(k.Tenant, vs.ID)); err != nil {
		s.fileError(w, vs.ID, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": vs.ID, "object": "vector_store.deleted", "deleted": true})
}

func (s *Service) listVectorStores(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	limit, order, ok := listParams(w, r, 20, 100)
	if !ok {
		return
	}
	all, err := kvList[VectorStore](r.Context(), s.vsKV, k.Tenant+".*")
	if err != nil {
		s.fileError(w, "", err)
		return
	}
	sortByCreated(all, order, func(v VectorStore) (int64, string) { return v.CreatedAt, v.ID })
	p := pageAfter(all, r.URL.Query().Get("after"), func(v VectorStore) string { return v.ID }, limit)
	for i := range p.items {
		p.items[i] = s.storeWithCounts(r.Context(), k.Tenant, p.items[i])
	}
	writeJSON(w, http.StatusOK, listPage(p.items, p.more, func(v VectorStore) string { return v.ID }))
}

func listParams(w http.ResponseWriter, r *http.Request, def, maxLimit int) (int, string, bool) {
	q := r.URL.Query()
	limit := def
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			contracts.Write(w, contracts.ErrBadRequest("limit", contracts.CodeInvalidRequest, fmt.Sprintf("Invalid 'limit': expected an integer from 1 to %d.", maxLimit)))
			return 0, "", false
		}
		limit = n
	}
	order := q.Get("order")
	if order == "" {
		order = "desc"
	}
	if order != "asc" && order != "desc" {
		contracts.Write(w, contracts.ErrBadRequest("order", contracts.CodeInvalidRequest, "Invalid 'order': expected asc or desc."))
		return 0, "", false
	}
	return limit, order, true
}

func sortByCreated[T any](items []T, order string, key func(T) (int64, string)) {
	slices.SortFunc(items, func(a, b T) int {
		ta, ia := key(a)
		tb, ib := key(b)
		c := int(ta - tb)
		if c == 0 {
			c = strings.Compare(ia, ib)
		}
		if order == "desc" {
			return -c
		}
		return c
	})
}

// validAttributes checks OpenAI's file attributes: up to 16 keys of at most
// 64 characters; string (up to 512), number or boolean values.
func validAttributes(a map[string]any) *contracts.Error {
	if len(a) > 16 {
		return contracts.ErrBadRequest("attributes", contracts.CodeInvalidRequest, "Invalid 'attributes': at most 16 keys.")
	}
	for k, v := range a {
		if len(k) == 0 || len(k) > 64 {
			return contracts.ErrBadRequest("attributes", contracts.CodeInvalidRequest, "Invalid 'attributes': keys must be 1 to 64 characters.")
		}
		switch x := v.(type) {
		case string:
			if len(x) > 512 {
				return contracts.ErrBadRequest("attributes", contracts.CodeInvalidRequest, "Invalid 'attributes': string values up to 512 characters.")
			}
		case float64, bool:
		default:
			return contracts.ErrBadRequest("attributes", contracts.CodeInvalidType, fmt.Sprintf("Invalid 'attributes.%s': expected a string, number or boolean.", k))
		}
	}
	return nil
}

// attachFile adds a file to a store and requests its ingestion.
func (s *Service) attachFile(ctx context.Context, k *registry.Key, vs VectorStore, fileID string, attrs map[string]any, ch events.Chunking, batchID string) (VectorStoreFile, *contracts.Error) {
	if e := validAttributes(attrs); e != nil {
		return VectorStoreFile{}, e
	}
	f, err := s.loadFile(ctx, k.Tenant, fileID)
	if err != nil {
		return VectorStoreFile{}, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Param: "file_id", Code: contracts.CodeNotFound,
			Message: fmt.Sprintf("No such File object: %s", fileID)}
	}
	if attrs == nil {
		attrs = map[string]any{}
	}
	var warnings []string
	if vs.EmbeddingModel != "" {
		if m, ok := s.lookupModel(vs.EmbeddingModel); ok && m.Engine.MaxInputTokens > 0 && ch.MaxTokens > m.Engine.MaxInputTokens {
			warnings = append(warnings, fmt.Sprintf("max_chunk_size_tokens %d exceeds the input window of the embedding model %q; chunks are limited to %d tokens.",
				ch.MaxTokens, vs.EmbeddingModel, m.Engine.MaxInputTokens))
			ch.MaxTokens = m.Engine.MaxInputTokens
			ch.OverlapTokens = min(ch.OverlapTokens, ch.MaxTokens/2)
		}
	}
	rec := vsFileRecord{VectorStoreFile: VectorStoreFile{ID: f.ID, Object: "vector_store.file", UsageBytes: f.Bytes, CreatedAt: time.Now().Unix(), VectorStoreID: vs.ID,
		Status: statusInProgress, ChunkingStrategy: strategyOf(ch), Attributes: attrs, Warnings: warnings}, BatchID: batchID, ContentSHA256: f.SHA256}
	if err := kvPut(ctx, s.vsFilesKV, vsFileKey(k.Tenant, vs.ID, f.ID), rec); err != nil {
		return VectorStoreFile{}, contracts.ErrInternal("The vector store could not be updated.")
	}
	ref := events.DocRef{Tenant: k.Tenant, StoreID: vs.ID, FileID: f.ID, Run: events.NewID()[:16]}
	ev := events.DocIngestRequestedV1{DocRef: ref, ObjectKey: f.ObjectKey,
		Filename: f.Filename, ContentSHA256: f.SHA256, Chunking: ch, EmbeddingModel: vs.EmbeddingModel, Attributes: attrs, RequestedAt: time.Now().UTC()}
	env := events.Envelope{ID: ref.EventID("ingest"), Source: s.cfg.InstanceID, Tenant: k.Tenant}
	if _, err := events.Publish(ctx, s.deps.JS, ev, env); err != nil {
		rec.Status, rec.LastError = statusFailed, &LastError{Code: "server_error", Message: "The ingest request could not be queued."}
		_ = kvPut(ctx, s.vsFilesKV, vsFileKey(k.Tenant, vs.ID, f.ID), rec)
	}
	return rec.VectorStoreFile, nil
}

func (s *Service) addVectorStoreFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	var req struct {
		FileID           string            `json:"file_id"`
		Attributes       map[string]any    `json:"attributes"`
		ChunkingStrategy *ChunkingStrategy `json:"chunking_strategy"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if req.FileID == "" {
		contracts.Write(w, contracts.ErrBadRequest("file_id", contracts.CodeMissingParam, "Missing required parameter: 'file_id'."))
		return
	}
	ch, cerr := resolveChunking(req.ChunkingStrategy)
	if cerr != nil {
		contracts.Write(w, cerr)
		return
	}
	f, e := s.attachFile(r.Context(), k, vs, req.FileID, req.Attributes, ch, "")
	if e != nil {
		contracts.Write(w, e)
		return
	}
	writeJSON(w, http.StatusOK, f)
}

func (s *Service) loadStoreFile(w http.ResponseWriter, r *http.Request, k *registry.Key) (VectorStore, vsFileRecord, bool) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return vs, vsFileRecord{}, false
	}
	id := r.PathValue("file")
	if !validID("file-", id) {
		notFound(w, "vector store file", id)
		return vs, vsFileRecord{}, false
	}
	rec, _, err := kvGet[vsFileRecord](r.Context(), s.vsFilesKV, vsFileKey(k.Tenant, vs.ID, id))
	if err != nil {
		notFound(w, "vector store file", id)
		return vs, rec, false
	}
	return vs, rec, true
}

func (s *Service) getVectorStoreFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	if _, rec, ok := s.loadStoreFile(w, r, k); ok {
		writeJSON(w, http.StatusOK, rec.VectorStoreFile)
	}
}

func (s *Service) updateVectorStoreFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, rec, ok := s.loadStoreFile(w, r, k)
	if !ok {
		return
	}
	var req struct {
		Attributes map[string]any `json:"attributes"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if e := validAttributes(req.Attributes); e != nil {
		contracts.Write(w, e)
		return
	}
	rec.Attributes = req.Attributes
	if err := kvPut(r.Context(), s.vsFilesKV, vsFileKey(k.Tenant, vs.ID, rec.ID), rec); err != nil {
		s.fileError(w, rec.ID, err)
		return
	}
	writeJSON(w, http.StatusOK, rec.VectorStoreFile)
}

// removeFile drops a file from a store and tells the document flow to
// delete its chunks.
func (s *Service) removeFile(ctx context.Context, tenant, vsID, fileID string) {
	_ = s.vsFilesKV.Delete(ctx, vsFileKey(tenant, vsID, fileID))
	ev := events.DocRemovedV1{DocRef: events.DocRef{Tenant: tenant, StoreID: vsID, FileID: fileID}}
	env := events.Envelope{ID: "remove-" + vsID + "-" + fileID + "-" + strconv.FormatInt(time.Now().UnixNano(), 36), Source: s.cfg.InstanceID, Tenant: tenant}
	if _, err := events.Publish(ctx, s.deps.JS, ev, env); err != nil {
		s.log.Error("publish file removal", "vector_store_id", vsID, "file_id", fileID, "err", err)
	}
}

func (s *Service) deleteVectorStoreFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, rec, ok := s.loadStoreFile(w, r, k)
	if !ok {
		return
	}
	s.removeFile(r.Context(), k.Tenant, vs.ID, rec.ID)
	writeJSON(w, http.StatusOK, map[string]any{"id": rec.ID, "object": "vector_store.file.deleted", "deleted": true})
}

func (s *Service) listVectorStoreFiles(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	limit, order, ok := listParams(w, r, 20, 100)
	if !ok {
		return
	}
	all, err := kvList[vsFileRecord](r.Context(), s.vsFilesKV, vsFileKey(k.Tenant, vs.ID, "*"))
	if err != nil {
		s.fileError(w, "", err)
		return
	}
	filter := r.URL.Query().Get("filter")
	var files []VectorStoreFile
	for _, f := range all {
		if filter == "" || f.Status == filter {
			files = append(files, f.VectorStoreFile)
		}
	}
	sortByCreated(files, order, func(f VectorStoreFile) (int64, string) { return f.CreatedAt, f.ID })
	p := pageAfter(files, r.URL.Query().Get("after"), func(f VectorStoreFile) string { return f.ID }, limit)
	writeJSON(w, http.StatusOK, listPage(p.items, p.more, func(f VectorStoreFile) string { return f.ID }))
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// searchRequest is OpenAI's vector store search body.
type searchRequest struct {
	Query          json.RawMessage `json:"query"`
	Filters        json.RawMessage `json:"filters"`
	MaxNumResults  *int            `json:"max_num_results"`
	RankingOptions *struct {
		Ranker         string   `json:"ranker"`
		ScoreThreshold *float64 `json:"score_threshold"`
	} `json:"ranking_options"`
	RewriteQuery bool `json:"rewrite_query"`
}

type searchResult struct {
	FileID     string           `json:"file_id"`
	Filename   string           `json:"filename"`
	Score      float64          `json:"score"`
	Attributes map[string]any   `json:"attributes"`
	Content    []map[string]any `json:"content"`
}

// retrieverHit mirrors the retriever's SearchHit.
type retrieverHit struct {
	StoreID     string         `json:"vector_store_id"`
	FileID      string         `json:"file_id"`
	ChunkIndex  int            `json:"chunk_index"`
	Score       float64        `json:"score"`
	Text        string         `json:"text"`
	Pages       []int          `json:"pages"`
	HeadingPath []string       `json:"heading_path"`
	Attributes  map[string]any `json:"attributes"`
}

// searchStores asks the retriever and returns OpenAI-shaped results; pages
// and heading paths (aiforge's additions) ride in the attributes.
func (s *Service) searchStores(ctx context.Context, tenant string, stores []VectorStore, queries []string, filters json.RawMessage, limit int, threshold float64) ([]searchResult, *contracts.Error) {
	ids := make([]string, len(stores))
	model := ""
	for i, vs := range stores {
		ids[i] = vs.ID
		if vs.EmbeddingModel != "" {
			model = vs.EmbeddingModel
		}
	}
	req := map[string]any{"tenant": tenant, "vector_store_ids": ids, "queries": queries, "limit": limit, "score_threshold": threshold, "embedding_model": model}
	if len(filters) > 0 && string(filters) != "null" {
		req["filter"] = filters
	}
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	msg, err := s.deps.NC.RequestWithContext(ctx, events.RetrieverQuery, body)
	if err != nil {
		return nil, &contracts.Error{Status: http.StatusServiceUnavailable, Type: contracts.TypeServer, Code: contracts.CodeNoWorker, Message: "The retriever is not available."}
	}
	var reply struct {
		Hits  []retrieverHit `json:"hits"`
		Error *struct {
			Status  int    `json:"status"`
			Message string `json:"message"`
			Param   string `json:"param"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return nil, contracts.ErrInternal("The retriever answered badly.")
	}
	if reply.Error != nil {
		if reply.Error.Status == http.StatusBadRequest {
			return nil, contracts.ErrBadRequest(reply.Error.Param, contracts.CodeInvalidRequest, reply.Error.Message)
		}
		return nil, contracts.ErrEngine(reply.Error.Message)
	}
	names := map[string]string{}
	out := make([]searchResult, 0, len(reply.Hits))
	for _, h := range reply.Hits {
		name, ok := names[h.FileID]
		if !ok {
			if f, err := s.loadFile(ctx, tenant, h.FileID); err == nil {
				name = f.Filename
			}
			names[h.FileID] = name
		}
		attrs := map[string]any{}
		for k, v := range h.Attributes {
			attrs[k] = v
		}
		if len(h.Pages) > 0 {
			// Attribute values are strings, numbers or booleans: the first
			// page as a number, every page as a comma-separated string.
			attrs["page"] = h.Pages[0]
			if len(h.Pages) > 1 {
				ps := make([]string, len(h.Pages))
				for i, p := range h.Pages {
					ps[i] = strconv.Itoa(p)
				}
				attrs["pages"] = strings.Join(ps, ",")
			}
		}
		if len(h.HeadingPath) > 0 {
			attrs["heading_path"] = strings.Join(h.HeadingPath, " > ")
		}
		out = append(out, searchResult{FileID: h.FileID, Filename: name, Score: h.Score, Attributes: attrs,
			Content: []map[string]any{{"type": "text", "text": h.Text}}})
	}
	return out, nil
}

func (s *Service) searchVectorStore(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	var req searchRequest
	if !decodeBody(w, r, &req) {
		return
	}
	var queries []string
	var one string
	if json.Unmarshal(req.Query, &one) == nil && one != "" {
		queries = []string{one}
	} else if json.Unmarshal(req.Query, &queries) != nil || len(queries) == 0 {
		contracts.Write(w, contracts.ErrBadRequest("query", contracts.CodeMissingParam, "Missing required parameter: 'query' (a string or an array of strings)."))
		return
	}
	limit := 10
	if req.MaxNumResults != nil {
		if *req.MaxNumResults < 1 || *req.MaxNumResults > 50 {
			contracts.Write(w, contracts.ErrBadRequest("max_num_results", contracts.CodeInvalidRequest, "Invalid 'max_num_results': expected 1 to 50."))
			return
		}
		limit = *req.MaxNumResults
	}
	threshold := 0.0
	if req.RankingOptions != nil && req.RankingOptions.ScoreThreshold != nil {
		threshold = *req.RankingOptions.ScoreThreshold
	}
	results, e := s.searchStores(r.Context(), k.Tenant, []VectorStore{vs}, queries, req.Filters, limit, threshold)
	if e != nil {
		contracts.Write(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "vector_store.search_results.page", "search_query": queries,
		"data": results, "has_more": false, "next_page": nil})
}

// FilesBatch is OpenAI's vector store file batch object.
type FilesBatch struct {
	ID            string     `json:"id"`
	Object        string     `json:"object"`
	CreatedAt     int64      `json:"created_at"`
	VectorStoreID string     `json:"vector_store_id"`
	Status        string     `json:"status"`
	FileCounts    FileCounts `json:"file_counts"`
}

func (s *Service) batchRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/vector_stores/{vs}/file_batches", s.tenantAPI(s.createBatch))
	mux.HandleFunc("GET /v1/vector_stores/{vs}/file_batches/{batch}", s.tenantAPI(s.getBatch))
	mux.HandleFunc("POST /v1/vector_stores/{vs}/file_batches/{batch}/cancel", s.tenantAPI(s.cancelBatch))
	mux.HandleFunc("GET /v1/vector_stores/{vs}/file_batches/{batch}/files", s.tenantAPI(s.listBatchFiles))
}

// Batches live in the stores bucket under the store's key (one level
// deeper, so listing stores never sees them).
func batchKey(tenant, vs, batch string) string { return tenant + "." + vs + "." + batch }

// batchFiles returns the files of a batch.
func (s *Service) batchFiles(ctx context.Context, tenant, vs, batch string) []vsFileRecord {
	all, _ := kvList[vsFileRecord](ctx, s.vsFilesKV, vsFileKey(tenant, vs, "*"))
	out := all[:0]
	for _, f := range all {
		if f.BatchID == batch {
			out = append(out, f)
		}
	}
	return out
}

// withCounts fills a batch's counts and status from its files.
func (s *Service) withCounts(ctx context.Context, tenant string, b FilesBatch) FilesBatch {
	b.FileCounts = countFiles(s.batchFiles(ctx, tenant, b.VectorStoreID, b.ID))
	switch {
	case b.FileCounts.InProgress > 0 && b.Status == "cancelling":
	case b.FileCounts.InProgress > 0:
		b.Status = statusInProgress
	case b.Status == "cancelling" || b.FileCounts.Cancelled > 0:
		b.Status = statusCancelled
	case b.FileCounts.Failed > 0 && b.FileCounts.Completed == 0:
		b.Status = statusFailed
	default:
		b.Status = statusCompleted
	}
	return b
}

func (s *Service) createBatch(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	var req struct {
		FileIDs          []string          `json:"file_ids"`
		Attributes       map[string]any    `json:"attributes"`
		ChunkingStrategy *ChunkingStrategy `json:"chunking_strategy"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if len(req.FileIDs) == 0 || len(req.FileIDs) > 500 {
		contracts.Write(w, contracts.ErrBadRequest("file_ids", contracts.CodeInvalidRequest, "Invalid 'file_ids': expected 1 to 500 file ids."))
		return
	}
	ch, cerr := resolveChunking(req.ChunkingStrategy)
	if cerr != nil {
		contracts.Write(w, cerr)
		return
	}
	if e := validAttributes(req.Attributes); e != nil {
		contracts.Write(w, e)
		return
	}
	// Check every file first: a batch is accepted whole or not at all.
	for _, id := range req.FileIDs {
		if _, err := s.loadFile(r.Context(), k.Tenant, id); err != nil {
			contracts.Write(w, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Param: "file_ids", Code: contracts.CodeNotFound,
				Message: fmt.Sprintf("No such File object: %s", id)})
			return
		}
	}
	b := FilesBatch{ID: sortableID("vsfb_"), Object: "vector_store.files_batch", CreatedAt: time.Now().Unix(), VectorStoreID: vs.ID, Status: statusInProgress}
	if err := kvPut(r.Context(), s.vsKV, batchKey(k.Tenant, vs.ID, b.ID), b); err != nil {
		s.fileError(w, b.ID, err)
		return
	}
	for _, id := range req.FileIDs {
		if _, e := s.attachFile(r.Context(), k, vs, id, req.Attributes, ch, b.ID); e != nil {
			contracts.Write(w, e)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.withCounts(r.Context(), k.Tenant, b))
}

func (s *Service) loadBatch(w http.ResponseWriter, r *http.Request, k *registry.Key) (FilesBatch, bool) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return FilesBatch{}, false
	}
	id := r.PathValue("batch")
	if !validID("vsfb_", id) {
		notFound(w, "vector store file batch", id)
		return FilesBatch{}, false
	}
	b, _, err := kvGet[FilesBatch](r.Context(), s.vsKV, batchKey(k.Tenant, vs.ID, id))
	if err != nil {
		notFound(w, "vector store file batch", id)
		return b, false
	}
	return b, true
}

func (s *Service) getBatch(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	if b, ok := s.loadBatch(w, r, k); ok {
		writeJSON(w, http.StatusOK, s.withCounts(r.Context(), k.Tenant, b))
	}
}

// cancelBatch marks the batch's files still in progress cancelled; their
// chunks, should a step finish them anyway, are removed.
func (s *Service) cancelBatch(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	b, ok := s.loadBatch(w, r, k)
	if !ok {
		return
	}
	cancelled := 0
	for _, f := range s.batchFiles(r.Context(), k.Tenant, b.VectorStoreID, b.ID) {
		if f.Status != statusInProgress {
			continue
		}
		cancelled++
		f.Status = statusCancelled
		if err := kvPut(r.Context(), s.vsFilesKV, vsFileKey(k.Tenant, b.VectorStoreID, f.ID), f); err != nil {
			s.fileError(w, f.ID, err)
			return
		}
	}
	if cancelled == 0 { // nothing left to stop: a finished batch stays as it is
		writeJSON(w, http.StatusOK, s.withCounts(r.Context(), k.Tenant, b))
		return
	}
	b.Status = "cancelling"
	if err := kvPut(r.Context(), s.vsKV, batchKey(k.Tenant, b.VectorStoreID, b.ID), b); err != nil {
		s.fileError(w, b.ID, err)
		return
	}
	writeJSON(w, http.StatusOK, s.withCounts(r.Context(), k.Tenant, b))
}

func (s *Service) listBatchFiles(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	b, ok := s.loadBatch(w, r, k)
	if !ok {
		return
	}
	limit, order, ok := listParams(w, r, 20, 100)
	if !ok {
		return
	}
	filter := r.URL.Query().Get("filter")
	var files []VectorStoreFile
	for _, f := range s.batchFiles(r.Context(), k.Tenant, b.VectorStoreID, b.ID) {
		if filter == "" || f.Status == filter {
			files = append(files, f.VectorStoreFile)
		}
	}
	sortByCreated(files, order, func(f VectorStoreFile) (int64, string) { return f.CreatedAt, f.ID })
	p := pageAfter(files, r.URL.Query().Get("after"), func(f VectorStoreFile) string { return f.ID }, limit)
	writeJSON(w, http.StatusOK, listPage(p.items, p.more, func(f VectorStoreFile) string { return f.ID }))
}
