package registry

import (
	"context"
	"fmt"
	"time"
)

// DefaultTenantAdmission is the admission policy of a tenant created
// without one: malicious-looking prompts are blocked.
func DefaultTenantAdmission() AdmissionPolicy { return AdmissionPolicy{Mode: AdmissionBlock} }

// CreateTenantWithAdmission is CreateTenant with an admission policy; nil
// gives the tenant DefaultTenantAdmission.
func (s *Store) CreateTenantWithAdmission(ctx context.Context, id string, p *AdmissionPolicy) (Tenant, error) {
	return s.CreateTenantWith(ctx, id, TenantOptions{Admission: p})
}

// TenantOptions are the settings a tenant is created with.
type TenantOptions struct {
	// Admission is the tenant's policy; nil: DefaultTenantAdmission.
	Admission *AdmissionPolicy
	// TraceContent is Tenant.TraceContent.
	TraceContent bool
}

// CreateTenantWith creates tenant id with o.
func (s *Store) CreateTenantWith(ctx context.Context, id string, o TenantOptions) (Tenant, error) {
	p := o.Admission
	if !ValidTenantID(id) {
		return Tenant{}, fmt.Errorf("%w: tenant id must match %s", ErrInvalid, tenantRE)
	}
	if p == nil {
		d := DefaultTenantAdmission()
		p = &d
	}
	if err := p.Validate(); err != nil {
		return Tenant{}, err
	}
	t := Tenant{ID: id, CreatedAt: time.Now().UTC(), Admission: p, TraceContent: o.TraceContent}
	return t, put(ctx, s.tenants, "t."+id, t, true)
}

// SetTenantAdmission sets (nil: removes, which is off) a tenant's
// admission policy.
func (s *Store) SetTenantAdmission(ctx context.Context, id string, p *AdmissionPolicy) (Tenant, error) {
	if !ValidTenantID(id) {
		return Tenant{}, ErrNotFound
	}
	if p != nil {
		if err := p.Validate(); err != nil {
			return Tenant{}, err
		}
	}
	return modify(ctx, s.tenants, "t."+id, func(t *Tenant) error {
		t.Admission = p
		return nil
	})
}

// SetKeyAdmission sets (nil: removes, inheriting the tenant's) a key's
// admission override.
func (s *Store) SetKeyAdmission(ctx context.Context, id string, p *AdmissionPolicy) (Key, error) {
	if !validKVKey(id) {
		return Key{}, ErrNotFound
	}
	if p != nil {
		if err := p.Validate(); err != nil {
			return Key{}, err
		}
	}
	return modify(ctx, s.keys, id, func(k *Key) error {
		k.Admission = p
		return nil
	})
}

// SetTenantTraceContent turns the recording of a tenant's prompt and
// completion text in its traces on or off (Tenant.TraceContent).
func (s *Store) SetTenantTraceContent(ctx context.Context, id string, on bool) (Tenant, error) {
	if !ValidTenantID(id) {
		return Tenant{}, ErrNotFound
	}
	return modify(ctx, s.tenants, "t."+id, func(t *Tenant) error {
		t.TraceContent = on
		return nil
	})
}
