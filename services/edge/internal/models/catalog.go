package models

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ociref"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// The catalog admin API: model versions with their verdicts, hub pulls, and
// deployments (which catalog version a served model name runs).

// Routes mounts the model admin API and GET /v1/models.
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/models", s.listModels)
	mux.HandleFunc("GET /v1/models/{id...}", s.getModel)
	mux.HandleFunc("POST /v1/model-bucket/events", s.bucketEvent)
	s.uploadRoutes(mux)
	mux.HandleFunc("GET /admin/v1/catalog", s.admin(s.listCatalog))
	mux.HandleFunc("GET /admin/v1/catalog/{name...}", s.admin(s.getCatalog))
	mux.HandleFunc("DELETE /admin/v1/catalog/{name...}", s.admin(s.deleteCatalog))
	// GET also answers HEAD.
	mux.HandleFunc("GET /admin/v1/model-files", s.admin(s.withObjects(s.getModelFile)))
	mux.HandleFunc("POST /admin/v1/catalog/pulls", s.admin(s.requestPull))
	mux.HandleFunc("GET /admin/v1/pulls/{id}", s.admin(s.getPull))
	mux.HandleFunc("POST /admin/v1/deployments", s.admin(s.deploy))
	mux.HandleFunc("GET /admin/v1/deployments", s.admin(s.listDeployments))
	mux.HandleFunc("GET /admin/v1/deployments/{model...}", s.admin(s.getDeployment))
	mux.HandleFunc("DELETE /admin/v1/deployments/{model...}", s.admin(s.undeploy))
	mux.HandleFunc("POST /admin/v1/deployments/rollback", s.admin(s.rollback))
}

var catalogMsg = strings.NewReplacer("catalog: not found: ", "", "catalog: invalid: ", "", "catalog: conflict: ", "")

// catalogError maps the catalog's errors to API answers.
func (s *Service) catalogError(w http.ResponseWriter, ctx context.Context, err error, what string) {
	msg := httpapi.UpperFirst(catalogMsg.Replace(err.Error()))
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		contracts.Write(w, contracts.ErrNotFound(what+" not found."))
	case errors.Is(err, catalog.ErrInvalid):
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, msg))
	case errors.Is(err, catalog.ErrConflict):
		contracts.Write(w, contracts.ErrConflict(msg))
	default:
		s.log.Error("catalog error", "what", what, "err", err)
		contracts.Write(w, httpapi.StoreError(ctx, err, "catalog", "The catalog could not be reached."))
	}
}

// viewVersion shows empty lists as [] rather than null.
func viewVersion(v catalog.Version) catalog.Version {
	if v.Reasons == nil {
		v.Reasons = []catalog.Reason{}
	}
	if v.Files == nil {
		v.Files = []catalog.File{}
	}
	return v
}

func viewEntry(e catalog.Entry) catalog.Entry {
	vs := make([]catalog.Version, len(e.Versions))
	for i, v := range e.Versions {
		vs[i] = viewVersion(v)
	}
	e.Versions = vs
	return e
}

func (s *Service) listCatalog(w http.ResponseWriter, r *http.Request) {
	es, err := s.d.Catalog.List(r.Context())
	if err != nil {
		s.catalogError(w, r.Context(), err, "Catalog")
		return
	}
	out := make([]catalog.Entry, len(es))
	for i, e := range es {
		out[i] = viewEntry(e)
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}

func (s *Service) getCatalog(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	e, err := s.d.Catalog.Get(r.Context(), name)
	if err != nil {
		s.catalogError(w, r.Context(), err, "Model '"+name+"'")
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, viewEntry(e))
}

func (s *Service) deleteCatalog(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx := context.WithoutCancel(r.Context())
	e, err := s.d.Catalog.Get(ctx, name)
	if err != nil {
		s.catalogError(w, r.Context(), err, "Model '"+name+"'")
		return
	}
	if err := s.d.Catalog.Delete(ctx, name); err != nil {
		s.catalogError(w, r.Context(), err, "Model '"+name+"'")
		return
	}
	// The files go with the entry (best effort: a leftover is only space).
	if s.d.Objects != nil {
		for _, v := range e.Versions {
			for info, err := range s.d.Objects.List(ctx, v.Prefix) {
				if err != nil {
					s.log.Warn("list model files", "model", name, "version", v.Version, "err", err)
					break
				}
				if err := s.d.Objects.Delete(ctx, info.Key); err != nil {
					s.log.Warn("delete model file", "model", name, "version", v.Version, "err", err)
				}
			}
		}
	}
	s.log.Info("catalog entry deleted", "model", name, "versions", len(e.Versions))
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"name": name, "object": "model.catalog", "deleted": true})
}

var hubRepoRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$`)
var revisionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_./-]{0,199}$`)

func (s *Service) requestPull(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Repo      string `json:"repo"`
		Revision  string `json:"revision"`
		Name      string `json:"name"`
		Kind      string `json:"kind"`
		BaseModel string `json:"base_model"`
	}
	if !httpapi.DecodeStrict(w, r, &q) {
		return
	}
	if q.Repo == "" {
		contracts.Write(w, contracts.ErrBadRequest("repo", contracts.CodeMissingParam, "Missing required parameter: 'repo'."))
		return
	}
	isOCI := ociref.IsOCI(q.Repo)
	if isOCI {
		// oci://REGISTRY/REPO with revision TAG or sha256:...: the
		// artifact decides the kind unless one is asked for.
		ref, err := ociref.Parse(ociref.Join(q.Repo, q.Revision))
		if err != nil || ref.Repo() != q.Repo {
			msg := fmt.Sprintf("Repository %q with revision %q is not oci://REGISTRY/REPO with a tag or sha256 digest.", q.Repo, q.Revision)
			if err != nil {
				msg = httpapi.UpperFirst(err.Error()) + "."
			}
			contracts.Write(w, contracts.ErrBadRequest("repo", contracts.CodeInvalidRequest, msg))
			return
		}
		if q.Name == "" {
			q.Name = ref.Repository
		}
	} else if !hubRepoRE.MatchString(q.Repo) || strings.Contains(q.Repo, "..") {
		contracts.Write(w, contracts.ErrBadRequest("repo", contracts.CodeInvalidRequest, fmt.Sprintf("Repository %q is not of the form org/name.", q.Repo)))
		return
	}
	if q.Revision == "" && !isOCI {
		q.Revision = "main"
	}
	if !isOCI && !revisionRE.MatchString(q.Revision) || strings.Contains(q.Revision, "..") {
		contracts.Write(w, contracts.ErrBadRequest("revision", contracts.CodeInvalidRequest, fmt.Sprintf("Revision %q is not a branch, tag or commit.", q.Revision)))
		return
	}
	if q.Name == "" {
		q.Name = q.Repo
	}
	if err := catalog.ValidateName(q.Name); err != nil {
		s.catalogError(w, r.Context(), err, "Model '"+q.Name+"'")
		return
	}
	if q.Kind == "" && !isOCI {
		q.Kind = events.ModelKindModel
	}
	if q.Kind == events.ModelKindModel && q.BaseModel != "" {
		contracts.Write(w, contracts.ErrBadRequest("base_model", contracts.CodeInvalidRequest, "base_model is for adapters only."))
		return
	}
	ev := events.ModelPullRequestedV1{PullID: "pull_" + events.NewID(), Name: q.Name, Kind: q.Kind, BaseModel: q.BaseModel,
		Repo: q.Repo, Revision: q.Revision, RequestedAt: time.Now().UTC()}
	if err := ev.Validate(); err != nil {
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, httpapi.UpperFirst(err.Error())+"."))
		return
	}
	// The pull's record first, so a client following it finds it at once;
	// the guardian fills in the commit, the version or the failure.
	if _, err := s.d.Catalog.UpdatePull(r.Context(), ev.PullID, func(p *catalog.Pull) {
		p.Name, p.Repo, p.Revision, p.RequestedAt = ev.Name, ev.Repo, ev.Revision, ev.RequestedAt
	}); err != nil {
		s.catalogError(w, r.Context(), err, "Pull")
		return
	}
	env := events.Envelope{ID: ev.PullID, Source: s.d.InstanceID}
	if _, err := events.Publish(r.Context(), s.d.JS, ev, env); err != nil {
		s.log.Error("publish pull request", "pull_id", ev.PullID, "err", err)
		contracts.Write(w, httpapi.StoreError(r.Context(), err, "event bus", "The pull could not be requested."))
		return
	}
	s.log.Info("model pull requested", "pull_id", ev.PullID, "model", q.Name, "repo", q.Repo, "revision", q.Revision)
	httpapi.WriteJSON(w, http.StatusAccepted, map[string]any{"pull_id": ev.PullID, "object": "model.pull", "name": q.Name,
		"repo": q.Repo, "revision": q.Revision, "requested_at": ev.RequestedAt})
}

// getPull answers a pull's state: its commit once resolved, then the catalog
// version it created or found (or its failure).
func (s *Service) getPull(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, err := s.d.Catalog.GetPull(r.Context(), id)
	if err != nil {
		s.catalogError(w, r.Context(), err, "Pull '"+id+"'")
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, p)
}

func (s *Service) deploy(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Model   string `json:"model"`
		Catalog string `json:"catalog"`
		Version int    `json:"version"`
	}
	if !httpapi.DecodeStrict(w, r, &q) {
		return
	}
	if q.Model == "" {
		contracts.Write(w, contracts.ErrBadRequest("model", contracts.CodeMissingParam, "Missing required parameter: 'model'."))
		return
	}
	if err := catalog.ValidateName(q.Model); err != nil {
		contracts.Write(w, contracts.ErrBadRequest("model", contracts.CodeInvalidRequest, httpapi.UpperFirst(catalogMsg.Replace(err.Error()))))
		return
	}
	if q.Catalog == "" {
		q.Catalog = q.Model
	}
	if q.Version < 0 {
		contracts.Write(w, contracts.ErrBadRequest("version", contracts.CodeInvalidRequest, "version must be a version number, or 0 for the latest published one."))
		return
	}
	d, err := s.d.Catalog.Deploy(r.Context(), q.Model, q.Catalog, q.Version)
	if err != nil {
		what := "Model '" + q.Catalog + "'"
		if q.Version > 0 {
			what = fmt.Sprintf("Model '%s' version %d", q.Catalog, q.Version)
		}
		s.catalogError(w, r.Context(), err, what)
		return
	}
	s.log.Info("model deployed", "model", d.Model, "catalog", d.Catalog, "version", d.Version)
	httpapi.WriteJSON(w, http.StatusOK, d)
}

func (s *Service) listDeployments(w http.ResponseWriter, r *http.Request) {
	ds, err := s.d.Catalog.Deployments(r.Context())
	if err != nil {
		s.catalogError(w, r.Context(), err, "Deployments")
		return
	}
	if ds == nil {
		ds = []catalog.Deployment{}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": ds})
}

func (s *Service) getDeployment(w http.ResponseWriter, r *http.Request) {
	model := r.PathValue("model")
	d, err := s.d.Catalog.Deployment(r.Context(), model)
	if err != nil {
		s.catalogError(w, r.Context(), err, "Deployment of '"+model+"'")
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, d)
}

func (s *Service) undeploy(w http.ResponseWriter, r *http.Request) {
	model := r.PathValue("model")
	if err := s.d.Catalog.Undeploy(r.Context(), model); err != nil {
		s.catalogError(w, r.Context(), err, "Deployment of '"+model+"'")
		return
	}
	s.log.Info("model undeployed", "model", model)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"model": model, "object": "model.deployment", "deleted": true})
}

func (s *Service) rollback(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Model string `json:"model"`
	}
	if !httpapi.DecodeStrict(w, r, &q) {
		return
	}
	if q.Model == "" {
		contracts.Write(w, contracts.ErrBadRequest("model", contracts.CodeMissingParam, "Missing required parameter: 'model'."))
		return
	}
	d, err := s.d.Catalog.Rollback(r.Context(), q.Model)
	if err != nil {
		s.catalogError(w, r.Context(), err, "Deployment of '"+q.Model+"'")
		return
	}
	s.log.Info("model rolled back", "model", d.Model, "catalog", d.Catalog, "version", d.Version)
	httpapi.WriteJSON(w, http.StatusOK, d)
}
