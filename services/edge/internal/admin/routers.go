package admin

import (
	"net/http"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

func (s *Service) routerRoutes(mux *http.ServeMux) {
	mux.HandleFunc("PUT /admin/v1/routers/{name...}", s.admin(s.putRouter))
	mux.HandleFunc("GET /admin/v1/routers", s.admin(s.listRouters))
	mux.HandleFunc("GET /admin/v1/routers/{name...}", s.admin(s.getRouter))
	mux.HandleFunc("DELETE /admin/v1/routers/{name...}", s.admin(s.deleteRouter))
	mux.HandleFunc("DELETE /admin/v1/cache", s.admin(s.purgeCache))
}

// checkModelName refuses a model binding named like a router or the
// sandboxes' price (registry.SandboxPriceModel), and a cache
// policy out of bounds.
func (s *Service) checkModelName(m registry.Model) *contracts.Error {
	if m.Name == registry.SandboxPriceModel {
		return contracts.ErrBadRequest("name", contracts.CodeInvalidRequest, "'"+m.Name+"' is reserved for the sandboxes' price.")
	}
	if _, ok := s.d.Directory.Router(m.Name); ok {
		return contracts.ErrConflict("A router is named '" + m.Name + "'; delete it first or pick another name.")
	}
	if m.Cache != nil {
		if err := registry.ValidateCachePolicy(*m.Cache); err != nil {
			return contracts.ErrBadRequest("cache", contracts.CodeInvalidRequest, err.Error())
		}
	}
	return nil
}

func (s *Service) putRouter(w http.ResponseWriter, r *http.Request) {
	var rt registry.Router
	if !httpapi.DecodeStrict(w, r, &rt) {
		return
	}
	name := r.PathValue("name")
	if rt.Name == "" {
		rt.Name = name
	}
	if rt.Name != name {
		contracts.Write(w, contracts.ErrBadRequest("name", contracts.CodeInvalidRequest, "The body's name must be the path's ('"+name+"')."))
		return
	}
	if err := registry.ValidateRouter(rt); err != nil {
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, err.Error()))
		return
	}
	if _, ok := s.d.Directory.Served(rt.Name); ok {
		contracts.Write(w, contracts.ErrBadRequest("name", contracts.CodeInvalidRequest, "A model is named '"+rt.Name+"': a router needs a name of its own."))
		return
	}
	status := http.StatusCreated
	if _, err := s.store.GetRouter(r.Context(), rt.Name); err == nil {
		status = http.StatusOK
	}
	if err := s.store.PutRouter(r.Context(), rt); err != nil {
		s.storeError(w, r, err, "Router '"+rt.Name+"'")
		return
	}
	s.d.Directory.NoteRouter(rt)
	httpapi.WriteJSON(w, status, rt)
}

func (s *Service) getRouter(w http.ResponseWriter, r *http.Request) {
	rt, err := s.store.GetRouter(r.Context(), r.PathValue("name"))
	if err != nil {
		s.storeError(w, r, err, "Router '"+r.PathValue("name")+"'")
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, rt)
}

func (s *Service) listRouters(w http.ResponseWriter, r *http.Request) {
	rs, err := s.store.ListRouters(r.Context())
	if err != nil {
		s.storeError(w, r, err, "Routers")
		return
	}
	if rs == nil {
		rs = []registry.Router{}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": rs})
}

func (s *Service) deleteRouter(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.store.DeleteRouter(r.Context(), name); err != nil {
		s.storeError(w, r, err, "Router '"+name+"'")
		return
	}
	s.d.Directory.NoteRouterDeleted(name)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": name, "object": "router", "deleted": true})
}

// purgeCache is DELETE /admin/v1/cache?model=M[&tenant=T]: the model's
// cached answers, of one tenant or of all.
func (s *Service) purgeCache(w http.ResponseWriter, r *http.Request) {
	if s.d.Cache == nil {
		contracts.Write(w, contracts.ErrServiceUnavailable("semantic cache", "is not configured on this edge"))
		return
	}
	q := r.URL.Query()
	model, tenant := q.Get("model"), q.Get("tenant")
	if model == "" {
		contracts.Write(w, contracts.ErrBadRequest("model", contracts.CodeMissingParam, "Missing required parameter: 'model'."))
		return
	}
	if tenant != "" && !registry.ValidTenantID(tenant) {
		contracts.Write(w, contracts.ErrBadRequest("tenant", contracts.CodeInvalidRequest, "Invalid 'tenant'."))
		return
	}
	n, err := s.d.Cache.Purge(r.Context(), tenant, model)
	if err != nil {
		s.log.Error("semantic cache purge failed", "model", model, "tenant", tenant, "err", err)
		contracts.Write(w, httpapi.StoreError(r.Context(), err, "semantic cache", "The semantic cache could not be purged."))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "cache.purge", "model": model, "tenant": tenant, "purged": n})
}
