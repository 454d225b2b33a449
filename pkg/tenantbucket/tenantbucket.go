// Package tenantbucket is the record of a tenant's model bucket: an S3
// prefix the guardian watches for model folders, which it imports into the
// catalog as versions of that tenant's models. The edge's admin API writes
// it (events.BucketTenantBuckets), the guardian reads and watches it.
//
// The S3 credentials are never stored in clear: the edge seals the access
// key id and the secret together to the platform's secrets key
// (pkg/sealed), bound to the tenant, endpoint, bucket and prefix, and only
// holders of the private key (the guardian) open them. Someone who can
// write the bucket cannot move sealed credentials to an endpoint of their
// own.
package tenantbucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sealed"
)

// Errors callers map to API answers.
var (
	ErrNotFound = errors.New("tenantbucket: not found")
	ErrInvalid  = errors.New("tenantbucket: invalid")
)

// Config is a tenant's model bucket as stored: everything but the
// credentials in clear.
type Config struct {
	Tenant string `json:"tenant"`
	// Endpoint is the S3 API's base URL: http:// or https:// and
	// host[:port], nothing else.
	Endpoint string `json:"endpoint"`
	Bucket   string `json:"bucket"`
	// Prefix is the key prefix watched: empty (the whole bucket) or ending
	// in "/". Each folder under it is one model.
	Prefix string `json:"prefix,omitempty"`
	Region string `json:"region,omitempty"`
	// PathStyle addresses the bucket in the path (http://host/bucket/key),
	// as most S3 servers other than AWS need; otherwise the client picks.
	PathStyle bool `json:"path_style,omitempty"`
	// AccessKeyHint is the access key id's last four characters, so an
	// operator can tell which key is configured.
	AccessKeyHint string `json:"access_key_hint"`
	// CredentialsSealed is the JSON of Credentials sealed with
	// CredentialsContext.
	CredentialsSealed string    `json:"credentials_sealed"`
	UpdatedAt         time.Time `json:"updated_at"`
}

// Credentials sign the guardian's requests to a tenant's bucket. They
// print redacted.
type Credentials struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
}

// String keeps the credentials out of %v.
func (c Credentials) String() string { return "tenantbucket.Credentials([REDACTED])" }

// GoString keeps the credentials out of %#v.
func (c Credentials) GoString() string { return c.String() }

// LogValue keeps the credentials out of logs.
func (c Credentials) LogValue() slog.Value { return slog.StringValue("[REDACTED]") }

// CredentialsContext binds sealed credentials to the bucket they are for.
func CredentialsContext(c Config) string {
	return "tenant-model-bucket\x00" + c.Tenant + "\x00" + c.Endpoint + "\x00" + c.Bucket + "\x00" + c.Prefix
}

// Host returns the endpoint's host[:port] and whether it is https.
func (c Config) Host() (host string, secure bool, err error) {
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", false, fmt.Errorf("%w: endpoint %q must be http:// or https:// and host[:port], without path, query or credentials", ErrInvalid, bounded(c.Endpoint))
	}
	return u.Host, u.Scheme == "https", nil
}

// Validate reports every problem of c, credentials aside.
func (c Config) Validate() error {
	var errs []error
	if !registry.ValidTenantID(c.Tenant) {
		errs = append(errs, fmt.Errorf("%w: tenant id %q", ErrInvalid, bounded(c.Tenant)))
	}
	if _, _, err := c.Host(); err != nil {
		errs = append(errs, err)
	}
	if err := s3utils.CheckValidBucketNameStrict(c.Bucket); err != nil {
		errs = append(errs, fmt.Errorf("%w: bucket %q: %v", ErrInvalid, bounded(c.Bucket), err))
	}
	if c.Prefix != "" {
		if !strings.HasSuffix(c.Prefix, "/") || objstore.ValidateKey(strings.TrimSuffix(c.Prefix, "/")) != nil || len(c.Prefix) > 512 {
			errs = append(errs, fmt.Errorf("%w: prefix %q must be a relative key path ending in \"/\" (no empty, \".\" or \"..\" segments, at most 512 bytes)", ErrInvalid, bounded(c.Prefix)))
		}
	}
	if len(c.Region) > 64 || strings.ContainsAny(c.Region, "/\\ \r\n") {
		errs = append(errs, fmt.Errorf("%w: region %q", ErrInvalid, bounded(c.Region)))
	}
	return errors.Join(errs...)
}

func bounded(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// Seal returns c with the credentials sealed to pub and their hint set.
func Seal(pub *sealed.PublicKey, c Config, cred Credentials) (Config, error) {
	if cred.AccessKeyID == "" || cred.SecretAccessKey == "" {
		return Config{}, fmt.Errorf("%w: access key id and secret access key are required", ErrInvalid)
	}
	if len(cred.AccessKeyID) > 256 || len(cred.SecretAccessKey) > 256 || strings.ContainsAny(cred.AccessKeyID+cred.SecretAccessKey, "\r\n\x00") {
		return Config{}, fmt.Errorf("%w: access key id and secret access key must be at most 256 characters, on one line", ErrInvalid)
	}
	raw, err := json.Marshal(cred)
	if err != nil {
		return Config{}, fmt.Errorf("tenantbucket: credentials: %w", err)
	}
	c.CredentialsSealed, err = pub.Seal(raw, CredentialsContext(c))
	if err != nil {
		return Config{}, fmt.Errorf("tenantbucket: seal credentials: %w", err)
	}
	hint := cred.AccessKeyID
	if len(hint) > 4 {
		hint = hint[len(hint)-4:]
	}
	c.AccessKeyHint = "…" + hint
	return c, nil
}

// Open returns the credentials of c. Its errors never carry them.
func Open(priv *sealed.PrivateKey, c Config) (Credentials, error) {
	if priv == nil {
		return Credentials{}, errors.New("tenantbucket: no secrets key to open the credentials with")
	}
	raw, err := priv.Open(c.CredentialsSealed, CredentialsContext(c))
	if err != nil {
		return Credentials{}, fmt.Errorf("tenantbucket: credentials of tenant %s: %w", c.Tenant, err)
	}
	var cred Credentials
	if err := json.Unmarshal(raw, &cred); err != nil || cred.AccessKeyID == "" || cred.SecretAccessKey == "" {
		return Credentials{}, fmt.Errorf("tenantbucket: credentials of tenant %s: %w", c.Tenant, sealed.ErrMalformed)
	}
	return cred, nil
}

// Key is the KV key of a tenant's model bucket.
func Key(tenant string) string { return "b." + tenant }

// Store reads and writes the tenants' model buckets.
type Store struct {
	b   jetstream.KeyValue
	now func() time.Time
}

// OpenStore binds to events.BucketTenantBuckets (events.Ensure creates it).
func OpenStore(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	b, err := js.KeyValue(ctx, events.BucketTenantBuckets)
	if err != nil {
		return nil, fmt.Errorf("tenantbucket: bucket %s: %w", events.BucketTenantBuckets, err)
	}
	return &Store{b: b, now: func() time.Time { return time.Now().UTC() }}, nil
}

// Put stores c (validated, credentials sealed) as its tenant's model
// bucket, replacing the one before.
func (s *Store) Put(ctx context.Context, c Config) (Config, error) {
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	if c.CredentialsSealed == "" {
		return Config{}, fmt.Errorf("%w: the credentials are not sealed", ErrInvalid)
	}
	c.UpdatedAt = s.now()
	if _, err := kv.Put(ctx, s.b, Key(c.Tenant), c); err != nil {
		return Config{}, fmt.Errorf("tenantbucket: %w", err)
	}
	return c, nil
}

// Get returns a tenant's model bucket.
func (s *Store) Get(ctx context.Context, tenant string) (Config, error) {
	if !registry.ValidTenantID(tenant) {
		return Config{}, fmt.Errorf("tenantbucket: tenant %q: %w", bounded(tenant), ErrNotFound)
	}
	c, _, err := kv.Get[Config](ctx, s.b, Key(tenant))
	if errors.Is(err, kv.ErrNotFound) {
		return Config{}, fmt.Errorf("tenantbucket: tenant %q: %w", tenant, ErrNotFound)
	}
	if err != nil {
		return Config{}, fmt.Errorf("tenantbucket: %w", err)
	}
	return c, nil
}

// Delete removes a tenant's model bucket: the guardian stops watching it.
func (s *Store) Delete(ctx context.Context, tenant string) error {
	if !registry.ValidTenantID(tenant) {
		return fmt.Errorf("tenantbucket: tenant %q: %w", bounded(tenant), ErrNotFound)
	}
	if err := kv.Delete(ctx, s.b, Key(tenant)); err != nil {
		if errors.Is(err, kv.ErrNotFound) {
			return fmt.Errorf("tenantbucket: tenant %q: %w", tenant, ErrNotFound)
		}
		return fmt.Errorf("tenantbucket: %w", err)
	}
	return nil
}

// List returns every tenant's model bucket, by tenant.
func (s *Store) List(ctx context.Context) ([]Config, error) {
	es, err := kv.List[Config](ctx, s.b)
	if err != nil {
		return nil, fmt.Errorf("tenantbucket: %w", err)
	}
	return kv.Values(es), nil
}

// Watch calls fn at each change made after the watch started (not for the
// configurations already there: List reads those), until ctx ends.
func (s *Store) Watch(ctx context.Context, fn func()) error {
	initial := true
	err := kv.Watch(ctx, s.b, func(_ kv.Change[Config], initialDone bool) {
		switch {
		case initialDone:
			initial = false
		case !initial:
			fn()
		}
	})
	if err != nil {
		return fmt.Errorf("tenantbucket: %w", err)
	}
	return nil
}
