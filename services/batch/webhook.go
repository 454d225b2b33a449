package batch

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/netguard"
	"github.com/aiforge/aiforge/pkg/registry"
)

// WebhooksDurable is the durable consumer that delivers webhooks.
const WebhooksDurable = "batch-webhooks"

// webhookSecretPrefix starts a Standard Webhooks signing secret.
const webhookSecretPrefix = "whsec_"

// errRefusedAddress is a webhook URL that resolves to a link-local or
// metadata address.
var errRefusedAddress = errors.New("webhook address refused: link-local and metadata addresses are not delivered to")

// webhookClient is the HTTP client of webhook deliveries: it dials no
// refused address (checked on the address actually dialled, after
// resolution, so a DNS name cannot smuggle one in) and follows no
// redirect.
func webhookClient(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip := net.ParseIP(host)
		if ip == nil || netguard.RefusedIP(ip) {
			return fmt.Errorf("%w: %s", errRefusedAddress, host)
		}
		return nil
	}}
	return &http.Client{
		Timeout:       timeout,
		Transport:     &http.Transport{DialContext: d.DialContext, TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: timeout, MaxIdleConnsPerHost: 2},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// webhookConsumer delivers every final status to the tenant's webhook.
func (s *Service) webhookConsumer() (*events.Consumer, error) {
	client := webhookClient(s.cfg.WebhookTimeout)
	reg := events.NewRegistry(func() events.Event { return new(events.BatchFinishedV1) })
	return events.NewConsumer(s.deps.JS, reg, events.ConsumerConfig{
		Stream: events.StreamBatch, Durable: WebhooksDurable, FilterSubjects: []string{events.BatchFinishedAll},
		MaxDeliver: s.cfg.WebhookAttempts, Backoff: s.cfg.WebhookBackoff, AckWait: s.cfg.WebhookTimeout + 20*time.Second,
		Logger: s.log,
	}, func(ctx context.Context, env events.Envelope, ev events.Event) error {
		return s.deliver(ctx, client, ev.(*events.BatchFinishedV1))
	})
}

// WebhookEvent is the body of a webhook delivery, OpenAI's shape.
type WebhookEvent struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	CreatedAt int64  `json:"created_at"`
	Type      string `json:"type"`
	Data      struct {
		ID string `json:"id"`
	} `json:"data"`
}

// deliver posts one final status to the tenant's webhook, signed.
func (s *Service) deliver(ctx context.Context, client *http.Client, f *events.BatchFinishedV1) error {
	rec, _, err := kv.Get[api.Record](ctx, s.batches, api.Key(f.Tenant, f.BatchID))
	if errors.Is(err, kv.ErrNotFound) {
		s.m.webhooks.WithLabelValues("skipped").Inc()
		return nil
	}
	if err != nil {
		return err
	}
	if rec.Status != f.Status {
		if !api.Final(rec.Status) {
			// Published just before the status is written.
			return fmt.Errorf("batch %s is %s, not yet %s", f.BatchID, rec.Status, f.Status)
		}
		s.m.webhooks.WithLabelValues("skipped").Inc()
		return nil // superseded (an expiry published, then cancelled)
	}
	tenant, err := s.reg.GetTenant(ctx, f.Tenant)
	if errors.Is(err, registry.ErrNotFound) {
		s.m.webhooks.WithLabelValues("skipped").Inc()
		return nil
	}
	if err != nil {
		return err
	}
	typ := "batch." + f.Status
	wh := tenant.Webhook
	if wh == nil || wh.URL == "" || (len(wh.Events) > 0 && !slices.Contains(wh.Events, typ)) {
		s.m.webhooks.WithLabelValues("skipped").Inc()
		return nil
	}
	if s.deps.SecretsKey == nil {
		s.m.webhooks.WithLabelValues("failed").Inc()
		return errors.New("no secrets key to open the webhook's signing secret")
	}
	secret, err := s.deps.SecretsKey.Open(wh.SecretSealed, registry.WebhookSecretContext(f.Tenant, wh.URL))
	if err != nil {
		s.m.webhooks.WithLabelValues("failed").Inc()
		return fmt.Errorf("open the webhook secret of tenant %s: %w", f.Tenant, err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(string(secret), webhookSecretPrefix))
	if err != nil {
		s.m.webhooks.WithLabelValues("failed").Inc()
		return fmt.Errorf("the webhook secret of tenant %s is not whsec_<base64>", f.Tenant)
	}
	ev := WebhookEvent{ID: "evt_" + digest(f.BatchID+"\x00"+f.Status), Object: "event", CreatedAt: f.At.Unix(), Type: typ}
	ev.Data.ID = f.BatchID
	body, _ := json.Marshal(ev)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wh.URL, bytes.NewReader(body))
	if err != nil {
		s.m.webhooks.WithLabelValues("failed").Inc()
		return fmt.Errorf("webhook of tenant %s: %w", f.Tenant, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "aiforge-webhooks")
	req.Header.Set("webhook-id", ev.ID)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", Sign(key, ev.ID, ts, body))
	resp, err := client.Do(req)
	if err != nil {
		s.m.webhooks.WithLabelValues("failed").Inc()
		return fmt.Errorf("webhook of tenant %s: %w", f.Tenant, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		s.m.webhooks.WithLabelValues("failed").Inc()
		return fmt.Errorf("webhook of tenant %s answered %d", f.Tenant, resp.StatusCode)
	}
	s.m.webhooks.WithLabelValues("delivered").Inc()
	return nil
}

// Sign is the Standard Webhooks signature of a delivery:
// "v1,<base64 HMAC-SHA256(key, id.timestamp.body)>".
func Sign(key []byte, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
