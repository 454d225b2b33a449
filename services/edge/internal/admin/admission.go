package admin

import (
	"net/http"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/registry"
)

// admissionPatch is a partial update of an admission policy: absent
// fields stay; on a key, "" (or threshold 0) makes the field inherit the
// tenant's again.
type admissionPatch struct {
	Mode      *string  `json:"mode"`
	PII       *string  `json:"pii"`
	Threshold *float64 `json:"threshold"`
}

// apply is p applied to cur (nil: an empty policy).
func (p *admissionPatch) apply(cur *registry.AdmissionPolicy) *registry.AdmissionPolicy {
	var out registry.AdmissionPolicy
	if cur != nil {
		out = *cur
	}
	if p.Mode != nil {
		out.Mode = *p.Mode
	}
	if p.PII != nil {
		out.PII = *p.PII
	}
	if p.Threshold != nil {
		out.Threshold = *p.Threshold
	}
	return &out
}

// validAdmission answers 400 when p is not a valid policy.
func validAdmission(w http.ResponseWriter, p *registry.AdmissionPolicy) bool {
	if p == nil {
		return true
	}
	if err := p.Validate(); err != nil {
		contracts.Write(w, contracts.ErrBadRequest("admission", contracts.CodeInvalidValue, "Invalid 'admission': "+err.Error()))
		return false
	}
	return true
}

// patchTenantAdmission applies p to tenant id's policy.
func (s *Service) patchTenantAdmission(w http.ResponseWriter, r *http.Request, id string, p *admissionPatch) (registry.Tenant, bool) {
	t, err := s.store.GetTenant(r.Context(), id)
	if err != nil {
		s.storeError(w, r, err, "Tenant '"+id+"'")
		return t, false
	}
	next := p.apply(t.Admission)
	if next.Mode == "" {
		// A tenant's mode is never inherited: empty means off.
		next.Mode = registry.AdmissionOff
	}
	if !validAdmission(w, next) {
		return t, false
	}
	if t, err = s.store.SetTenantAdmission(r.Context(), id, next); err != nil {
		s.storeError(w, r, err, "Tenant '"+id+"'")
		return t, false
	}
	return t, true
}

// patchKeyAdmission applies p to key id's override.
func (s *Service) patchKeyAdmission(w http.ResponseWriter, r *http.Request, id string, p *admissionPatch) (registry.Key, bool) {
	k, err := s.store.GetKey(r.Context(), id)
	if err != nil {
		s.storeError(w, r, err, "Key '"+id+"'")
		return k, false
	}
	next := p.apply(k.Admission)
	if !validAdmission(w, next) {
		return k, false
	}
	if *next == (registry.AdmissionPolicy{}) {
		next = nil
	}
	if k, err = s.store.SetKeyAdmission(r.Context(), id, next); err != nil {
		s.storeError(w, r, err, "Key '"+id+"'")
		return k, false
	}
	return k, true
}
