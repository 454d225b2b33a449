package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

// TestBatchWebhookIsSignedAndDelivered: a tenant's webhook, set through the
// admin API (which shows the signing secret once), receives batch.completed
// as OpenAI sends it, signed with the Standard Webhooks scheme; a receiver
// verifies the signature with that secret.
func TestBatchWebhookIsSignedAndDelivered(t *testing.T) {
	type delivery struct {
		header http.Header
		body   []byte
	}
	got := make(chan delivery, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Clone(), b}
	}))
	defer hook.Close()

	_, base := sim(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 2})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")
	ctx := context.Background()
	var wh struct {
		URL    string   `json:"url"`
		Events []string `json:"events"`
		Secret string   `json:"secret"`
	}
	if err := s.admin.Do(ctx, "PUT", "/admin/v1/tenants/acme/webhook", map[string]any{"url": hook.URL + "/hooks", "events": []string{"batch.completed"}}, &wh); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(wh.Secret, "whsec_") {
		t.Fatalf("webhook: %+v", wh)
	}
	var shown map[string]any
	if err := s.admin.Do(ctx, "GET", "/admin/v1/tenants/acme/webhook", nil, &shown); err != nil || shown["secret"] != nil || shown["secret_sealed"] != nil {
		t.Fatalf("the webhook as read back shows its secret: %v %v", shown, err)
	}

	c := sdkClient(s, key)
	b := submitBatch(t, c, batchLines("chat", "w", 5, 2), nil)
	b = waitBatch(t, c, b.ID, time.Minute, final, "batch completed")
	if b.Status != openai.BatchStatusCompleted {
		t.Fatalf("final: %s", b.RawJSON())
	}
	var d delivery
	select {
	case d = <-got:
	case <-time.After(time.Minute):
		t.Fatal("no webhook delivery within a minute")
	}
	var ev struct {
		ID        string `json:"id"`
		Object    string `json:"object"`
		Type      string `json:"type"`
		CreatedAt int64  `json:"created_at"`
		Data      struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(d.body, &ev); err != nil || ev.Object != "event" || ev.Type != "batch.completed" || ev.Data.ID != b.ID || !strings.HasPrefix(ev.ID, "evt_") {
		t.Fatalf("delivery %s: %v", d.body, err)
	}
	id, ts, sig := d.header.Get("webhook-id"), d.header.Get("webhook-timestamp"), d.header.Get("webhook-signature")
	secret, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(wh.Secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id + "." + ts + "." + string(d.body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if id != ev.ID || ts == "" || !strings.Contains(" "+sig+" ", " "+want+" ") {
		t.Fatalf("signature headers id=%q ts=%q sig=%q, want the signature %q", id, ts, sig, want)
	}
	t.Logf("webhook %s delivered and verified: %s", ev.Type, d.body)
}
