package vectorstores

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/vectorstore"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

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

// deleteBatches deletes the batches of a store. It needs their keys only,
// not their values: a batch record that no longer decodes goes too.
func (s *Service) deleteBatches(ctx context.Context, tenant, vs string) error {
	lister, err := s.d.StoresKV.ListKeysFiltered(ctx, batchKey(tenant, vs, "*"))
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the batches of %s: %w", vs, err)
	}
	var keys []string
	for key := range lister.Keys() {
		keys = append(keys, key)
	}
	for _, key := range keys {
		if err := kv.Delete(ctx, s.d.StoresKV, key); err != nil && !errors.Is(err, kv.ErrNotFound) {
			return err
		}
	}
	return nil
}

// batchFiles returns the files of a batch.
func (s *Service) batchFiles(ctx context.Context, tenant, vs, batch string) ([]vectorstore.FileRecord, error) {
	all, err := s.storeFiles(ctx, tenant, vs)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, f := range all {
		if f.BatchID == batch {
			out = append(out, f)
		}
	}
	return out, nil
}

// withCounts fills a batch's counts and status from its files.
func (s *Service) withCounts(ctx context.Context, tenant string, b FilesBatch) (FilesBatch, error) {
	files, err := s.batchFiles(ctx, tenant, b.VectorStoreID, b.ID)
	if err != nil {
		return b, err
	}
	b.FileCounts = countFiles(files)
	switch {
	case b.FileCounts.InProgress > 0 && b.Status == "cancelling":
	case b.FileCounts.InProgress > 0:
		b.Status = vectorstore.StatusInProgress
	case b.Status == "cancelling" || b.FileCounts.Cancelled > 0:
		b.Status = vectorstore.StatusCancelled
	case b.FileCounts.Failed > 0 && b.FileCounts.Completed == 0:
		b.Status = vectorstore.StatusFailed
	default:
		b.Status = vectorstore.StatusCompleted
	}
	return b, nil
}

// writeBatch answers b with its counts.
func (s *Service) writeBatch(w http.ResponseWriter, r *http.Request, tenant string, b FilesBatch) {
	b, err := s.withCounts(r.Context(), tenant, b)
	if err != nil {
		s.fileError(w, r, b.ID, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, b)
}

func (s *Service) createBatch(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	var req struct {
		FileIDs          []string                      `json:"file_ids"`
		Attributes       map[string]any                `json:"attributes"`
		ChunkingStrategy *vectorstore.ChunkingStrategy `json:"chunking_strategy"`
	}
	if !httpapi.Decode(w, r, &req) {
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
		if _, err := s.d.FileAPI.Load(r.Context(), k.Tenant, id); err != nil {
			if !errors.Is(err, kv.ErrNotFound) {
				s.fileError(w, r, id, err)
				return
			}
			contracts.Write(w, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Param: "file_ids", Code: contracts.CodeNotFound,
				Message: fmt.Sprintf("No such File object: %s", id)})
			return
		}
	}
	b := FilesBatch{ID: httpapi.SortableID("vsfb_"), Object: "vector_store.files_batch", CreatedAt: time.Now().Unix(), VectorStoreID: vs.ID, Status: vectorstore.StatusInProgress}
	if _, err := kv.Create(r.Context(), s.d.StoresKV, batchKey(k.Tenant, vs.ID, b.ID), b); err != nil {
		s.fileError(w, r, b.ID, err)
		return
	}
	for _, id := range req.FileIDs {
		if _, e := s.attachFile(r.Context(), k, vs, id, req.Attributes, ch, b.ID); e != nil {
			contracts.Write(w, e)
			return
		}
	}
	s.writeBatch(w, r, k.Tenant, b)
}

func (s *Service) loadBatch(w http.ResponseWriter, r *http.Request, k *registry.Key) (FilesBatch, bool) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return FilesBatch{}, false
	}
	id := r.PathValue("batch")
	if !vectorstore.ValidID("vsfb_", id) {
		httpapi.NotFound(w, "vector store file batch", id)
		return FilesBatch{}, false
	}
	b, _, err := kv.Get[FilesBatch](r.Context(), s.d.StoresKV, batchKey(k.Tenant, vs.ID, id))
	if errors.Is(err, kv.ErrNotFound) {
		httpapi.NotFound(w, "vector store file batch", id)
		return b, false
	}
	if err != nil {
		s.fileError(w, r, id, err)
		return b, false
	}
	return b, true
}

func (s *Service) getBatch(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	if b, ok := s.loadBatch(w, r, k); ok {
		s.writeBatch(w, r, k.Tenant, b)
	}
}

// cancelBatch marks the batch's files still in progress cancelled; their
// chunks, should a step finish them anyway, are removed.
func (s *Service) cancelBatch(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	b, ok := s.loadBatch(w, r, k)
	if !ok {
		return
	}
	files, err := s.batchFiles(r.Context(), k.Tenant, b.VectorStoreID, b.ID)
	if err != nil {
		s.fileError(w, r, b.ID, err)
		return
	}
	cancelled := 0
	for _, f := range files {
		if f.Status != vectorstore.StatusInProgress {
			continue
		}
		// By compare-and-set: a file that finished meanwhile keeps its
		// outcome.
		_, written, err := kv.Update(r.Context(), s.d.FilesKV, vectorstore.FileKey(k.Tenant, b.VectorStoreID, f.ID),
			func(rec *vectorstore.FileRecord, exists bool) error {
				if !exists || rec.Status != vectorstore.StatusInProgress {
					return kv.ErrNoChange
				}
				rec.Status = vectorstore.StatusCancelled
				return nil
			})
		if err != nil {
			s.fileError(w, r, f.ID, err)
			return
		}
		if written {
			cancelled++
		}
	}
	if cancelled == 0 { // nothing left to stop: a finished batch stays as it is
		s.writeBatch(w, r, k.Tenant, b)
		return
	}
	b.Status = "cancelling"
	if _, err := kv.Put(r.Context(), s.d.StoresKV, batchKey(k.Tenant, b.VectorStoreID, b.ID), b); err != nil {
		s.fileError(w, r, b.ID, err)
		return
	}
	s.writeBatch(w, r, k.Tenant, b)
}

func (s *Service) listBatchFiles(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	b, ok := s.loadBatch(w, r, k)
	if !ok {
		return
	}
	limit, order, ok := httpapi.ListParams(w, r, 20, 100)
	if !ok {
		return
	}
	all, err := s.batchFiles(r.Context(), k.Tenant, b.VectorStoreID, b.ID)
	if err != nil {
		s.fileError(w, r, b.ID, err)
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
