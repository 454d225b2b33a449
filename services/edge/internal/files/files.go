// Package files serves OpenAI's Files API: bytes in the object store under
// the tenant's prefix, records in the files bucket under the tenant's key
// prefix, so another tenant's file id is simply not found.
package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/contracts"
	pkgfiles "github.com/aiforge/aiforge/pkg/files"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// File is OpenAI's file object (pkg/files, shared with the batch service).
type File = pkgfiles.File

// Record is what the bucket stores (the tenant and object key included).
type Record = pkgfiles.Record

var filePurposes = pkgfiles.UploadPurposes

// Deps are what the Files API needs.
type Deps struct {
	// Objects stores the bytes; nil means storage is not configured.
	Objects objstore.Store
	// KV is the files bucket (events.BucketFiles).
	KV     jetstream.KeyValue
	Keys   httpapi.Keys
	Logger *slog.Logger
	// MaxFileBytes bounds one uploaded file.
	MaxFileBytes int64
	// MaxBatchFileBytes bounds a batch input file (purpose batch); default
	// batch.MaxFileBytes, OpenAI's 200 MB.
	MaxBatchFileBytes int64
}

// Service is the Files API.
type Service struct {
	d   Deps
	log *slog.Logger
}

// New builds the Files API.
func New(d Deps) *Service {
	if d.MaxBatchFileBytes <= 0 {
		d.MaxBatchFileBytes = batch.MaxFileBytes
	}
	return &Service{d: d, log: d.Logger}
}

// Routes mounts the Files API.
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/files", s.tenantAPI(s.uploadFile))
	mux.HandleFunc("GET /v1/files", s.tenantAPI(s.listFiles))
	mux.HandleFunc("GET /v1/files/{id}", s.tenantAPI(s.getFile))
	mux.HandleFunc("GET /v1/files/{id}/content", s.tenantAPI(s.fileContent))
	mux.HandleFunc("DELETE /v1/files/{id}", s.tenantAPI(s.deleteFile))
}

func (s *Service) tenantAPI(h func(http.ResponseWriter, *http.Request, *registry.Key)) http.HandlerFunc {
	return httpapi.TenantAPI(s.d.Keys, s.d.Objects != nil, h)
}

func fileKVKey(tenant, id string) string { return pkgfiles.Key(tenant, id) }

func newFileID() string { return httpapi.SortableID("file-") }

// countingReader fails once more than limit bytes were read.
type countingReader struct {
	r     io.Reader
	n     int64
	limit int64
	lines lineCounter
}

var errFileTooLarge = errors.New("file too large")

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.lines.count(p[:n])
	if c.n > c.limit {
		return n, errFileTooLarge
	}
	return n, err
}

// lineCounter counts the lines of a JSONL stream that hold more than
// whitespace, the last one counted whether or not a newline ends it: the
// requests of a batch input file, known once it is stored, so a batch can
// be refused up front when its tenant's enqueued limit would be passed.
type lineCounter struct {
	lines   int64
	content bool // the current line has a byte other than whitespace
}

func (l *lineCounter) count(p []byte) {
	for _, b := range p {
		switch b {
		case '\n':
			if l.content {
				l.lines++
			}
			l.content = false
		case ' ', '\t', '\r':
		default:
			l.content = true
		}
	}
}

// total is the count with a last line that no newline ends.
func (l *lineCounter) total() int64 {
	if l.content {
		return l.lines + 1
	}
	return l.lines
}

// batchFileTooLarge answers a batch input file over OpenAI's bound.
func batchFileTooLarge(limit int64) *contracts.Error {
	return &contracts.Error{Status: http.StatusRequestEntityTooLarge, Type: contracts.TypeInvalidRequest, Param: "file", Code: contracts.CodeBodyTooLarge,
		Message: fmt.Sprintf("A batch input file (purpose 'batch') may hold at most %d bytes.", limit)}
}

func (s *Service) uploadFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" || params["boundary"] == "" {
		contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeInvalidRequest, "Upload the file as multipart/form-data with the fields 'purpose' and 'file'."))
		return
	}
	limit := s.d.MaxFileBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20)
	mr, err := r.MultipartReader()
	if err != nil {
		contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeInvalidRequest, "The multipart body could not be read."))
		return
	}
	var purpose string
	var rec *Record
	var lines int64
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
			key := pkgfiles.ObjectKey(k.Tenant, id)
			// A purpose sent before the file bounds a batch file as it
			// streams; one sent after it is checked once it is stored.
			fileLimit := limit
			if purpose == pkgfiles.PurposeBatch {
				fileLimit = min(limit, s.d.MaxBatchFileBytes)
			}
			cr := &countingReader{r: part, limit: fileLimit}
			info, err := s.d.Objects.Put(r.Context(), key, cr, -1, part.Header.Get("Content-Type"))
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.Is(err, errFileTooLarge) || errors.As(err, &mbe) {
					if fileLimit < limit && !errors.As(err, &mbe) {
						contracts.Write(w, batchFileTooLarge(s.d.MaxBatchFileBytes))
						return
					}
					contracts.Write(w, contracts.ErrBodyTooLarge(limit))
					return
				}
				s.log.Error("store file", "tenant", k.Tenant, "err", err)
				contracts.Write(w, contracts.ErrInternal("The file could not be stored."))
				return
			}
			rec = &Record{File: File{ID: id, Object: "file", Bytes: info.Size, CreatedAt: time.Now().Unix(), Filename: name,
				Status: "processed", SHA256: info.SHA256}, Tenant: k.Tenant, ObjectKey: key}
			lines = cr.lines.total()
		}
		_ = part.Close()
	}
	if rec == nil {
		contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeMissingParam, "Missing required parameter: 'file'."))
		return
	}
	if !slices.Contains(filePurposes, purpose) {
		_ = s.d.Objects.Delete(context.WithoutCancel(r.Context()), rec.ObjectKey)
		msg := fmt.Sprintf("Invalid 'purpose' %q: expected one of %s.", httpapi.Bounded(purpose, 64), strings.Join(filePurposes, ", "))
		if purpose == pkgfiles.PurposeBatchOutput {
			msg = "Files of purpose 'batch_output' are written by the Batch API (a batch's output and error files); they cannot be uploaded."
		}
		contracts.Write(w, contracts.ErrBadRequest("purpose", contracts.CodeInvalidRequest, msg))
		return
	}
	if purpose == pkgfiles.PurposeBatch {
		if rec.Bytes > s.d.MaxBatchFileBytes {
			_ = s.d.Objects.Delete(context.WithoutCancel(r.Context()), rec.ObjectKey)
			contracts.Write(w, batchFileTooLarge(s.d.MaxBatchFileBytes))
			return
		}
		rec.Lines = lines
	}
	rec.Purpose = purpose
	if _, err := kv.Create(r.Context(), s.d.KV, fileKVKey(k.Tenant, rec.ID), *rec); err != nil {
		s.log.Error("record file", "tenant", k.Tenant, "file_id", rec.ID, "err", err)
		_ = s.d.Objects.Delete(context.WithoutCancel(r.Context()), rec.ObjectKey)
		contracts.Write(w, httpapi.StoreError(r.Context(), err, "file store", "The file could not be recorded."))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, rec.File)
}

// Load is the file id of tenant: an error matching kv.ErrNotFound when
// there is none, a *kv.DecodeError when its record does not decode.
func (s *Service) Load(ctx context.Context, tenant, id string) (*Record, error) {
	if !strings.HasPrefix(id, "file-") || strings.ContainsAny(id, ".*> ") {
		return nil, fmt.Errorf("%w: file %q", kv.ErrNotFound, id)
	}
	rec, _, err := kv.Get[Record](ctx, s.d.KV, fileKVKey(tenant, id))
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

func (s *Service) fileError(w http.ResponseWriter, r *http.Request, id string, err error) {
	WriteError(w, r, s.log, id, err)
}

// WriteError answers a failure of r to read or write a record: 404 for a
// file that does not exist (kv.ErrNotFound), 503 while the bus is
// unavailable for a moment (httpapi.StoreError), else 500; logged.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, id string, err error) {
	if errors.Is(err, kv.ErrNotFound) {
		contracts.Write(w, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Param: "file_id", Code: contracts.CodeNotFound,
			Message: fmt.Sprintf("No such File object: %s", id)})
		return
	}
	log.Error("file store", "file_id", id, "err", err)
	var de *kv.DecodeError
	if errors.As(err, &de) {
		contracts.Write(w, contracts.ErrInternal("A stored record could not be read."))
		return
	}
	contracts.Write(w, httpapi.StoreError(r.Context(), err, "file store", "The file store could not be reached."))
}

func (s *Service) getFile(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	rec, err := s.Load(r.Context(), k.Tenant, r.PathValue("id"))
	if err != nil {
		s.fileError(w, r, r.PathValue("id"), err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, rec.File)
}

func (s *Service) fileContent(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	rec, err := s.Load(r.Context(), k.Tenant, r.PathValue("id"))
	if err != nil {
		s.fileError(w, r, r.PathValue("id"), err)
		return
	}
	body, info, err := s.d.Objects.Get(r.Context(), rec.ObjectKey)
	if err != nil {
		s.fileError(w, r, rec.ID, err)
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
	rec, err := s.Load(r.Context(), k.Tenant, r.PathValue("id"))
	if err != nil {
		s.fileError(w, r, r.PathValue("id"), err)
		return
	}
	if err := kv.Delete(r.Context(), s.d.KV, fileKVKey(k.Tenant, rec.ID)); err != nil {
		s.fileError(w, r, rec.ID, err)
		return
	}
	if err := s.d.Objects.Delete(r.Context(), rec.ObjectKey); err != nil {
		s.log.Error("delete file bytes", "file_id", rec.ID, "err", err)
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": rec.ID, "object": "file", "deleted": true})
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
	// A record that does not decode fails the listing (logged with its
	// key) rather than leaving a file out of it unnoticed.
	entries, err := kv.List[Record](r.Context(), s.d.KV, k.Tenant+".>")
	if err != nil {
		s.fileError(w, r, "", err)
		return
	}
	var all []File
	for _, e := range entries {
		if purpose == "" || e.Value.Purpose == purpose {
			all = append(all, e.Value.File)
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
	page, more := httpapi.PageAfter(all, q.Get("after"), func(f File) string { return f.ID }, limit)
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ListPage(page, more, func(f File) string { return f.ID }))
}
