package models

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// Resumable model uploads. A client opens a session naming every file and
// its size; the edge creates the catalog version (status uploading). Each
// file is then sent in parts of part_size bytes (the last one shorter), in
// any order and as often as needed: a part is an object of its own under
// uploads/<id>/, so a client that lost its connection asks which parts
// arrived and sends only the rest. Complete concatenates every file's parts
// into the version's prefix, records the files (size and SHA-256 computed
// while writing) and publishes ModelUploadedV1 for the guardian.

// Stable error codes of the upload API.
const (
	codePartHashMismatch = "part_hash_mismatch"
	codePartSizeMismatch = "part_size_mismatch"
	codeUploadIncomplete = "upload_incomplete"
	codeInvalidPath      = "invalid_path"
	codeUploadAborted    = "upload_aborted"
)

// HeaderPartSHA256 carries the SHA-256 a client computed for a part.
const HeaderPartSHA256 = "X-Aiforge-Part-Sha256"

const (
	maxUploadFiles    = 10000
	maxUploadBody     = 8 << 20
	maxUploadPathLen  = 512
	uploadStateOpen   = "open"
	uploadStateClosed = "completed"
)

// uploadFile is one expected file of an upload.
type uploadFile struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Parts int    `json:"parts"`
}

// uploadSession is what the uploads bucket keeps per upload.
type uploadSession struct {
	ID          string            `json:"id"`
	State       string            `json:"state"`
	Name        string            `json:"name"`
	Kind        string            `json:"kind"`
	BaseModel   string            `json:"base_model,omitempty"`
	Version     int               `json:"version"`
	PartSize    int64             `json:"part_size"`
	Files       []uploadFile      `json:"files"`
	Manifest    map[string]string `json:"manifest,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	CompletedAt time.Time         `json:"completed_at,omitzero"`
}

// partInfo is a part the object store holds.
type partInfo struct {
	Part   int    `json:"part"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// uploadFileView is a file of an upload with the parts received so far.
type uploadFileView struct {
	uploadFile
	Received []partInfo `json:"received"`
}

type uploadView struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	State       string            `json:"state"`
	Name        string            `json:"name"`
	Kind        string            `json:"kind"`
	BaseModel   string            `json:"base_model,omitempty"`
	Version     int               `json:"version"`
	PartSize    int64             `json:"part_size"`
	Files       []uploadFileView  `json:"files"`
	Manifest    map[string]string `json:"manifest,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	CompletedAt time.Time         `json:"completed_at,omitzero"`
}

func (s *Service) uploadRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /admin/v1/uploads", s.admin(s.withObjects(s.createUpload)))
	mux.HandleFunc("GET /admin/v1/uploads/{id}", s.admin(s.withObjects(s.getUpload)))
	mux.HandleFunc("PUT /admin/v1/uploads/{id}/parts/{n}/{path...}", s.admin(s.withObjects(s.putPart)))
	mux.HandleFunc("POST /admin/v1/uploads/{id}/complete", s.admin(s.withObjects(s.completeUpload)))
	mux.HandleFunc("DELETE /admin/v1/uploads/{id}", s.admin(s.withObjects(s.abortUpload)))
}

func (s *Service) withObjects(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.d.Objects == nil {
			contracts.Write(w, contracts.ErrStorageUnavailable())
			return
		}
		h(w, r)
	}
}

func partsOf(size, partSize int64) int {
	return int((size + partSize - 1) / partSize)
}

// partLen is the exact length of part n (1-based) of a file.
func partLen(size, partSize int64, n int) int64 {
	return min(partSize, size-int64(n-1)*partSize)
}

func partKey(id string, n int, p string) string {
	return fmt.Sprintf("uploads/%s/%05d/%s", id, n, p)
}

// validUploadPath reports why p cannot name a file of a model version.
func validUploadPath(p string) error {
	switch {
	case p == "":
		return errors.New("a file path is empty")
	case len(p) > maxUploadPathLen:
		return fmt.Errorf("file path %q is longer than %d bytes", p, maxUploadPathLen)
	case !utf8.ValidString(p):
		return fmt.Errorf("file path %q is not valid UTF-8", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("file path %q must be relative (no leading \"/\")", p)
	case strings.ContainsRune(p, '\\'):
		return fmt.Errorf("file path %q must use \"/\" separators", p)
	case path.Clean(p) != p:
		return fmt.Errorf("file path %q is not clean (empty, \".\" or \"..\" segments, or a trailing \"/\")", p)
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." || seg == "." {
			return fmt.Errorf("file path %q must not contain %q", p, seg)
		}
	}
	if strings.IndexFunc(p, unicode.IsControl) >= 0 {
		return fmt.Errorf("file path %q contains a control character", p)
	}
	return nil
}

type createUploadReq struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	BaseModel string `json:"base_model"`
	Files     []struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	} `json:"files"`
	Manifest map[string]string `json:"manifest"`
}

// validate checks the files and the manifest; it returns the files sorted
// by path with their part counts, and the manifest in lowercase hex.
func (q *createUploadReq) validate(partSize int64, prefix string) ([]uploadFile, map[string]string, *contracts.Error) {
	if len(q.Files) == 0 {
		return nil, nil, contracts.ErrBadRequest("files", contracts.CodeMissingParam, "An upload needs at least one file.")
	}
	if len(q.Files) > maxUploadFiles {
		return nil, nil, contracts.ErrBadRequest("files", contracts.CodeInvalidRequest, fmt.Sprintf("An upload holds at most %d files.", maxUploadFiles))
	}
	seen := make(map[string]bool, len(q.Files))
	files := make([]uploadFile, 0, len(q.Files))
	for _, f := range q.Files {
		if err := validUploadPath(f.Path); err != nil {
			return nil, nil, contracts.ErrBadRequest("files", codeInvalidPath, httpapi.UpperFirst(err.Error())+".")
		}
		if err := objstore.ValidateKey(prefix + f.Path); err != nil {
			return nil, nil, contracts.ErrBadRequest("files", codeInvalidPath, fmt.Sprintf("File path %q cannot be stored.", f.Path))
		}
		if seen[f.Path] {
			return nil, nil, contracts.ErrBadRequest("files", codeInvalidPath, fmt.Sprintf("File path %q is listed twice.", f.Path))
		}
		if f.Size < 0 {
			return nil, nil, contracts.ErrBadRequest("files", contracts.CodeInvalidRequest, fmt.Sprintf("File %q has a negative size.", f.Path))
		}
		seen[f.Path] = true
		files = append(files, uploadFile{Path: f.Path, Size: f.Size, Parts: partsOf(f.Size, partSize)})
	}
	for _, f := range files {
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				return nil, nil, contracts.ErrBadRequest("files", codeInvalidPath, fmt.Sprintf("%q is both a file and the directory of %q.", dir, f.Path))
			}
		}
	}
	slices.SortFunc(files, func(a, b uploadFile) int { return strings.Compare(a.Path, b.Path) })
	var manifest map[string]string
	if len(q.Manifest) > 0 {
		manifest = make(map[string]string, len(q.Manifest))
		for p, sum := range q.Manifest {
			if !seen[p] {
				return nil, nil, contracts.ErrBadRequest("manifest", codeInvalidPath, fmt.Sprintf("The manifest names %q, which is not among the files.", p))
			}
			sum = strings.ToLower(strings.TrimSpace(sum))
			if !isHexSHA256(sum) {
				return nil, nil, contracts.ErrBadRequest("manifest", contracts.CodeInvalidRequest, fmt.Sprintf("The manifest's hash of %q is not 64 hex digits.", p))
			}
			manifest[p] = sum
		}
	}
	return files, manifest, nil
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func (s *Service) createUpload(w http.ResponseWriter, r *http.Request) {
	var q createUploadReq
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxUploadBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			contracts.Write(w, contracts.ErrBodyTooLarge(maxUploadBody))
			return
		}
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not valid: "+httpapi.TrimJSONErr(err)))
		return
	}
	if q.Name == "" {
		contracts.Write(w, contracts.ErrBadRequest("name", contracts.CodeMissingParam, "Missing required parameter: 'name'."))
		return
	}
	if err := catalog.ValidateName(q.Name); err != nil {
		s.catalogError(w, r.Context(), err, "Model '"+q.Name+"'")
		return
	}
	if q.Kind == "" {
		q.Kind = events.ModelKindModel
	}
	// The prefix of a version only grows with its number; checking the
	// paths against a long one keeps every future key valid.
	files, manifest, apiErr := q.validate(s.d.UploadPartBytes, catalog.Prefix(q.Name, 999999))
	if apiErr != nil {
		contracts.Write(w, apiErr)
		return
	}
	ctx := r.Context()
	v, err := s.d.Catalog.AddVersion(ctx, q.Name, q.Kind, q.BaseModel, catalog.Version{
		Status: catalog.StatusUploading, Source: catalog.Source{Type: events.ModelSourceUpload},
	})
	if err != nil {
		s.catalogError(w, r.Context(), err, "Model '"+q.Name+"'")
		return
	}
	sess := uploadSession{
		ID: "upl_" + events.NewID(), State: uploadStateOpen, Name: q.Name, Kind: q.Kind, BaseModel: q.BaseModel,
		Version: v.Version, PartSize: s.d.UploadPartBytes, Files: files, Manifest: manifest, CreatedAt: time.Now().UTC(),
	}
	if _, err := kv.Create(ctx, s.d.Uploads, sess.ID, sess); err != nil {
		s.rejectVersion(ctx, q.Name, v.Version, "upload_failed", "The upload session could not be recorded.")
		s.log.Error("record upload session", "model", q.Name, "err", err)
		contracts.Write(w, contracts.ErrBadRequest("files", contracts.CodeInvalidRequest,
			"The upload session could not be recorded (too many files or paths too long for one session?)."))
		return
	}
	s.log.Info("model upload opened", "upload_id", sess.ID, "model", q.Name, "version", v.Version, "files", len(files))
	httpapi.WriteJSON(w, http.StatusCreated, s.viewUpload(sess, nil))
}

var errUploadNotFound = errors.New("upload not found")

func (s *Service) loadUpload(ctx context.Context, id string) (uploadSession, error) {
	var sess uploadSession
	if !strings.HasPrefix(id, "upl_") || strings.ContainsAny(id, ".*> /") {
		return sess, errUploadNotFound
	}
	sess, _, err := kv.Get[uploadSession](ctx, s.d.Uploads, id)
	if errors.Is(err, kv.ErrNotFound) {
		return sess, errUploadNotFound
	}
	return sess, err
}

// session loads the upload named in the path or answers the error.
func (s *Service) session(w http.ResponseWriter, r *http.Request) (uploadSession, bool) {
	id := r.PathValue("id")
	sess, err := s.loadUpload(r.Context(), id)
	if errors.Is(err, errUploadNotFound) {
		contracts.Write(w, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Param: "upload_id",
			Code: contracts.CodeNotFound, Message: fmt.Sprintf("No such upload: %s", id)})
		return sess, false
	}
	if err != nil {
		s.log.Error("load upload", "upload_id", id, "err", err)
		contracts.Write(w, httpapi.StoreError(r.Context(), err, "upload store", "The upload session could not be read."))
		return sess, false
	}
	return sess, true
}

// receivedParts lists the parts the object store holds, per file path.
func (s *Service) receivedParts(ctx context.Context, sess uploadSession) (map[string][]partInfo, error) {
	prefix := "uploads/" + sess.ID + "/"
	out := map[string][]partInfo{}
	for info, err := range s.d.Objects.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		rest := strings.TrimPrefix(info.Key, prefix)
		num, p, ok := strings.Cut(rest, "/")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		st, err := s.d.Objects.Stat(ctx, info.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[p] = append(out[p], partInfo{Part: n, Size: st.Size, SHA256: st.SHA256})
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b partInfo) int { return a.Part - b.Part })
	}
	return out, nil
}

func (s *Service) viewUpload(sess uploadSession, parts map[string][]partInfo) uploadView {
	v := uploadView{ID: sess.ID, Object: "model.upload", State: sess.State, Name: sess.Name, Kind: sess.Kind, BaseModel: sess.BaseModel,
		Version: sess.Version, PartSize: sess.PartSize, Manifest: sess.Manifest, CreatedAt: sess.CreatedAt, CompletedAt: sess.CompletedAt,
		Files: make([]uploadFileView, 0, len(sess.Files))}
	for _, f := range sess.Files {
		rec := parts[f.Path]
		if rec == nil {
			rec = []partInfo{}
		}
		v.Files = append(v.Files, uploadFileView{uploadFile: f, Received: rec})
	}
	return v
}

func (s *Service) getUpload(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	var parts map[string][]partInfo
	if sess.State == uploadStateOpen {
		var err error
		if parts, err = s.receivedParts(r.Context(), sess); err != nil {
			s.log.Error("list upload parts", "upload_id", sess.ID, "err", err)
			contracts.Write(w, contracts.ErrInternal("The parts received could not be listed."))
			return
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, s.viewUpload(sess, parts))
}

var (
	errPartHash = errors.New("part hash mismatch")
	errPartSize = errors.New("part size mismatch")
)

// verifyingReader hashes and counts what it passes on; at the end of the
// body it fails (so the object store keeps nothing) when the length or the
// client's hash do not match.
type verifyingReader struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	want int64
	sum  string
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.want {
		return n, errPartSize
	}
	if err == io.EOF {
		if v.n != v.want {
			return n, errPartSize
		}
		if v.sum != "" && hex.EncodeToString(v.h.Sum(nil)) != v.sum {
			return n, errPartHash
		}
	}
	return n, err
}

func (s *Service) putPart(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	if sess.State != uploadStateOpen {
		contracts.Write(w, contracts.ErrConflict(fmt.Sprintf("Upload %s is already %s.", sess.ID, sess.State)))
		return
	}
	p := r.PathValue("path")
	i := slices.IndexFunc(sess.Files, func(f uploadFile) bool { return f.Path == p })
	if i < 0 {
		contracts.Write(w, contracts.ErrBadRequest("path", codeInvalidPath, fmt.Sprintf("File %q is not part of upload %s.", p, sess.ID)))
		return
	}
	f := sess.Files[i]
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 || n > f.Parts {
		contracts.Write(w, contracts.ErrBadRequest("part", contracts.CodeInvalidRequest,
			fmt.Sprintf("Part %q of %q does not exist: the file has %d parts, numbered from 1.", r.PathValue("n"), p, f.Parts)))
		return
	}
	want := partLen(f.Size, sess.PartSize, n)
	if r.ContentLength >= 0 && r.ContentLength != want {
		contracts.Write(w, contracts.ErrBadRequest("part", codePartSizeMismatch,
			fmt.Sprintf("Part %d of %q must be %d bytes, not %d.", n, p, want, r.ContentLength)))
		return
	}
	sum := strings.ToLower(strings.TrimSpace(r.Header.Get(HeaderPartSHA256)))
	if sum != "" && !isHexSHA256(sum) {
		contracts.Write(w, contracts.ErrBadRequest(HeaderPartSHA256, contracts.CodeInvalidRequest, "The part hash header must be 64 hex digits."))
		return
	}
	body := &verifyingReader{r: http.MaxBytesReader(w, r.Body, want+1), h: sha256.New(), want: want, sum: sum}
	info, err := s.d.Objects.Put(r.Context(), partKey(sess.ID, n, p), body, want, "application/octet-stream")
	switch {
	case errors.Is(err, errPartHash):
		contracts.Write(w, contracts.ErrBadRequest(HeaderPartSHA256, codePartHashMismatch,
			fmt.Sprintf("Part %d of %q does not match its SHA-256; it was not kept.", n, p)))
		return
	case errors.Is(err, errPartSize) || (err != nil && body.n != want):
		contracts.Write(w, contracts.ErrBadRequest("part", codePartSizeMismatch,
			fmt.Sprintf("Part %d of %q must be %d bytes; it was not kept.", n, p, want)))
		return
	case err != nil:
		s.log.Error("store upload part", "upload_id", sess.ID, "part", n, "err", err)
		contracts.Write(w, contracts.ErrInternal("The part could not be stored."))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"path": p, "part": n, "size": info.Size, "sha256": info.SHA256})
}

// partsReader reads a file's parts one after the other, opening each only
// when the previous one is done.
type partsReader struct {
	ctx  context.Context
	objs objstore.Store
	keys []string
	cur  io.ReadCloser
}

func (p *partsReader) Read(b []byte) (int, error) {
	for {
		if p.cur == nil {
			if len(p.keys) == 0 {
				return 0, io.EOF
			}
			rc, _, err := p.objs.Get(p.ctx, p.keys[0])
			if err != nil {
				return 0, err
			}
			p.cur, p.keys = rc, p.keys[1:]
		}
		n, err := p.cur.Read(b)
		if err == io.EOF {
			_ = p.cur.Close()
			p.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (p *partsReader) Close() {
	if p.cur != nil {
		_ = p.cur.Close()
	}
}

// assemble stores one file from its parts, or finds it already stored by
// an earlier complete. It returns the stored file, or an API error.
func (s *Service) assemble(ctx context.Context, sess uploadSession, f uploadFile, got []partInfo, prefix string) (catalog.File, *contracts.Error, error) {
	final := prefix + f.Path
	have := make(map[int]int64, len(got))
	for _, pi := range got {
		have[pi.Part] = pi.Size
	}
	for n := 1; n <= f.Parts; n++ {
		size, ok := have[n]
		if ok && size == partLen(f.Size, sess.PartSize, n) {
			continue
		}
		// A file assembled by an earlier call has no parts left.
		if len(got) == 0 {
			if info, err := s.d.Objects.Stat(ctx, final); err == nil && info.Size == f.Size {
				return catalog.File{Path: f.Path, Size: info.Size, SHA256: info.SHA256}, nil, nil
			}
		}
		msg := fmt.Sprintf("Part %d of %q is missing.", n, f.Path)
		if ok {
			msg = fmt.Sprintf("Part %d of %q has %d bytes; %d are expected.", n, f.Path, size, partLen(f.Size, sess.PartSize, n))
		}
		return catalog.File{}, contracts.ErrBadRequest("parts", codeUploadIncomplete, msg), nil
	}
	pr := &partsReader{ctx: ctx, objs: s.d.Objects}
	for n := 1; n <= f.Parts; n++ {
		pr.keys = append(pr.keys, partKey(sess.ID, n, f.Path))
	}
	defer pr.Close()
	info, err := s.d.Objects.Put(ctx, final, pr, f.Size, "application/octet-stream")
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return catalog.File{}, contracts.ErrConflict(fmt.Sprintf("Parts of %q went away while assembling it (a concurrent complete?); retry.", f.Path)), nil
		}
		return catalog.File{}, nil, fmt.Errorf("assemble %s: %w", f.Path, err)
	}
	for n := 1; n <= f.Parts; n++ {
		if err := s.d.Objects.Delete(ctx, partKey(sess.ID, n, f.Path)); err != nil {
			s.log.Warn("delete upload part", "upload_id", sess.ID, "part", n, "err", err)
		}
	}
	return catalog.File{Path: f.Path, Size: info.Size, SHA256: info.SHA256}, nil, nil
}

func (s *Service) completeUpload(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	ctx := context.WithoutCancel(r.Context())
	if sess.State == uploadStateClosed {
		s.answerVersion(w, ctx, sess)
		return
	}
	parts, err := s.receivedParts(ctx, sess)
	if err != nil {
		s.log.Error("list upload parts", "upload_id", sess.ID, "err", err)
		contracts.Write(w, contracts.ErrInternal("The parts received could not be listed."))
		return
	}
	// Check every file before assembling any, so a missing part costs
	// nothing.
	for _, f := range sess.Files {
		got := parts[f.Path]
		if len(got) == 0 && f.Parts > 0 {
			// Assembled by an earlier call, or not sent at all.
			if info, err := s.d.Objects.Stat(ctx, catalog.Prefix(sess.Name, sess.Version)+f.Path); err == nil && info.Size == f.Size {
				continue
			}
		}
		for n := 1; n <= f.Parts; n++ {
			i := slices.IndexFunc(got, func(p partInfo) bool { return p.Part == n })
			if i < 0 || got[i].Size != partLen(f.Size, sess.PartSize, n) {
				contracts.Write(w, contracts.ErrBadRequest("parts", codeUploadIncomplete, fmt.Sprintf("Part %d of %q is missing or has the wrong size.", n, f.Path)))
				return
			}
		}
	}
	prefix := catalog.Prefix(sess.Name, sess.Version)
	files := make([]catalog.File, 0, len(sess.Files))
	for _, f := range sess.Files {
		cf, apiErr, err := s.assemble(ctx, sess, f, parts[f.Path], prefix)
		if err != nil {
			s.log.Error("assemble upload", "upload_id", sess.ID, "err", err)
			contracts.Write(w, contracts.ErrInternal("The uploaded files could not be assembled."))
			return
		}
		if apiErr != nil {
			contracts.Write(w, apiErr)
			return
		}
		files = append(files, cf)
	}
	_, err = s.d.Catalog.UpdateVersion(ctx, sess.Name, sess.Version, func(v *catalog.Version) error {
		if v.Status == catalog.StatusUploading {
			v.Status = catalog.StatusScanning
			v.Files = files
		}
		return nil
	})
	if err != nil && !errors.Is(err, catalog.ErrConflict) { // a verdict already recorded is fine
		s.catalogError(w, r.Context(), err, "Model '"+sess.Name+"'")
		return
	}
	ev := events.ModelUploadedV1{
		Name: sess.Name, Version: sess.Version, Kind: sess.Kind, BaseModel: sess.BaseModel,
		Source: events.ModelSource{Type: events.ModelSourceUpload}, Prefix: prefix, Files: files,
		Manifest: sess.Manifest, UploadedAt: time.Now().UTC(),
	}
	// The id is deterministic per session (a repeated complete is a
	// duplicate) yet differs for a name deleted and uploaded again.
	env := events.Envelope{ID: fmt.Sprintf("uploaded-%s-v%d-%s", events.Token(sess.Name), sess.Version, sess.ID), Source: s.d.InstanceID}
	if _, err := events.Publish(ctx, s.d.JS, ev, env); err != nil {
		s.log.Error("publish model uploaded", "upload_id", sess.ID, "err", err)
		contracts.Write(w, httpapi.StoreError(r.Context(), err, "event bus", "The upload could not be announced to the scanner; complete it again."))
		return
	}
	// The session becomes a small receipt, so a repeated complete (a client
	// that lost the answer) gets the same answer.
	receipt := uploadSession{ID: sess.ID, State: uploadStateClosed, Name: sess.Name, Kind: sess.Kind, BaseModel: sess.BaseModel,
		Version: sess.Version, PartSize: sess.PartSize, CreatedAt: sess.CreatedAt, CompletedAt: time.Now().UTC()}
	if _, err := kv.Put(ctx, s.d.Uploads, sess.ID, receipt); err != nil {
		s.log.Warn("record upload receipt", "upload_id", sess.ID, "err", err)
	}
	s.log.Info("model upload completed", "upload_id", sess.ID, "model", sess.Name, "version", sess.Version, "files", len(files))
	s.answerVersion(w, ctx, sess)
}

func (s *Service) answerVersion(w http.ResponseWriter, ctx context.Context, sess uploadSession) {
	e, err := s.d.Catalog.Get(ctx, sess.Name)
	if err != nil {
		s.catalogError(w, ctx, err, "Model '"+sess.Name+"'")
		return
	}
	v, ok := e.Find(sess.Version)
	if !ok {
		contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("Model '%s' version %d not found.", sess.Name, sess.Version)))
		return
	}
	httpapi.WriteJSON(w, http.StatusAccepted, viewVersion(*v))
}

// rejectVersion marks a version that will never complete.
func (s *Service) rejectVersion(ctx context.Context, name string, version int, code, msg string) {
	_, err := s.d.Catalog.UpdateVersion(ctx, name, version, func(v *catalog.Version) error {
		v.Status = catalog.StatusRejected
		v.Reasons = []catalog.Reason{{Code: code, Message: msg}}
		return nil
	})
	if err != nil {
		s.log.Warn("reject model version", "model", name, "version", version, "err", err)
	}
}

func (s *Service) abortUpload(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r)
	if !ok {
		return
	}
	if sess.State != uploadStateOpen {
		contracts.Write(w, contracts.ErrConflict(fmt.Sprintf("Upload %s is already %s.", sess.ID, sess.State)))
		return
	}
	ctx := context.WithoutCancel(r.Context())
	for info, err := range s.d.Objects.List(ctx, "uploads/"+sess.ID+"/") {
		if err != nil {
			s.log.Error("list upload parts", "upload_id", sess.ID, "err", err)
			contracts.Write(w, contracts.ErrInternal("The parts received could not be listed."))
			return
		}
		if err := s.d.Objects.Delete(ctx, info.Key); err != nil {
			s.log.Warn("delete upload part", "upload_id", sess.ID, "err", err)
		}
	}
	s.rejectVersion(ctx, sess.Name, sess.Version, codeUploadAborted, "The upload was aborted before it completed.")
	if err := kv.Delete(ctx, s.d.Uploads, sess.ID); err != nil && !errors.Is(err, kv.ErrNotFound) {
		s.log.Warn("delete upload session", "upload_id", sess.ID, "err", err)
	}
	s.log.Info("model upload aborted", "upload_id", sess.ID, "model", sess.Name, "version", sess.Version)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": sess.ID, "object": "model.upload", "deleted": true})
}
