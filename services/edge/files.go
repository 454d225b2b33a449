package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
)

// The Files API as OpenAI defines it. Bytes go to the object store under
// the tenant's prefix, records to the aiforge_files bucket under the
// tenant's key prefix: another tenant's file id is simply not found.

// File is OpenAI's file object.
type File struct {
	ID        string  `json:"id"`
	Object    string  `json:"object"`
	Bytes     int64   `json:"bytes"`
	CreatedAt int64   `json:"created_at"`
	ExpiresAt *int64  `json:"expires_at"`
	Filename  string  `json:"filename"`
	Purpose   string  `json:"purpose"`
	Status    string  `json:"status"`
	SHA256    string  `json:"sha256,omitempty"`
	Tenant    string  `json:"-"`
	ObjectKey string  `json:"-"`
	Details   *string `json:"status_details"`
}

// fileRecord is what the bucket stores (the tenant and object key included).
type fileRecord struct {
	File
	Tenant    string `json:"tenant"`
	ObjectKey string `json:"object_key"`
}

var filePurposes = []string{"assistants", "user_data", "batch"}

func (s *Service) fileRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/files", s.tenantAPI(s.uploadFile))
	mux.HandleFunc("GET /v1/files", s.tenantAPI(s.listFiles))
	mux.HandleFunc("GET /v1/files/{id}", s.tenantAPI(s.getFile))
	mux.HandleFunc("GET /v1/files/{id}/content", s.tenantAPI(s.fileContent))
	mux.HandleFunc("DELETE /v1/files/{id}", s.tenantAPI(s.deleteFile))
}

// tenantAPI authenticates a tenant key for the APIs that keep tenant data.
func (s *Service) tenantAPI(h func(http.ResponseWriter, *http.Request, *registry.Key)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		k := s.authenticate(w, r)
		if k == nil {
			return
		}
		if s.deps.Objects == nil || s.filesKV == nil {
			contracts.Write(w, &contracts.Error{Status: http.StatusServiceUnavailable, Type: contracts.TypeServer, Code: contracts.CodeNoWorker,
				Message: "File storage is not configured on this server."})
			return
		}
		h(w, r, k)
	}
}

func fileKVKey(tenant, id string) string { return tenant + "." + id }

func newFileID() string { return sortableID("file-") }

// sortableID starts with the creation time in microseconds, so ids created
// in the same second still sort in creation order.
func sortableID(prefix string) string {
	return prefix + fmt.Sprintf("%013x", time.Now().UnixMicro()) + events.NewID()[:11]
}

// countingReader fails once more than limit bytes were read.
type countingReader struct {
	r     io.Reader
	n     int64
	limit int64
}

var errFileTooLarge = errors.New("file too large")

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		return n, errFileTooLarge
	}
	return n, err
}

func (s *Service) uploadFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" || params["boundary"] == "" {
		contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeInvalidRequest, "Upload the file as multipart/form-data with the fields 'purpose' and 'file'."))
		return
	}
	limit := s.cfg.MaxFileBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20)
	mr, err := r.MultipartReader()
	if err != nil {
		contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeInvalidRequest, "The multipart body could not be read."))
		return
	}
	var purpose string
	var rec *fileRecord
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				contracts.Write(w, contracts.ErrBodyTooLarge(limit))
				return
			}
			contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeInvalidRequest, "The multipart body could not be read."))
			return
		}
		switch part.FormName() {
		case "purpose":
			b, _ := io.ReadAll(io.LimitReader(part, 64))
			purpose = strings.TrimSpace(string(b))
		case "file":
			if rec != nil {
				contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeInvalidRequest, "Send one file per request."))
				return
			}
			name := part.FileName()
			if name == "" {
				name = "upload"
			}
			id := newFileID()
			key := objstore.TenantPrefix(k.Tenant) + "files/" + id
			cr := &countingReader{r: part, limit: limit}
			info, err := s.deps.Objects.Put(r.Context(), key, cr, -1, part.Header.Get("Content-Type"))
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.Is(err, errFileTooLarge) || errors.As(err, &mbe) {
					contracts.Write(w, contracts.ErrBodyTooLarge(limit))
					return
				}
				s.log.Error("store file", "tenant", k.Tenant, "err", err)
				contracts.Write(w, contracts.ErrInternal("The file could not be stored."))
				return
			}
			rec = &fileRecord{File: File{ID: id, Object: "file", Bytes: info.Size, CreatedAt: time.Now().Unix(), Filename: name,
				Status: "processed", SHA256: info.SHA256}, Tenant: k.Tenant, ObjectKey: key}
		}
		_ = part.Close()
	}
	if rec == nil {
		contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeMissingParam, "Missing required parameter: 'file'."))
		return
	}
	if !slices.Contains(filePurposes, purpose) {
		_ = s.deps.Objects.Delete(context.WithoutCancel(r.Context()), rec.ObjectKey)
		contracts.Write(w, contracts.ErrBadRequest("purpose", contracts.CodeInvalidRequest,
			fmt.Sprintf("Invalid 'purpose' %q: expected one of %s.", purpose, strings.Join(filePurposes, ", "))))
		return
	}
	rec.Purpose = purpose
	b, _ := json.Marshal(rec)
	if _, err := s.filesKV.Put(r.Context(), fileKVKey(k.Tenant, rec.ID), b); err != nil {
		_ = s.deps.Objects.Delete(context.WithoutCancel(r.Context()), rec.ObjectKey)
		contracts.Write(w, contracts.ErrInternal("The file could not be recorded."))
		return
	}
	writeJSON(w, http.StatusOK, rec.File)
}

func (s *Service) loadFile(ctx context.Context, tenant, id string) (*fileRecord, error) {
	if !strings.HasPrefix(id, "file-") || strings.ContainsAny(id, ".*> ") {
		return nil, registry.ErrNotFound
	}
	e, err := s.filesKV.Get(ctx, fileKVKey(tenant, id))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, registry.ErrNotFound
		}
		return nil, err
	}
	var rec fileRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

func (s *Service) fileError(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, registry.ErrNotFound) {
		contracts.Write(w, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Param: "file_id", Code: contracts.CodeNotFound,
			Message: fmt.Sprintf("No such File object: %s", id)})
		return
	}
	s.log.Error("file store", "file_id", id, "err", err)
	contracts.Write(w, contracts.ErrInternal("The file store could not be reached."))
}

func (s *Service) getFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	rec, err := s.loadFile(r.Context(), k.Tenant, r.PathValue("id"))
	if err != nil {
		s.fileError(w, r.PathValue("id"), err)
		return
	}
	writeJSON(w, http.StatusOK, rec.File)
}

func (s *Service) fileContent(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	rec, err := s.loadFile(r.Context(), k.Tenant, r.PathValue("id"))
	if err != nil {
		s.fileError(w, r.PathValue("id"), err)
		return
	}
	body, info, err := s.deps.Objects.Get(r.Context(), rec.ObjectKey)
	if err != nil {
		s.fileError(w, rec.ID, err)
		return
	}
	defer body.Close()
	ctype := info.ContentType
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": rec.Filename}))
	_, _ = io.Copy(w, body)
}

func (s *Service) deleteFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	rec, err := s.loadFile(r.Context(), k.Tenant, r.PathValue("id"))
	if err != nil {
		s.fileError(w, r.PathValue("id"), err)
		return
	}
	if err := s.filesKV.Delete(r.Context(), fileKVKey(k.Tenant, rec.ID)); err != nil {
		s.fileError(w, rec.ID, err)
		return
	}
	if err := s.deps.Objects.Delete(r.Context(), rec.ObjectKey); err != nil {
		s.log.Error("delete file bytes", "file_id", rec.ID, "err", err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": rec.ID, "object": "file", "deleted": true})
}

// listFiles pages through a tenant's files, newest first by default.
func (s *Service) listFiles(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	q := r.URL.Query()
	limit := 10000
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			contracts.Write(w, contracts.ErrBadRequest("limit", contracts.CodeInvalidRequest, "Invalid 'limit': expected an integer from 1 to 10000."))
			return
		}
		limit = n
	}
	order := q.Get("order")
	if order == "" {
		order = "desc"
	}
	if order != "asc" && order != "desc" {
		contracts.Write(w, contracts.ErrBadRequest("order", contracts.CodeInvalidRequest, "Invalid 'order': expected asc or desc."))
		return
	}
	purpose := q.Get("purpose")
	lister, err := s.filesKV.ListKeysFiltered(r.Context(), k.Tenant+".>")
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		s.fileError(w, "", err)
		return
	}
	var all []File
	if lister != nil {
		for key := range lister.Keys() {
			e, err := s.filesKV.Get(r.Context(), key)
			if err != nil {
				continue
			}
			var rec fileRecord
			if json.Unmarshal(e.Value(), &rec) == nil && (purpose == "" || rec.Purpose == purpose) {
				all = append(all, rec.File)
			}
		}
	}
	slices.SortFunc(all, func(a, b File) int {
		c := int(a.CreatedAt - b.CreatedAt)
		if c == 0 {
			c = strings.Compare(a.ID, b.ID)
		}
		if order == "desc" {
			return -c
		}
		return c
	})
	page := pageAfter(all, q.Get("after"), func(f File) string { return f.ID }, limit)
	writeJSON(w, http.StatusOK, listPage(page.items, page.more, func(f File) string { return f.ID }))
}

type paged[T any] struct {
	items []T
	more  bool
}

// pageAfter returns up to limit items after the one with id after.
func pageAfter[T any](items []T, after string, id func(T) string, limit int) paged[T] {
	start := 0
	if after != "" {
		for i, it := range items {
			if id(it) == after {
				start = i + 1
				break
			}
		}
	}
	items = items[start:]
	if len(items) > limit {
		return paged[T]{items: items[:limit], more: true}
	}
	return paged[T]{items: items}
}

// listPage is OpenAI's cursor page.
func listPage[T any](items []T, more bool, id func(T) string) map[string]any {
	out := map[string]any{"object": "list", "data": items, "has_more": more, "first_id": nil, "last_id": nil}
	if items == nil {
		out["data"] = []T{}
	}
	if len(items) > 0 {
		out["first_id"] = id(items[0])
		out["last_id"] = id(items[len(items)-1])
	}
	return out
}
