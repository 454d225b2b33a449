package admin

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/tenantbucket"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// A tenant's model bucket is an S3 prefix the guardian watches: each
// folder there with an aiforge-model.json becomes a version of the
// tenant's model "<tenant>/<folder>". The S3 credentials are sealed to the
// platform's secrets key (as webhook secrets are) and never shown again.

// modelBucketView is a tenant's model bucket as the API shows it: never
// the credentials, only the access key id's last four characters.
type modelBucketView struct {
	Object        string    `json:"object"`
	Tenant        string    `json:"tenant"`
	Endpoint      string    `json:"endpoint"`
	Bucket        string    `json:"bucket"`
	Prefix        string    `json:"prefix"`
	Region        string    `json:"region,omitempty"`
	PathStyle     bool      `json:"path_style"`
	AccessKeyHint string    `json:"access_key_hint"`
	UpdatedAt     time.Time `json:"updated_at"`
}

func viewModelBucket(c tenantbucket.Config) modelBucketView {
	return modelBucketView{Object: "model_bucket", Tenant: c.Tenant, Endpoint: c.Endpoint, Bucket: c.Bucket, Prefix: c.Prefix,
		Region: c.Region, PathStyle: c.PathStyle, AccessKeyHint: c.AccessKeyHint, UpdatedAt: c.UpdatedAt}
}

func (s *Service) modelBucketRoutes(mux *http.ServeMux) {
	mux.HandleFunc("PUT /admin/v1/tenants/{id}/model-bucket", s.admin(s.putModelBucket))
	mux.HandleFunc("GET /admin/v1/tenants/{id}/model-bucket", s.admin(s.getModelBucket))
	mux.HandleFunc("DELETE /admin/v1/tenants/{id}/model-bucket", s.admin(s.deleteModelBucket))
}

func (s *Service) modelBuckets(w http.ResponseWriter) bool {
	if s.d.TenantBuckets == nil {
		contracts.Write(w, contracts.ErrServiceUnavailable("tenant model bucket", "is not available on this edge"))
		return false
	}
	return true
}

func (s *Service) putModelBucket(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Endpoint        string `json:"endpoint"`
		Bucket          string `json:"bucket"`
		Prefix          string `json:"prefix"`
		Region          string `json:"region"`
		PathStyle       bool   `json:"path_style"`
		AccessKeyID     string `json:"access_key_id"`
		SecretAccessKey string `json:"secret_access_key"`
	}
	if !s.modelBuckets(w) || !httpapi.DecodeStrict(w, r, &req) {
		return
	}
	tenant := r.PathValue("id")
	for _, p := range []struct{ name, v string }{{"endpoint", req.Endpoint}, {"bucket", req.Bucket}, {"access_key_id", req.AccessKeyID}, {"secret_access_key", req.SecretAccessKey}} {
		if p.v == "" {
			contracts.Write(w, contracts.ErrBadRequest(p.name, contracts.CodeMissingParam, "Missing required parameter: '"+p.name+"'."))
			return
		}
	}
	// The guardian dials the endpoint: the webhook rules (no link-local or
	// cloud metadata addresses, no credentials in the URL) apply.
	if err := checkWebhookURL(req.Endpoint); err != nil {
		contracts.Write(w, contracts.ErrBadRequest("endpoint", contracts.CodeInvalidValue, "Invalid endpoint: "+err.Error()+"."))
		return
	}
	c := tenantbucket.Config{Tenant: tenant, Endpoint: req.Endpoint, Bucket: req.Bucket, Prefix: req.Prefix, Region: req.Region, PathStyle: req.PathStyle}
	if err := c.Validate(); err != nil {
		// The config holds no credentials: the message is safe to show.
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidValue, "Invalid model bucket: "+err.Error()+"."))
		return
	}
	if s.d.SecretsKey == nil {
		contracts.Write(w, contracts.ErrBadRequest("secret_access_key", contracts.CodeInvalidRequest,
			"This edge cannot keep S3 credentials: it has no secrets public key to seal them with (give it the workers' public key: AIFORGE_SECRETS_PUBLIC_KEY_FILE)."))
		return
	}
	if _, err := s.store.GetTenant(r.Context(), tenant); err != nil {
		s.storeError(w, r, err, "Tenant '"+tenant+"'")
		return
	}
	c, err := tenantbucket.Seal(s.d.SecretsKey, c, tenantbucket.Credentials{AccessKeyID: req.AccessKeyID, SecretAccessKey: req.SecretAccessKey})
	if errors.Is(err, tenantbucket.ErrInvalid) {
		contracts.Write(w, contracts.ErrBadRequest("secret_access_key", contracts.CodeInvalidValue, "Invalid credentials: the access key id and secret must be at most 256 characters, on one line."))
		return
	}
	if err != nil {
		s.log.Error("seal model bucket credentials", "tenant", tenant, "err", err)
		contracts.Write(w, contracts.ErrInternal("The credentials could not be sealed."))
		return
	}
	if c, err = s.d.TenantBuckets.Put(r.Context(), c); err != nil {
		s.log.Error("store model bucket", "tenant", tenant, "err", err)
		contracts.Write(w, httpapi.StoreError(r.Context(), err, "registry", "The registry could not be reached."))
		return
	}
	s.log.Info("tenant model bucket set", "tenant", tenant, "endpoint", c.Endpoint, "bucket", c.Bucket, "prefix", c.Prefix)
	httpapi.WriteJSON(w, http.StatusOK, viewModelBucket(c))
}

func (s *Service) getModelBucket(w http.ResponseWriter, r *http.Request) {
	if !s.modelBuckets(w) {
		return
	}
	tenant := r.PathValue("id")
	c, err := s.d.TenantBuckets.Get(r.Context(), tenant)
	if errors.Is(err, tenantbucket.ErrNotFound) {
		contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("Tenant '%s' has no model bucket.", httpapi.Bounded(tenant, 64))))
		return
	}
	if err != nil {
		s.log.Error("read model bucket", "tenant", tenant, "err", err)
		contracts.Write(w, httpapi.StoreError(r.Context(), err, "registry", "The registry could not be reached."))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, viewModelBucket(c))
}

func (s *Service) deleteModelBucket(w http.ResponseWriter, r *http.Request) {
	if !s.modelBuckets(w) {
		return
	}
	tenant := r.PathValue("id")
	err := s.d.TenantBuckets.Delete(r.Context(), tenant)
	if errors.Is(err, tenantbucket.ErrNotFound) {
		contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("Tenant '%s' has no model bucket.", httpapi.Bounded(tenant, 64))))
		return
	}
	if err != nil {
		s.log.Error("delete model bucket", "tenant", tenant, "err", err)
		contracts.Write(w, httpapi.StoreError(r.Context(), err, "registry", "The registry could not be reached."))
		return
	}
	s.log.Info("tenant model bucket removed", "tenant", tenant)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": tenant, "object": "model_bucket", "deleted": true})
}
