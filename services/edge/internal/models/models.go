// Package models serves the model APIs of the edge: the catalog admin API
// (model versions with their verdicts, hub pulls, resumable uploads,
// deployments, and the files of published versions) and the OpenAI model
// list that tenants see (/v1/models).
package models

import (
	"log/slog"
	"net/http"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// Deps are what the model APIs need.
type Deps struct {
	Catalog *catalog.Store
	// Uploads is the upload sessions bucket (events.BucketUploads).
	Uploads jetstream.KeyValue
	// Objects holds model files; nil: uploads and model files answer 503.
	Objects   objstore.Store
	JS        jetstream.JetStream
	Directory *directory.View
	AdminKey  string
	Logger    *slog.Logger
	// InstanceID names the edge replica in events.
	InstanceID string
	// UploadPartBytes is the part size of resumable uploads.
	UploadPartBytes int64
}

// Service serves the model APIs.
type Service struct {
	d   Deps
	log *slog.Logger
}

// New builds the model APIs.
func New(d Deps) *Service { return &Service{d: d, log: d.Logger} }

func (s *Service) admin(h http.HandlerFunc) http.HandlerFunc { return httpapi.Admin(s.d.AdminKey, h) }

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Parent is the base model of a LoRA adapter (as vLLM lists them).
	Parent string `json:"parent,omitempty"`
	// Catalog and Version name the catalog version served: an adapter's
	// newest published version, or a model's deployment.
	Catalog string `json:"aiforge_catalog,omitempty"`
	Version int    `json:"aiforge_version,omitempty"`
	// State is the model's state from its worker replicas (Status.State):
	// shown by GET /v1/models/{id}, and by GET /v1/models with
	// ?include_unavailable=true.
	State string `json:"aiforge_state,omitempty"`
}

// objectOf is the /v1/models object of a served name: an adapter names its
// parent; a deployed model names the catalog version it runs.
func (s *Service) objectOf(m registry.Model) modelObject {
	owner := m.OwnedBy
	if owner == "" {
		owner = "aiforge"
	}
	o := modelObject{ID: m.Name, Object: "model", Created: m.CreatedAt.Unix(), OwnedBy: owner}
	if _, registered := s.d.Directory.Model(m.Name); !registered {
		if a, ok := s.d.Directory.Adapter(m.Name); ok {
			o.Parent, o.Catalog, o.Version = a.Base, a.Name, a.Version
		}
		return o
	}
	if d, ok := s.d.Directory.Deployment(m.Name); ok {
		o.Catalog, o.Version = d.Catalog, d.Version
	}
	return o
}

func (s *Service) listModels(w http.ResponseWriter, r *http.Request) {
	k := httpapi.Authenticate(s.d.Directory, w, r)
	if k == nil {
		return
	}
	// Only models that can serve are listed (OpenAI clients pick from
	// the list; one that cannot serve answers 503): a replica serves it,
	// or no replica reports on it. ?include_unavailable=true lists every
	// model with its state.
	all := r.URL.Query().Get("include_unavailable") == "true"
	var data []modelObject
	for _, m := range s.d.Directory.ServedModels() {
		if !s.d.Directory.Permits(k, m.Name) {
			continue
		}
		st := StatusOf(s.d.Directory, m.Name)
		if !all && !st.Available() {
			continue
		}
		o := s.objectOf(m)
		if all {
			o.State = st.State
		}
		data = append(data, o)
	}
	// Routers are model names too: each serves through its classes.
	for _, rt := range s.d.Directory.Routers() {
		if k.Allows(rt.Name) {
			data = append(data, modelObject{ID: rt.Name, Object: "model", OwnedBy: "aiforge-router"})
		}
	}
	if data == nil {
		data = []modelObject{}
	}
	httpapi.SortByCreated(data, "asc", func(o modelObject) (int64, string) { return 0, o.ID })
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Service) getModel(w http.ResponseWriter, r *http.Request) {
	k := httpapi.Authenticate(s.d.Directory, w, r)
	if k == nil {
		return
	}
	id := r.PathValue("id")
	m, ok := s.d.Directory.Served(id)
	if !ok {
		contracts.Write(w, contracts.ErrModelNotFound(id))
		return
	}
	if !s.d.Directory.Permits(k, id) {
		contracts.Write(w, contracts.ErrModelNotAllowed(id))
		return
	}
	o := s.objectOf(m)
	o.State = StatusOf(s.d.Directory, id).State
	httpapi.WriteJSON(w, http.StatusOK, o)
}
