package tenantbucket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/sealed"
)

const (
	testKeyID  = "AKIDTESTVALUE1234"
	testSecret = "s3cr3t-never-in-clear-9f8e7d"
)

func good() Config {
	return Config{Tenant: "acme", Endpoint: "http://127.0.0.1:7070", Bucket: "models", Prefix: "acme/", PathStyle: true}
}

// TestSealBindsCredentials: sealed credentials open for their bucket only;
// moved to another endpoint, bucket or prefix they do not.
func TestSealBindsCredentials(t *testing.T) {
	priv, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.Public()
	c, err := Seal(&pub, good(), Credentials{AccessKeyID: testKeyID, SecretAccessKey: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	if c.AccessKeyHint != "…1234" || strings.Contains(c.CredentialsSealed, testSecret) || strings.Contains(c.CredentialsSealed, testKeyID) {
		t.Fatalf("sealed config shows the credentials: %+v", c)
	}
	cred, err := Open(priv, c)
	if err != nil || cred.AccessKeyID != testKeyID || cred.SecretAccessKey != testSecret {
		t.Fatalf("Open = %v, %v", cred.AccessKeyID, err)
	}
	for _, move := range []func(c *Config){
		func(c *Config) { c.Endpoint = "http://evil.example:80" },
		func(c *Config) { c.Bucket = "other" },
		func(c *Config) { c.Prefix = "" },
		func(c *Config) { c.Tenant = "globex" },
	} {
		m := c
		move(&m)
		if _, err := Open(priv, m); !errors.Is(err, sealed.ErrContext) {
			t.Errorf("credentials moved to %+v opened: %v", m, err)
		}
	}
	if _, err := Seal(&pub, good(), Credentials{AccessKeyID: testKeyID}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no secret: %v", err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "cred", cred)
	for _, out := range []string{fmt.Sprint(cred), fmt.Sprintf("%+v", cred), fmt.Sprintf("%#v", cred), buf.String()} {
		if strings.Contains(out, testSecret) || strings.Contains(out, testKeyID) {
			t.Errorf("credentials printed: %s", out)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
	for i, bad := range []func(c *Config){
		func(c *Config) { c.Tenant = "" },
		func(c *Config) { c.Tenant = "Bad/Tenant" },
		func(c *Config) { c.Endpoint = "127.0.0.1:7070" },
		func(c *Config) { c.Endpoint = "ftp://h" },
		func(c *Config) { c.Endpoint = "http://u:p@h" },
		func(c *Config) { c.Endpoint = "http://h/path" },
		func(c *Config) { c.Bucket = "Bad_Bucket" },
		func(c *Config) { c.Prefix = "acme" },
		func(c *Config) { c.Prefix = "../acme/" },
		func(c *Config) { c.Prefix = "a//b/" },
	} {
		c := good()
		bad(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: %+v: %v, want ErrInvalid", i, c, err)
		}
	}
}

// TestStore: put, get, list, watch and delete; the stored value holds the
// sealed credentials only.
func TestStore(t *testing.T) {
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, good()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("put without sealed credentials: %v", err)
	}
	priv, _ := sealed.Generate()
	pub := priv.Public()
	c, err := Seal(&pub, good(), Credentials{AccessKeyID: testKeyID, SecretAccessKey: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 8)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = s.Watch(wctx, func() { changed <- struct{}{} }) }()
	// Puts until the watch (started concurrently) reports one.
	deadline := time.Now().Add(10 * time.Second)
	for seen := false; !seen; {
		if _, err := s.Put(ctx, c); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
			seen = true
		case <-time.After(50 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the watch reported no change")
			}
		}
	}
	got, err := s.Get(ctx, "acme")
	if err != nil || got.Bucket != "models" || got.CredentialsSealed != c.CredentialsSealed {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	kvb, _ := js.KeyValue(ctx, events.BucketTenantBuckets)
	raw, err := kvb.Get(ctx, Key("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw.Value(), []byte(testSecret)) || bytes.Contains(raw.Value(), []byte(testKeyID)) {
		t.Fatalf("the KV value holds the credentials: %s", raw.Value())
	}
	if all, err := s.List(ctx); err != nil || len(all) != 1 {
		t.Fatalf("List = %+v, %v", all, err)
	}
	if err := s.Delete(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	<-changed
	if _, err := s.Get(ctx, "acme"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after delete: %v", err)
	}
	if err := s.Delete(ctx, "acme"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}
