// Package containers serves OpenAI's Containers API (containers and
// container files) and aiforge's exec extension, POST
// /v1/containers/{id}/exec, in front of the sandbox service. The edge keeps
// no container state: it authenticates the key, applies its rate limit,
// checks the request with pkg/sandbox's Normalize, and calls the sandbox
// service over the bus (Client); the service's ErrorBody is answered in
// OpenAI's error shape with its status, code and param.
//
// File bytes travel through the object store, never on the bus: an upload
// is streamed (bounded by sandbox.MaxFileBytes) to sandbox.UploadKey and
// the service copies it into the sandbox; a download is copied out by the
// service to the key its ContentReply names, which the edge streams to the
// client and then deletes. The edge deletes an upload once the service has
// answered for it, whatever the answer.
package containers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sandbox"
	"github.com/aiforge/aiforge/pkg/spend"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// Deps are what the Containers API needs.
type Deps struct {
	Client *Client
	Keys   httpapi.Keys
	// Objects carries file bytes; without it uploads of file bytes and
	// downloads answer 503 storage_unavailable (file_id copies work).
	Objects objstore.Store
	// Rates is events.BucketRateLimits: every call counts against its
	// key's requests per minute. Nil: no rate limit.
	Rates  jetstream.KeyValue
	Logger *slog.Logger
	// MaxFileBytes bounds an upload; default and ceiling
	// sandbox.MaxFileBytes.
	MaxFileBytes int64
	// Now is the clock of rate limits; default time.Now.
	Now func() time.Time
}

// Service is the Containers API.
type Service struct {
	d   Deps
	log *slog.Logger
}

// New builds the Containers API.
func New(d Deps) *Service {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.MaxFileBytes <= 0 || d.MaxFileBytes > sandbox.MaxFileBytes {
		d.MaxFileBytes = sandbox.MaxFileBytes
	}
	return &Service{d: d, log: d.Logger}
}

// Routes mounts the Containers API.
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/containers", s.api(s.create))
	mux.HandleFunc("GET /v1/containers", s.api(s.list))
	mux.HandleFunc("GET /v1/containers/{id}", s.api(s.get))
	mux.HandleFunc("DELETE /v1/containers/{id}", s.api(s.delete))
	mux.HandleFunc("POST /v1/containers/{id}/files", s.api(s.fileCreate))
	mux.HandleFunc("GET /v1/containers/{id}/files", s.api(s.fileList))
	mux.HandleFunc("GET /v1/containers/{id}/files/{file_id}", s.api(s.fileGet))
	mux.HandleFunc("GET /v1/containers/{id}/files/{file_id}/content", s.api(s.fileContent))
	mux.HandleFunc("DELETE /v1/containers/{id}/files/{file_id}", s.api(s.fileDelete))
	mux.HandleFunc("POST /v1/containers/{id}/exec", s.api(s.exec))
}

// api authenticates the key and counts the call against its rate limit.
func (s *Service) api(h func(http.ResponseWriter, *http.Request, *registry.Key)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		k := httpapi.Authenticate(s.d.Keys, w, r)
		if k == nil {
			return
		}
		if e := s.admitRate(r.Context(), w, k); e != nil {
			contracts.Write(w, e)
			return
		}
		h(w, r, k)
	}
}

func (s *Service) admitRate(ctx context.Context, w http.ResponseWriter, k *registry.Key) *contracts.Error {
	if s.d.Rates == nil || k.RPM <= 0 {
		return nil
	}
	d, err := spend.Admit(ctx, s.d.Rates, k.ID, spend.RateLimit{RPM: k.RPM}, 0, s.d.Now())
	if err != nil {
		s.log.Error("rate limit check failed", "key_id", k.ID, "err", err)
		return httpapi.StoreError(ctx, err, "rate limiter", "The rate limiter could not be reached.")
	}
	h := w.Header()
	h.Set("x-ratelimit-limit-requests", strconv.FormatInt(d.LimitRequests, 10))
	h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(d.RemainingRequests, 10))
	if !d.Allowed {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Reset.Seconds()))))
		return &contracts.Error{Status: http.StatusTooManyRequests, Type: contracts.TypeRateLimit, Code: contracts.CodeRateLimited,
			Message: fmt.Sprintf("Rate limit reached for requests per minute on this key (limit %d). Retry after %s.", d.LimitRequests, d.Reset.Round(time.Second))}
	}
	return nil
}

func caller(k *registry.Key) Caller { return Caller{Tenant: k.Tenant, KeyID: k.ID} }

// fail answers e, unless the client already left.
func fail(w http.ResponseWriter, e *contracts.Error) {
	if IsClientGone(e) {
		return
	}
	contracts.Write(w, e)
}

// fieldError answers a request field Normalize refused.
func fieldError(w http.ResponseWriter, err error) {
	var fe *sandbox.FieldError
	if errors.As(err, &fe) {
		contracts.Write(w, contracts.ErrBadRequest(fe.Param, fe.Code, httpapi.UpperFirst(fe.Message)+"."))
		return
	}
	contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, httpapi.UpperFirst(err.Error())+"."))
}

func (s *Service) create(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	var req sandbox.CreateRequest
	if !httpapi.Decode(w, r, &req) {
		return
	}
	if err := req.Normalize(); err != nil {
		fieldError(w, err)
		return
	}
	c, e := s.d.Client.Create(r.Context(), caller(k), req)
	if e != nil {
		fail(w, e)
		return
	}
	s.log.Info("container created", "tenant", k.Tenant, "container_id", c.ID, "memory_limit", c.MemoryLimit)
	httpapi.WriteJSON(w, http.StatusOK, c)
}

// listRequest reads OpenAI's list parameters: after, limit (1-100, default
// 20), order (default desc) and, for containers, name.
func listRequest(w http.ResponseWriter, r *http.Request, withName bool) (sandbox.ListRequest, bool) {
	limit, order, ok := httpapi.ListParams(w, r, 20, 100)
	if !ok {
		return sandbox.ListRequest{}, false
	}
	q := r.URL.Query()
	req := sandbox.ListRequest{After: q.Get("after"), Limit: limit, Order: order}
	if req.After != "" && !ValidID(req.After) {
		contracts.Write(w, contracts.ErrBadRequest("after", contracts.CodeInvalidRequest, "Invalid 'after': not an id."))
		return req, false
	}
	if withName {
		req.Name = q.Get("name")
		if len(req.Name) > sandbox.MaxNameLen {
			contracts.Write(w, contracts.ErrBadRequest("name", contracts.CodeInvalidRequest, fmt.Sprintf("Invalid 'name': longer than %d bytes.", sandbox.MaxNameLen)))
			return req, false
		}
	}
	return req, true
}

func (s *Service) list(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	req, ok := listRequest(w, r, true)
	if !ok {
		return
	}
	page, e := s.d.Client.List(r.Context(), caller(k), req)
	if e != nil {
		fail(w, e)
		return
	}
	if page.Data == nil {
		page.Data = []sandbox.Container{}
	}
	page.Object = sandbox.ObjectList
	httpapi.WriteJSON(w, http.StatusOK, page)
}

func (s *Service) get(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	c, e := s.d.Client.Get(r.Context(), caller(k), r.PathValue("id"))
	if e != nil {
		fail(w, e)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, c)
}

func (s *Service) delete(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	d, e := s.d.Client.Delete(r.Context(), caller(k), r.PathValue("id"))
	if e != nil {
		fail(w, e)
		return
	}
	s.log.Info("container deleted", "tenant", k.Tenant, "container_id", r.PathValue("id"))
	httpapi.WriteJSON(w, http.StatusOK, sandbox.Deleted{ID: d.ID, Object: sandbox.ObjectContainerDeleted, Deleted: true})
}

// fileID is the {file_id} of the path, or a 404 answered.
func fileID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("file_id")
	if !ValidID(id) {
		contracts.Write(w, errFileNotFound(id))
		return "", false
	}
	return id, true
}

func errFileNotFound(id string) *contracts.Error {
	return &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Code: sandbox.CodeFileNotFound,
		Message: fmt.Sprintf("No such container file: %s", boundedID(id))}
}

func (s *Service) fileList(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	req, ok := listRequest(w, r, false)
	if !ok {
		return
	}
	page, e := s.d.Client.ListFiles(r.Context(), caller(k), r.PathValue("id"), req)
	if e != nil {
		fail(w, e)
		return
	}
	if page.Data == nil {
		page.Data = []sandbox.File{}
	}
	page.Object = sandbox.ObjectList
	httpapi.WriteJSON(w, http.StatusOK, page)
}

func (s *Service) fileGet(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	id, ok := fileID(w, r)
	if !ok {
		return
	}
	var f sandbox.File
	if e := s.d.Client.File(r.Context(), caller(k), r.PathValue("id"), sandbox.OpFileGet, sandbox.FileRequest{ID: id}, &f); e != nil {
		fail(w, e)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, f)
}

func (s *Service) fileDelete(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	id, ok := fileID(w, r)
	if !ok {
		return
	}
	var d sandbox.Deleted
	if e := s.d.Client.File(r.Context(), caller(k), r.PathValue("id"), sandbox.OpFileDelete, sandbox.FileRequest{ID: id}, &d); e != nil {
		fail(w, e)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, sandbox.Deleted{ID: id, Object: sandbox.ObjectFileDeleted, Deleted: true})
}

// fileCreate adds a file to a container: a multipart upload (field
// "file"), or JSON {"file_id"} naming one of the tenant's files.
func (s *Service) fileCreate(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	who, container := caller(k), r.PathValue("id")
	if ct != "multipart/form-data" {
		var req struct {
			FileID string `json:"file_id"`
		}
		if !httpapi.Decode(w, r, &req) {
			return
		}
		if req.FileID == "" {
			contracts.Write(w, contracts.ErrBadRequest("file_id", contracts.CodeMissingParam, "Send the file as multipart/form-data in the field 'file', or JSON {\"file_id\": \"file-...\"}."))
			return
		}
		if !ValidID(req.FileID) {
			contracts.Write(w, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Param: "file_id", Code: contracts.CodeNotFound,
				Message: fmt.Sprintf("No such File object: %s", boundedID(req.FileID))})
			return
		}
		var f sandbox.File
		if e := s.d.Client.File(r.Context(), who, container, sandbox.OpFileCreate, sandbox.FileRequest{FileID: req.FileID}, &f); e != nil {
			fail(w, e)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, f)
		return
	}
	if s.d.Objects == nil {
		contracts.Write(w, contracts.ErrStorageUnavailable())
		return
	}
	if params["boundary"] == "" {
		contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeInvalidRequest, "The multipart body has no boundary."))
		return
	}
	// The container is looked up first, so that no bytes are stored for a
	// container that does not exist.
	if _, e := s.d.Client.Get(r.Context(), who, container); e != nil {
		fail(w, e)
		return
	}
	limit := s.d.MaxFileBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20)
	mr, err := r.MultipartReader()
	if err != nil {
		contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeInvalidRequest, "The multipart body could not be read."))
		return
	}
	var up *upload
	defer func() {
		if up != nil {
			s.dropObject(r.Context(), up.key)
		}
	}()
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				s.tooLarge(w, r, limit)
				return
			}
			contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeInvalidRequest, "The multipart body could not be read."))
			return
		}
		if part.FormName() != "file" {
			_ = part.Close()
			continue
		}
		if up != nil {
			contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeInvalidRequest, "Send one file per request."))
			return
		}
		name := rawFileName(part)
		if _, err := sandbox.CleanPath(name); err != nil {
			contracts.Write(w, contracts.ErrBadRequest("file", sandbox.CodeInvalidPath, "Invalid file name: "+err.Error()+"."))
			return
		}
		key := sandbox.UploadKey(k.Tenant, container, replyToken())
		up = &upload{key: key, name: name}
		cr := &boundedReader{r: part, limit: limit}
		info, err := s.d.Objects.Put(r.Context(), key, cr, -1, part.Header.Get("Content-Type"))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.Is(err, errTooLarge) || errors.As(err, &mbe) {
				s.tooLarge(w, r, limit)
				return
			}
			if r.Context().Err() != nil {
				return
			}
			s.log.Error("store container upload", "tenant", k.Tenant, "container_id", container, "err", err)
			contracts.Write(w, contracts.ErrInternal("The file could not be stored."))
			return
		}
		up.bytes = info.Size
		_ = part.Close()
	}
	if up == nil {
		contracts.Write(w, contracts.ErrBadRequest("file", contracts.CodeMissingParam, "Missing required parameter: 'file'."))
		return
	}
	var f sandbox.File
	if e := s.d.Client.File(r.Context(), who, container, sandbox.OpFileCreate,
		sandbox.FileRequest{ObjectKey: up.key, Name: up.name, Bytes: up.bytes}, &f); e != nil {
		fail(w, e)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, f)
}

// rawFileName is the upload's file name as sent: multipart's FileName
// keeps only the last element, which would turn "../x" into "x" silently;
// the name is checked with sandbox.CleanPath instead, and may name a
// directory under /mnt/data.
func rawFileName(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

type upload struct {
	key, name string
	bytes     int64
}

var errTooLarge = errors.New("file over the limit")

// boundedReader fails once more than limit bytes were read.
type boundedReader struct {
	r     io.Reader
	n     int64
	limit int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.limit {
		return n, errTooLarge
	}
	return n, err
}

// tooLarge answers 413 file_too_large, then reads what is left of the body
// (bounded, as httpapi.TooLarge does) so that the client sees the answer.
func (s *Service) tooLarge(w http.ResponseWriter, r *http.Request, limit int64) {
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	w.Header().Set("Connection", "close")
	contracts.Write(w, &contracts.Error{Status: http.StatusRequestEntityTooLarge, Type: contracts.TypeInvalidRequest, Param: "file", Code: sandbox.CodeFileTooLarge,
		Message: fmt.Sprintf("A container file may hold at most %d bytes.", limit)})
	_ = rc.Flush()
	_, _ = io.CopyN(io.Discard, r.Body, httpapi.DrainLimit)
}

func (s *Service) dropObject(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.d.Objects.Delete(ctx, key); err != nil {
		s.log.Warn("delete container transfer object", "key", key, "err", err)
	}
}

// fileContent streams a file out of a container: the service copies it to
// the object store and names the key, the edge streams and deletes it.
func (s *Service) fileContent(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	id, ok := fileID(w, r)
	if !ok {
		return
	}
	if s.d.Objects == nil {
		contracts.Write(w, contracts.ErrStorageUnavailable())
		return
	}
	container := r.PathValue("id")
	var cr sandbox.ContentReply
	if e := s.d.Client.File(r.Context(), caller(k), container, sandbox.OpFileContent, sandbox.FileRequest{ID: id}, &cr); e != nil {
		fail(w, e)
		return
	}
	// Only a key of this tenant's container is ever read.
	if !strings.HasPrefix(cr.ObjectKey, "containers/"+k.Tenant+"/"+container+"/") || strings.Contains(cr.ObjectKey, "..") {
		s.log.Error("sandbox named a content key outside the container", "tenant", k.Tenant, "container_id", container)
		contracts.Write(w, badReply())
		return
	}
	defer s.dropObject(r.Context(), cr.ObjectKey)
	body, info, err := s.d.Objects.Get(r.Context(), cr.ObjectKey)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			contracts.Write(w, errFileNotFound(id))
			return
		}
		s.log.Error("read container file content", "tenant", k.Tenant, "container_id", container, "err", err)
		contracts.Write(w, contracts.ErrInternal("The file could not be read."))
		return
	}
	defer body.Close()
	base := path.Base(cr.File.Path)
	if base == "." || base == "/" || base == "" {
		base = id
	}
	w.Header().Set("Content-Type", contentType(base, info.ContentType))
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": base}))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = io.Copy(w, body)
}

// contentType is the type a file's extension names, else the stored one,
// else application/octet-stream.
func contentType(name, stored string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	if stored != "" && stored != objstore.DefaultContentType {
		return stored
	}
	return objstore.DefaultContentType
}

func (s *Service) exec(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	var req sandbox.ExecRequest
	if !httpapi.Decode(w, r, &req) {
		return
	}
	if err := req.Normalize(); err != nil {
		fieldError(w, err)
		return
	}
	who, container := caller(k), r.PathValue("id")
	if !req.Stream {
		res, e := s.d.Client.Exec(r.Context(), who, container, req)
		if e != nil {
			fail(w, e)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, res)
		return
	}
	sse := &sseWriter{w: w}
	res, e := s.d.Client.ExecStream(r.Context(), who, container, req, func(ch sandbox.ExecChunk) error {
		return sse.event(ch.Type, ch)
	})
	switch {
	case IsClientGone(e):
		return
	case e != nil && !sse.started:
		contracts.Write(w, e)
		return
	case e != nil:
		_ = sse.event(sandbox.EventError, map[string]any{"type": sandbox.EventError, "code": e.Code, "message": e.Message, "param": nilIfEmpty(e.Param)})
	default:
		_ = sse.event(sandbox.EventDone, doneEvent{Type: sandbox.EventDone, ExecResult: res})
	}
	_ = sse.done()
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// doneEvent is the last event of a streamed exec: the result with its
// type.
type doneEvent struct {
	Type string `json:"type"`
	sandbox.ExecResult
}

// sseWriter writes a streamed exec's events, starting the stream at the
// first.
type sseWriter struct {
	w       http.ResponseWriter
	started bool
}

func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

func (s *sseWriter) event(typ string, v any) error {
	s.start()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", typ, b); err != nil {
		return err
	}
	return http.NewResponseController(s.w).Flush()
}

func (s *sseWriter) done() error {
	s.start()
	if err := contracts.WriteDone(s.w); err != nil {
		return err
	}
	return http.NewResponseController(s.w).Flush()
}
