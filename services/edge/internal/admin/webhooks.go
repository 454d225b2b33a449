package admin

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/netguard"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// A tenant's webhook receives its batch events, signed with a secret the
// admin API makes, shows once and keeps only sealed to the platform's
// secrets key (as engine keys are): the batch service opens it to sign.

// webhookEvents are the events a webhook may ask for.
var webhookEvents = []string{registry.WebhookBatchCompleted, registry.WebhookBatchFailed, registry.WebhookBatchExpired, registry.WebhookBatchCancelled}

// webhookView is a webhook as the API shows it: never the secret, sealed or
// not, except the secret once, when it is made.
type webhookView struct {
	Object string   `json:"object"`
	Tenant string   `json:"tenant"`
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Secret string   `json:"secret,omitempty"`
}

func viewWebhook(tenant string, w *registry.Webhook) *webhookView {
	if w == nil {
		return nil
	}
	ev := w.Events
	if len(ev) == 0 {
		ev = webhookEvents
	}
	return &webhookView{Object: "webhook", Tenant: tenant, URL: w.URL, Events: ev}
}

func (s *Service) webhookRoutes(mux *http.ServeMux) {
	mux.HandleFunc("PUT /admin/v1/tenants/{id}/webhook", s.admin(s.putWebhook))
	mux.HandleFunc("GET /admin/v1/tenants/{id}/webhook", s.admin(s.getWebhook))
	mux.HandleFunc("DELETE /admin/v1/tenants/{id}/webhook", s.admin(s.deleteWebhook))
}

// checkWebhookURL refuses what a webhook must not be: not http(s), with
// credentials in it (they would be stored in clear), or pointing at a
// link-local or cloud metadata address. Loopback and private addresses
// are allowed: a platform's receivers often live there. A name is checked
// as written; the deliverer checks the address it dials.
func checkWebhookURL(raw string) error {
	if len(raw) > 2048 {
		return fmt.Errorf("the url may be at most 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("the url must be an absolute http:// or https:// URL")
	}
	if u.User != nil {
		return fmt.Errorf("the url must not hold credentials; the webhook is authenticated by its signature")
	}
	if u.Fragment != "" {
		return fmt.Errorf("the url must not have a fragment")
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "" {
		return fmt.Errorf("the url has no host")
	}
	if slices.Contains(netguard.MetadataHosts, host) {
		return fmt.Errorf("the url points at a cloud metadata service")
	}
	if ip := net.ParseIP(host); ip != nil {
		a, _ := netip.AddrFromSlice(ip)
		a = a.Unmap()
		switch {
		case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast():
			return fmt.Errorf("the url points at a link-local address (%s), where cloud metadata services live", a)
		case slices.Contains(netguard.MetadataAddrs, a):
			return fmt.Errorf("the url points at a cloud metadata service (%s)", a)
		case a.IsUnspecified() || a.IsMulticast():
			return fmt.Errorf("the url's address %s cannot receive webhooks", a)
		}
	}
	return nil
}

func (s *Service) putWebhook(w http.ResponseWriter, r *http.Request) {
	var req struct {
		URL    string   `json:"url"`
		Events []string `json:"events"`
	}
	if !httpapi.DecodeStrict(w, r, &req) {
		return
	}
	tenant := r.PathValue("id")
	if req.URL == "" {
		contracts.Write(w, contracts.ErrBadRequest("url", contracts.CodeMissingParam, "Missing required parameter: 'url'."))
		return
	}
	if err := checkWebhookURL(req.URL); err != nil {
		contracts.Write(w, contracts.ErrBadRequest("url", contracts.CodeInvalidValue, "Invalid webhook url: "+err.Error()+"."))
		return
	}
	var evs []string
	for _, e := range req.Events {
		if !slices.Contains(webhookEvents, e) {
			contracts.Write(w, contracts.ErrBadRequest("events", contracts.CodeInvalidValue,
				fmt.Sprintf("Invalid event '%s': expected some of %s.", httpapi.Bounded(e, 64), strings.Join(webhookEvents, ", "))))
			return
		}
		if !slices.Contains(evs, e) {
			evs = append(evs, e)
		}
	}
	if s.d.SecretsKey == nil {
		contracts.Write(w, contracts.ErrBadRequest("url", contracts.CodeInvalidRequest,
			"This edge cannot keep webhook secrets: it has no secrets public key to seal them with (give it the workers' public key: AIFORGE_SECRETS_PUBLIC_KEY_FILE)."))
		return
	}
	if _, err := s.store.GetTenant(r.Context(), tenant); err != nil {
		s.storeError(w, r, err, "Tenant '"+tenant+"'")
		return
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		contracts.Write(w, contracts.ErrInternal("A webhook secret could not be made."))
		return
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString(raw[:])
	sealedSecret, err := s.d.SecretsKey.Seal([]byte(secret), registry.WebhookSecretContext(tenant, req.URL))
	if err != nil {
		s.log.Error("seal webhook secret", "tenant", tenant, "err", err)
		contracts.Write(w, contracts.ErrInternal("The webhook secret could not be sealed."))
		return
	}
	t, err := s.store.SetTenantWebhook(r.Context(), tenant, &registry.Webhook{URL: req.URL, Events: evs, SecretSealed: sealedSecret})
	if err != nil {
		s.storeError(w, r, err, "Tenant '"+tenant+"'")
		return
	}
	s.d.Directory.NoteTenant(t)
	s.log.Info("tenant webhook set", "tenant", tenant, "url", req.URL, "events", evs)
	v := viewWebhook(tenant, t.Webhook)
	v.Secret = secret
	httpapi.WriteJSON(w, http.StatusOK, v)
}

func (s *Service) getWebhook(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("id")
	t, err := s.store.GetTenant(r.Context(), tenant)
	if err != nil {
		s.storeError(w, r, err, "Tenant '"+tenant+"'")
		return
	}
	if t.Webhook == nil {
		contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("Tenant '%s' has no webhook.", tenant)))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, viewWebhook(tenant, t.Webhook))
}

func (s *Service) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("id")
	t, err := s.store.GetTenant(r.Context(), tenant)
	if err != nil {
		s.storeError(w, r, err, "Tenant '"+tenant+"'")
		return
	}
	if t.Webhook == nil {
		contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("Tenant '%s' has no webhook.", tenant)))
		return
	}
	if t, err = s.store.SetTenantWebhook(r.Context(), tenant, nil); err != nil {
		s.storeError(w, r, err, "Tenant '"+tenant+"'")
		return
	}
	s.d.Directory.NoteTenant(t)
	s.log.Info("tenant webhook removed", "tenant", tenant)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": tenant, "object": "webhook", "deleted": true})
}
