package vectorstores

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/vectorstore"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

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

// ingestPublishWithin bounds the retries of an ingest request's publish:
// longer than a JetStream leader election after a node is lost.
const ingestPublishWithin = 20 * time.Second

// attachFile adds a file to a store and requests its ingestion.
func (s *Service) attachFile(ctx context.Context, k *registry.Key, vs VectorStore, fileID string, attrs map[string]any, ch events.Chunking, batchID string) (vectorstore.File, *contracts.Error) {
	if e := validAttributes(attrs); e != nil {
		return vectorstore.File{}, e
	}
	f, err := s.d.FileAPI.Load(ctx, k.Tenant, fileID)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		s.log.Error("load file", "file_id", fileID, "err", err)
		return vectorstore.File{}, httpapi.StoreError(ctx, err, "file store", "The file store could not be read.")
	}
	if err != nil {
		return vectorstore.File{}, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Param: "file_id", Code: contracts.CodeNotFound,
			Message: fmt.Sprintf("No such File object: %s", fileID)}
	}
	if attrs == nil {
		attrs = map[string]any{}
	}
	var warnings []string
	if vs.EmbeddingModel != "" {
		if m, ok := s.d.Directory.Served(vs.EmbeddingModel); ok && m.Engine.MaxInputTokens > 0 && ch.MaxTokens > m.Engine.MaxInputTokens {
			warnings = append(warnings, fmt.Sprintf("max_chunk_size_tokens %d exceeds the input window of the embedding model %q; chunks are limited to %d tokens.",
				ch.MaxTokens, vs.EmbeddingModel, m.Engine.MaxInputTokens))
			ch.MaxTokens = m.Engine.MaxInputTokens
			ch.OverlapTokens = min(ch.OverlapTokens, ch.MaxTokens/2)
		}
	}
	rec := vectorstore.FileRecord{File: vectorstore.File{ID: f.ID, Object: "vector_store.file", UsageBytes: f.Bytes, CreatedAt: time.Now().Unix(), VectorStoreID: vs.ID,
		Status: vectorstore.StatusInProgress, ChunkingStrategy: strategyOf(ch), Attributes: attrs, Warnings: warnings}, BatchID: batchID, ContentSHA256: f.SHA256}
	if _, err := kv.Put(ctx, s.d.FilesKV, vectorstore.FileKey(k.Tenant, vs.ID, f.ID), rec); err != nil {
		s.log.Error("record vector store file", "vector_store_id", vs.ID, "file_id", f.ID, "err", err)
		return vectorstore.File{}, httpapi.StoreError(ctx, err, "vector store", "The vector store could not be updated.")
	}
	ref := events.DocRef{Tenant: k.Tenant, StoreID: vs.ID, FileID: f.ID, Run: events.NewID()[:16]}
	ev := events.DocIngestRequestedV1{DocRef: ref, ObjectKey: f.ObjectKey,
		Filename: f.Filename, ContentSHA256: f.SHA256, Chunking: ch, EmbeddingModel: vs.EmbeddingModel, Attributes: attrs, RequestedAt: time.Now().UTC()}
	env := events.Envelope{ID: ref.EventID("ingest"), Source: s.d.InstanceID, Tenant: k.Tenant}
	// A stream electing a new leader (a NATS node lost) refuses publishes
	// for seconds: retry within the request's time, as long as the client
	// waits, and tell it when the file could not be accepted.
	pctx, cancel := context.WithTimeout(ctx, ingestPublishWithin)
	defer cancel()
	if _, attempts, err := events.PublishRetry(pctx, s.d.JS, ev, env); err != nil {
		s.log.Error("queue ingest request", "vector_store_id", vs.ID, "file_id", f.ID, "attempts", attempts, "err", err)
		rec.Status, rec.LastError = vectorstore.StatusFailed, &vectorstore.LastError{Code: "server_error", Message: "The ingest request could not be queued."}
		if _, err := kv.Put(context.WithoutCancel(ctx), s.d.FilesKV, vectorstore.FileKey(k.Tenant, vs.ID, f.ID), rec); err != nil {
			// The file stays in_progress; adding it again retries.
			s.log.Error("record failed ingest request", "vector_store_id", vs.ID, "file_id", f.ID, "err", err)
		}
		return vectorstore.File{}, &contracts.Error{Status: http.StatusServiceUnavailable, Type: contracts.TypeServer, Code: contracts.CodeServiceUnavailable,
			Message: "The file could not be queued for ingestion (the event stream is unavailable); add it again."}
	}
	return rec.File, nil
}

func (s *Service) addVectorStoreFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	var req struct {
		FileID           string                        `json:"file_id"`
		Attributes       map[string]any                `json:"attributes"`
		ChunkingStrategy *vectorstore.ChunkingStrategy `json:"chunking_strategy"`
	}
	if !httpapi.Decode(w, r, &req) {
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
	httpapi.WriteJSON(w, http.StatusOK, f)
}

func (s *Service) loadStoreFile(w http.ResponseWriter, r *http.Request, k *registry.Key) (VectorStore, vectorstore.FileRecord, bool) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return vs, vectorstore.FileRecord{}, false
	}
	id := r.PathValue("file")
	if !vectorstore.ValidID("file-", id) {
		httpapi.NotFound(w, "vector store file", id)
		return vs, vectorstore.FileRecord{}, false
	}
	rec, _, err := kv.Get[vectorstore.FileRecord](r.Context(), s.d.FilesKV, vectorstore.FileKey(k.Tenant, vs.ID, id))
	if errors.Is(err, kv.ErrNotFound) {
		httpapi.NotFound(w, "vector store file", id)
		return vs, rec, false
	}
	if err != nil {
		s.fileError(w, r, id, err)
		return vs, rec, false
	}
	return vs, rec, true
}

func (s *Service) getVectorStoreFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	if _, rec, ok := s.loadStoreFile(w, r, k); ok {
		httpapi.WriteJSON(w, http.StatusOK, rec.File)
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
	if !httpapi.Decode(w, r, &req) {
		return
	}
	if e := validAttributes(req.Attributes); e != nil {
		contracts.Write(w, e)
		return
	}
	// By compare-and-set: the document flow may be recording the file's
	// status at the same time.
	rec, _, err := kv.Update(r.Context(), s.d.FilesKV, vectorstore.FileKey(k.Tenant, vs.ID, rec.ID), func(v *vectorstore.FileRecord, exists bool) error {
		if !exists {
			return kv.ErrNotFound // removed since it was loaded
		}
		v.Attributes = req.Attributes
		return nil
	})
	if errors.Is(err, kv.ErrNotFound) {
		httpapi.NotFound(w, "vector store file", r.PathValue("file"))
		return
	}
	if err != nil {
		s.fileError(w, r, r.PathValue("file"), err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, rec.File)
}

// removeFile drops a file from a store and tells the document flow to
// delete its chunks (also when the record was already gone, so a removal
// that failed half way can be repeated).
func (s *Service) removeFile(ctx context.Context, tenant, vsID, fileID string) error {
	if err := kv.Delete(ctx, s.d.FilesKV, vectorstore.FileKey(tenant, vsID, fileID)); err != nil && !errors.Is(err, kv.ErrNotFound) {
		return err
	}
	ev := events.DocRemovedV1{DocRef: events.DocRef{Tenant: tenant, StoreID: vsID, FileID: fileID}}
	env := events.Envelope{ID: "remove-" + vsID + "-" + fileID + "-" + strconv.FormatInt(time.Now().UnixNano(), 36), Source: s.d.InstanceID, Tenant: tenant}
	if _, err := events.Publish(ctx, s.d.JS, ev, env); err != nil {
		s.log.Error("publish file removal", "vector_store_id", vsID, "file_id", fileID, "err", err)
	}
	return nil
}

func (s *Service) deleteVectorStoreFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, rec, ok := s.loadStoreFile(w, r, k)
	if !ok {
		return
	}
	if err := s.removeFile(r.Context(), k.Tenant, vs.ID, rec.ID); err != nil {
		s.fileError(w, r, rec.ID, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": rec.ID, "object": "vector_store.file.deleted", "deleted": true})
}

func (s *Service) listVectorStoreFiles(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	limit, order, ok := httpapi.ListParams(w, r, 20, 100)
	if !ok {
		return
	}
	all, err := s.storeFiles(r.Context(), k.Tenant, vs.ID)
	if err != nil {
		s.fileError(w, r, "", err)
		return
	}
	filter := r.URL.Query().Get("filter")
	var files []vectorstore.File
	for _, f := range all {
		if filter == "" || f.Status == filter {
			files = append(files, f.File)
		}
	}
	httpapi.SortByCreated(files, order, func(f vectorstore.File) (int64, string) { return f.CreatedAt, f.ID })
	items, more := httpapi.PageAfter(files, r.URL.Query().Get("after"), func(f vectorstore.File) string { return f.ID }, limit)
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ListPage(items, more, func(f vectorstore.File) string { return f.ID }))
}
