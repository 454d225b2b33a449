package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/tenantbucket"
	"github.com/aiforge/aiforge/services/edge"
)

// A tenant's model bucket keeps its S3 credentials only sealed, bound to
// the bucket: the API never shows them again (only the access key id's
// last four characters), nor do the KV value or the logs; endpoints that
// reach metadata services or hold credentials are refused.
func TestTenantModelBucketAdmin(t *testing.T) {
	h := startBatchEdge(t, nil)
	h.tenantKey("acme")
	const keyID, secret = "AKIAEXAMPLE7Q2Z", "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	body := map[string]any{"endpoint": "http://127.0.0.1:7070", "bucket": "models", "prefix": "acme/", "region": "us-east-1",
		"path_style": true, "access_key_id": keyID, "secret_access_key": secret}
	r := h.admin("PUT", "/admin/v1/tenants/acme/model-bucket", body)
	if r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	if m := r.json(t); m["access_key_hint"] != "…7Q2Z" || m["bucket"] != "models" || m["prefix"] != "acme/" || m["path_style"] != true {
		t.Fatalf("put answer %v", m)
	}
	for _, method := range []string{"PUT", "GET"} {
		var r response
		if method == "PUT" {
			r = h.admin("PUT", "/admin/v1/tenants/acme/model-bucket", body)
		} else {
			r = h.admin("GET", "/admin/v1/tenants/acme/model-bucket", nil)
		}
		if r.status != 200 || strings.Contains(r.String(), secret) || strings.Contains(r.String(), keyID) || strings.Contains(r.String(), "sealed") {
			t.Fatalf("%s shows the credentials: %d %s", method, r.status, r.body)
		}
	}
	e, err := h.kv(events.BucketTenantBuckets).Get(context.Background(), tenantbucket.Key("acme"))
	if err != nil || strings.Contains(string(e.Value()), secret) || strings.Contains(string(e.Value()), keyID) {
		t.Fatalf("the KV value holds the credentials in clear (%v)", err)
	}
	var c tenantbucket.Config
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		t.Fatal(err)
	}
	cred, err := tenantbucket.Open(h.secrets, c)
	if err != nil || cred.AccessKeyID != keyID || cred.SecretAccessKey != secret {
		t.Fatalf("the sealed credentials do not open to the ones given: %v", err)
	}
	if strings.Contains(h.logs.String(), secret) || strings.Contains(h.logs.String(), keyID) {
		t.Fatal("the credentials are in the logs")
	}
	for _, bad := range []string{"ftp://example.com", "example.com:9000", "http://169.254.169.254", "http://metadata.google.internal",
		"https://user:pass@s3.example.com", "http://s3.example.com/path"} {
		b := map[string]any{}
		for k, v := range body {
			b[k] = v
		}
		b["endpoint"] = bad
		if r := apiError(t, h.admin("PUT", "/admin/v1/tenants/acme/model-bucket", b), 400, "invalid_value"); strings.Contains(fmt.Sprint(r), secret) {
			t.Fatalf("an error shows the secret: %s", r)
		}
	}
	for field, v := range map[string]any{"bucket": "Bad_Bucket", "prefix": "../up/"} {
		b := map[string]any{}
		for k, v := range body {
			b[k] = v
		}
		b[field] = v
		apiError(t, h.admin("PUT", "/admin/v1/tenants/acme/model-bucket", b), 400, "invalid_value")
	}
	delete(body, "secret_access_key")
	apiError(t, h.admin("PUT", "/admin/v1/tenants/acme/model-bucket", body), 400, "missing_required_parameter")
	body["secret_access_key"] = secret
	apiError(t, h.admin("PUT", "/admin/v1/tenants/nobody/model-bucket", body), 404, "not_found")
	if r := h.admin("DELETE", "/admin/v1/tenants/acme/model-bucket", nil); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	apiError(t, h.admin("GET", "/admin/v1/tenants/acme/model-bucket", nil), 404, "not_found")
	apiError(t, h.admin("DELETE", "/admin/v1/tenants/acme/model-bucket", nil), 404, "not_found")

	// Without the secrets key, nothing is kept.
	h2 := startEdge(t, func(c *edge.Config) { c.SecretsKey = nil })
	h2.tenantKey("acme")
	apiError(t, h2.admin("PUT", "/admin/v1/tenants/acme/model-bucket", body), 400, "invalid_request")
}

// An S3 event notification posted with a tenant's key tells the guardian
// to list that tenant's bucket when a record names a manifest; other
// records, bad bodies and missing keys tell it nothing.
func TestModelBucketEventNotifies(t *testing.T) {
	h := startEdge(t, nil)
	acme, _ := h.tenantKey("acme")
	sub, err := h.nc.SubscribeSync(events.ModelBucketNotifyAll)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	event := func(key string) string {
		return `{"EventName":"s3:ObjectCreated:Put","Key":"models/` + key + `","Records":[{"eventVersion":"2.0","eventSource":"minio:s3",` +
			`"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"models"},"object":{"key":"` + key + `","size":785}}}]}`
	}
	r := h.do("POST", "/v1/model-bucket/events", acme, event("acme%2Ftiny%2Fweights.safetensors"), nil)
	if r.status != 202 || r.json(t)["notified"] != false {
		t.Fatalf("a weights file: %d %s", r.status, r.body)
	}
	r = h.do("POST", "/v1/model-bucket/events", acme, event("acme%2Ftiny%2Faiforge-model.json"), nil)
	if r.status != 202 || r.json(t)["notified"] != true || r.json(t)["tenant"] != "acme" {
		t.Fatalf("a manifest: %d %s", r.status, r.body)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || m.Subject != events.ModelBucketNotify("acme") {
		t.Fatalf("notification: %v %v", m, err)
	}
	apiError(t, h.do("POST", "/v1/model-bucket/events", acme, "not json", nil), 400, "invalid_json")
	apiError(t, h.do("POST", "/v1/model-bucket/events", "", event("acme/x/aiforge-model.json"), nil), 401, "invalid_api_key")
	apiError(t, h.do("POST", "/v1/model-bucket/events", acme, `{"Records":[]}`+strings.Repeat(" ", 1<<20), nil), 413, "request_too_large")
}
