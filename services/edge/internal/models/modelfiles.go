package models

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/objstore"
)

// Handing a published version's files out, for an engine to load
// (`aiforge models fetch`). Only what the guardian published leaves the
// catalog: an uploading, scanning or rejected version's files never do.
// The client verifies every byte against the catalog's SHA-256 (sent in
// HeaderModelFileSHA256); the edge also refuses a stored object whose
// recorded size or digest disagrees with the catalog.

// Stable error codes of the model files API.
const (
	codeModelNotPublished = "model_not_published"
	codeModelFileCorrupt  = "model_file_corrupt"
)

// HeaderModelFileSHA256 carries the catalog's SHA-256 of a model file.
const HeaderModelFileSHA256 = "X-Aiforge-Sha256"

// getModelFile streams one file of a published version. The name, version
// and path are query parameters because names and paths both hold "/".
// HEAD answers the headers only.
func (s *Service) getModelFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, p, vs := q.Get("name"), q.Get("path"), q.Get("version")
	for _, m := range []struct{ param, value string }{{"name", name}, {"version", vs}, {"path", p}} {
		if m.value == "" {
			contracts.Write(w, contracts.ErrBadRequest(m.param, contracts.CodeMissingParam, "Missing required parameter: '"+m.param+"'."))
			return
		}
	}
	n, err := strconv.Atoi(vs)
	if err != nil || n <= 0 {
		contracts.Write(w, contracts.ErrBadRequest("version", contracts.CodeInvalidRequest, fmt.Sprintf("Version %q is not a version number.", vs)))
		return
	}
	e, err := s.d.Catalog.Get(r.Context(), name)
	if err != nil {
		s.catalogError(w, r.Context(), err, "Model '"+name+"'")
		return
	}
	v, ok := e.Find(n)
	if !ok {
		contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("Model '%s' version %d not found.", name, n)))
		return
	}
	if v.Status != catalog.StatusPublished {
		contracts.Write(w, &contracts.Error{Status: http.StatusConflict, Type: contracts.TypeInvalidRequest, Code: codeModelNotPublished,
			Message: fmt.Sprintf("Model '%s' version %d is %s; only the files of a published version can be fetched.", name, n, v.Status)})
		return
	}
	var f *catalog.File
	for i := range v.Files {
		if v.Files[i].Path == p {
			f = &v.Files[i]
			break
		}
	}
	if f == nil {
		contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("Model '%s' version %d has no file %q.", name, n, p)))
		return
	}
	key := v.Prefix + f.Path
	var (
		info objstore.Info
		body io.ReadCloser
	)
	if r.Method == http.MethodHead {
		info, err = s.d.Objects.Stat(r.Context(), key)
	} else {
		body, info, err = s.d.Objects.Get(r.Context(), key)
	}
	if errors.Is(err, objstore.ErrNotFound) {
		s.log.Warn("published model file missing from object storage", "model", name, "version", n, "path", f.Path)
		contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("File %q of model '%s' version %d is missing from object storage.", p, name, n)))
		return
	}
	if err != nil {
		s.log.Error("open model file", "model", name, "version", n, "path", f.Path, "err", err)
		contracts.Write(w, contracts.ErrInternal("Object storage could not be reached."))
		return
	}
	if body != nil {
		defer body.Close()
	}
	// The store records the size and digest it computed while writing: an
	// object that disagrees with the scanned one is not handed out.
	if info.Size != f.Size || (info.SHA256 != "" && info.SHA256 != f.SHA256) {
		s.log.Error("model file differs from its catalog record", "model", name, "version", n, "path", f.Path,
			"catalog_size", f.Size, "stored_size", info.Size, "catalog_sha256", f.SHA256, "stored_sha256", info.SHA256)
		contracts.Write(w, &contracts.Error{Status: http.StatusInternalServerError, Type: contracts.TypeServer, Code: codeModelFileCorrupt,
			Message: fmt.Sprintf("File %q of model '%s' version %d in object storage differs from the scanned one.", p, name, n)})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(f.Size, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set(HeaderModelFileSHA256, f.SHA256)
	w.WriteHeader(http.StatusOK)
	if body == nil {
		return
	}
	if _, err := io.Copy(w, body); err != nil {
		// Headers are gone: the short body tells the client.
		s.log.Warn("stream model file", "model", name, "version", n, "path", f.Path, "err", err)
	}
}
