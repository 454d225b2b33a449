// Package catalog is the model catalog kept in JetStream KV: each model name
// maps to its versions (files, source, licence, verdict, dtype summary and
// parameter count), and each served model name to the one catalog version it
// runs (a deployment, with its history so a rollback is one call).
//
// Every change is a compare-and-set on the entry's KV revision, so an edge
// adding a version and the guardian recording a verdict never lose each
// other's writes.
package catalog

import (
	"context"
	"encoding/base32"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
)

// Version statuses. A version is uploading (files arriving), mirroring
// (a hub pull downloading), scanning (with the guardian), then published or
// rejected for good.
const (
	StatusUploading = "uploading"
	StatusMirroring = "mirroring"
	StatusScanning  = "scanning"
	StatusPublished = events.VerdictPublished
	StatusRejected  = events.VerdictRejected
)

// Errors callers map to API answers.
var (
	ErrNotFound = errors.New("catalog: not found")
	ErrInvalid  = errors.New("catalog: invalid")
	ErrConflict = errors.New("catalog: conflict")
)

// File is one file of a version.
type File = events.ModelFile

// Source says where a version came from.
type Source = events.ModelSource

// Reason is one typed cause of a rejection.
type Reason = events.ModelReason

// Progress reports a mirror's download.
type Progress struct {
	FilesDone  int   `json:"files_done"`
	FilesTotal int   `json:"files_total"`
	BytesDone  int64 `json:"bytes_done"`
	BytesTotal int64 `json:"bytes_total"`
}

// Version is one version of a model.
type Version struct {
	Version int      `json:"version"`
	Status  string   `json:"status"`
	Reasons []Reason `json:"reasons"`
	Files   []File   `json:"files"`
	Source  Source   `json:"source"`
	License string   `json:"license,omitempty"`
	// LicenseName and LicenseLink are the model card's license_name and
	// license_link, for the reviewer of a "needs-review" licence.
	LicenseName string           `json:"license_name,omitempty"`
	LicenseLink string           `json:"license_link,omitempty"`
	Parameters  int64            `json:"parameters"`
	DTypes      map[string]int64 `json:"dtypes,omitempty"`
	Format      string           `json:"format,omitempty"`
	// ChatTemplate is kept as text for review and never rendered.
	ChatTemplate          string `json:"chat_template,omitempty"`
	ChatTemplateTruncated bool   `json:"chat_template_truncated,omitempty"`
	// Prefix is where the files are in the object store: the key of a file
	// is Prefix + Path.
	Prefix    string    `json:"prefix"`
	Progress  *Progress `json:"progress,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	ScannedAt time.Time `json:"scanned_at,omitzero"`
}

// Entry is a model name with its versions, oldest first.
type Entry struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	BaseModel string `json:"base_model,omitempty"`
	// Tenant owns the model when it came from that tenant's model bucket
	// (its name is then "<tenant>/..."); empty for the platform's own
	// models (admin uploads, hub pulls). Only the owner adds versions.
	Tenant    string    `json:"tenant,omitempty"`
	Versions  []Version `json:"versions"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Find returns the version numbered n.
func (e *Entry) Find(n int) (*Version, bool) {
	for i := range e.Versions {
		if e.Versions[i].Version == n {
			return &e.Versions[i], true
		}
	}
	return nil, false
}

// LatestPublished returns the newest published version.
func (e *Entry) LatestPublished() (*Version, bool) {
	for i := len(e.Versions) - 1; i >= 0; i-- {
		if e.Versions[i].Status == StatusPublished {
			return &e.Versions[i], true
		}
	}
	return nil, false
}

// FindSource returns the newest version mirrored from repo at commit that is
// not rejected.
func (e *Entry) FindSource(repo, commit string) (*Version, bool) {
	for i := len(e.Versions) - 1; i >= 0; i-- {
		v := &e.Versions[i]
		if v.Source.Type == events.ModelSourceHub && v.Source.Repo == repo && v.Source.Commit == commit && v.Status != StatusRejected {
			return v, true
		}
	}
	return nil, false
}

// DeploymentRecord is one past or present binding of a deployment.
type DeploymentRecord struct {
	Catalog    string    `json:"catalog"`
	Version    int       `json:"version"`
	DeployedAt time.Time `json:"deployed_at"`
}

// Deployment binds a served model name to one catalog version: the answer to
// "which version is in production".
type Deployment struct {
	Model      string    `json:"model"`
	Catalog    string    `json:"catalog"`
	Version    int       `json:"version"`
	DeployedAt time.Time `json:"deployed_at"`
	// History holds earlier bindings, oldest first; Rollback pops the last.
	History []DeploymentRecord `json:"history,omitempty"`
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)

// ValidateName reports whether name can name a catalog entry: 1-128
// characters of letters, digits and ._:/- starting with a letter or digit,
// without "..", "//" or a trailing "/".
func ValidateName(name string) error {
	if !nameRE.MatchString(name) || strings.Contains(name, "..") || strings.Contains(name, "//") || strings.HasSuffix(name, "/") {
		return fmt.Errorf("%w: model name %q must be 1-128 characters of letters, digits and ._:/- (no \"..\", \"//\" or trailing \"/\")", ErrInvalid, name)
	}
	return nil
}

// Prefix is the object store prefix of a version's files.
func Prefix(name string, version int) string {
	return fmt.Sprintf("models/%s/v%d/", url.PathEscape(name), version)
}

var kvEnc = base32.StdEncoding.WithPadding(base32.NoPadding)

// Key is the KV key of a model name (KV keys allow few characters).
func Key(name string) string { return "c." + strings.ToLower(kvEnc.EncodeToString([]byte(name))) }

// Pull statuses.
const (
	PullRequested = "requested"
	PullMirroring = "mirroring"
	// PullDone: the pull has a catalog version, scanning or already there
	// (Skipped); the version's status tells the rest.
	PullDone   = "done"
	PullFailed = "failed"
)

// Pull is the state of one hub pull request.
type Pull struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	Status   string `json:"status"`
	Commit   string `json:"commit,omitempty"`
	// Version is the catalog version the pull created or found (0 until
	// known; a failure before any version was created has none).
	Version int `json:"version,omitempty"`
	// Skipped: the commit was already mirrored; nothing was downloaded.
	Skipped     bool      `json:"skipped,omitempty"`
	Reason      *Reason   `json:"reason,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Store reads and changes the catalog and the deployments.
type Store struct {
	entries     jetstream.KeyValue
	deployments jetstream.KeyValue
	pulls       jetstream.KeyValue
	now         func() time.Time
}

// Open binds to the catalog buckets (events.Ensure creates them).
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	entries, err := js.KeyValue(ctx, events.BucketCatalog)
	if err != nil {
		return nil, fmt.Errorf("catalog: bucket %s: %w", events.BucketCatalog, err)
	}
	deps, err := js.KeyValue(ctx, events.BucketDeployments)
	if err != nil {
		return nil, fmt.Errorf("catalog: bucket %s: %w", events.BucketDeployments, err)
	}
	pulls, err := js.KeyValue(ctx, events.BucketPulls)
	if err != nil {
		return nil, fmt.Errorf("catalog: bucket %s: %w", events.BucketPulls, err)
	}
	return &Store{entries: entries, deployments: deps, pulls: pulls, now: func() time.Time { return time.Now().UTC() }}, nil
}

// Get returns a model's entry.
func (s *Store) Get(ctx context.Context, name string) (Entry, error) {
	e, err := get[Entry](ctx, s.entries, Key(name))
	if err != nil {
		return Entry{}, fmt.Errorf("catalog: model %q: %w", name, err)
	}
	return e, nil
}

// List returns every entry, sorted by name.
func (s *Store) List(ctx context.Context) ([]Entry, error) {
	out, err := list[Entry](ctx, s.entries)
	if err != nil {
		return nil, err
	}
	sortBy(out, func(e Entry) string { return e.Name })
	return out, nil
}

// Update applies fn to a model's entry under compare-and-set, retrying when
// another writer got there first. exists is false for a new entry, which fn
// must fill in (Name is preset). fn may run more than once.
func (s *Store) Update(ctx context.Context, name string, fn func(e *Entry, exists bool) error) (Entry, error) {
	if err := ValidateName(name); err != nil {
		return Entry{}, err
	}
	return update(ctx, s.entries, Key(name), func(e *Entry, exists bool) error {
		if !exists {
			*e = Entry{Name: name, CreatedAt: s.now()}
		}
		if err := fn(e, exists); err != nil {
			return err
		}
		e.UpdatedAt = s.now()
		return nil
	})
}

// AddVersion appends a new version with the next number to a model's entry,
// creating the entry (of kind and base) when it is new. An existing entry
// must have the same kind and base model. v.Version, Prefix and the times
// are set here.
func (s *Store) AddVersion(ctx context.Context, name, kind, base string, v Version) (Version, error) {
	return s.AddOwnedVersion(ctx, "", name, kind, base, v)
}

// AddOwnedVersion is AddVersion for a model owned by tenant ("" is the
// platform): a new entry records the owner, and an existing entry of
// another owner is a conflict, so one tenant's drop can never add a
// version to another tenant's model or to the platform's.
func (s *Store) AddOwnedVersion(ctx context.Context, tenant, name, kind, base string, v Version) (Version, error) {
	if kind == "" {
		kind = events.ModelKindModel
	}
	if kind != events.ModelKindModel && kind != events.ModelKindAdapter {
		return Version{}, fmt.Errorf("%w: kind %q is not model or adapter", ErrInvalid, kind)
	}
	if kind == events.ModelKindAdapter && base == "" {
		return Version{}, fmt.Errorf("%w: an adapter needs a base model", ErrInvalid)
	}
	if kind == events.ModelKindModel && base != "" {
		return Version{}, fmt.Errorf("%w: base_model is for adapters only", ErrInvalid)
	}
	var added Version
	_, err := s.Update(ctx, name, func(e *Entry, exists bool) error {
		if !exists {
			e.Kind, e.BaseModel, e.Tenant = kind, base, tenant
		} else if e.Tenant != tenant {
			return fmt.Errorf("%w: %q belongs to %s; a version cannot be added by %s", ErrConflict, name, ownerDesc(e.Tenant), ownerDesc(tenant))
		} else if e.Kind != kind || e.BaseModel != base {
			return fmt.Errorf("%w: %q is a %s%s; a new version cannot change that", ErrConflict, name, e.Kind, baseDesc(e.BaseModel))
		}
		n := 1
		if k := len(e.Versions); k > 0 {
			n = e.Versions[k-1].Version + 1
		}
		nv := v
		nv.Version = n
		nv.Prefix = Prefix(name, n)
		nv.CreatedAt, nv.UpdatedAt = s.now(), s.now()
		if nv.Status == "" {
			nv.Status = StatusUploading
		}
		e.Versions = append(e.Versions, nv)
		added = nv
		return nil
	})
	return added, err
}

func ownerDesc(tenant string) string {
	if tenant == "" {
		return "the platform"
	}
	return "tenant " + tenant
}

func baseDesc(base string) string {
	if base == "" {
		return ""
	}
	return " of " + base
}

// UpdateVersion applies fn to one version under compare-and-set. A version
// already published or rejected is final: fn is not called and ErrConflict
// is returned.
func (s *Store) UpdateVersion(ctx context.Context, name string, n int, fn func(v *Version) error) (Version, error) {
	var out Version
	_, err := s.Update(ctx, name, func(e *Entry, exists bool) error {
		if !exists {
			return fmt.Errorf("%w: model %q", ErrNotFound, name)
		}
		v, ok := e.Find(n)
		if !ok {
			return fmt.Errorf("%w: model %q version %d", ErrNotFound, name, n)
		}
		if v.Status == StatusPublished || v.Status == StatusRejected {
			return fmt.Errorf("%w: model %q version %d is already %s", ErrConflict, name, n, v.Status)
		}
		if err := fn(v); err != nil {
			return err
		}
		v.UpdatedAt = s.now()
		out = *v
		return nil
	})
	return out, err
}

// ApplyVerdict records the guardian's verdict on a version, of any version
// (a v1 verdict has no licence name or chat template). It is idempotent: a
// verdict already recorded for the version is not an error.
func (s *Store) ApplyVerdict(ctx context.Context, verdict events.ModelVerdict) (Version, error) {
	ev := verdict.Latest()
	var out Version
	_, err := s.Update(ctx, ev.Name, func(e *Entry, exists bool) error {
		if !exists {
			return fmt.Errorf("%w: model %q", ErrNotFound, ev.Name)
		}
		v, ok := e.Find(ev.Version)
		if !ok {
			return fmt.Errorf("%w: model %q version %d", ErrNotFound, ev.Name, ev.Version)
		}
		if v.Status == StatusPublished || v.Status == StatusRejected {
			out = *v
			return nil
		}
		v.Status = ev.Status
		v.Reasons = ev.Reasons
		if len(ev.Files) > 0 {
			v.Files = ev.Files
		}
		v.License, v.Parameters, v.DTypes, v.Format = ev.License, ev.Parameters, ev.DTypes, ev.Format
		v.ChatTemplate, v.ChatTemplateTruncated = ev.ChatTemplate, ev.ChatTemplateTruncated
		v.LicenseName, v.LicenseLink = ev.LicenseName, ev.LicenseLink
		v.ScannedAt = ev.ScannedAt
		v.Progress = nil
		v.UpdatedAt = s.now()
		out = *v
		return nil
	})
	return out, err
}

// Delete removes a model's entry. Deployments of it must be removed first.
func (s *Store) Delete(ctx context.Context, name string) error {
	deps, err := s.Deployments(ctx)
	if err != nil {
		return err
	}
	for _, d := range deps {
		if d.Catalog == name {
			return fmt.Errorf("%w: %q is deployed as %q; delete the deployment first", ErrConflict, name, d.Model)
		}
	}
	if err := kv.Delete(ctx, s.entries, Key(name)); err != nil {
		if errors.Is(err, kv.ErrNotFound) {
			return fmt.Errorf("catalog: model %q: %w", name, ErrNotFound)
		}
		return fmt.Errorf("catalog: delete %q: %w", name, err)
	}
	return nil
}

// Watch calls fn for every entry, first the current ones (then once with
// initialDone), then each change, until ctx ends. Deleted changes carry the
// KV key only.
func (s *Store) Watch(ctx context.Context, fn func(key string, e Entry, deleted, initialDone bool)) error {
	return watch(ctx, s.entries, fn)
}

// Deploy binds a served model name to a published catalog version; the
// previous binding goes to the history.
func (s *Store) Deploy(ctx context.Context, model, catalogName string, version int) (Deployment, error) {
	if model == "" {
		return Deployment{}, fmt.Errorf("%w: model is required", ErrInvalid)
	}
	e, err := s.Get(ctx, catalogName)
	if err != nil {
		return Deployment{}, err
	}
	if version == 0 {
		v, ok := e.LatestPublished()
		if !ok {
			return Deployment{}, fmt.Errorf("%w: %q has no published version", ErrConflict, catalogName)
		}
		version = v.Version
	}
	v, ok := e.Find(version)
	if !ok {
		return Deployment{}, fmt.Errorf("%w: model %q version %d", ErrNotFound, catalogName, version)
	}
	if v.Status != StatusPublished {
		return Deployment{}, fmt.Errorf("%w: %q version %d is %s; only what the guardian published can be deployed", ErrConflict, catalogName, version, v.Status)
	}
	return update(ctx, s.deployments, Key(model), func(d *Deployment, exists bool) error {
		if exists {
			if d.Catalog == catalogName && d.Version == version {
				return nil
			}
			d.History = append(d.History, DeploymentRecord{Catalog: d.Catalog, Version: d.Version, DeployedAt: d.DeployedAt})
		}
		d.Model, d.Catalog, d.Version, d.DeployedAt = model, catalogName, version, s.now()
		return nil
	})
}

// Rollback returns a served model name to its previous binding.
func (s *Store) Rollback(ctx context.Context, model string) (Deployment, error) {
	return update(ctx, s.deployments, Key(model), func(d *Deployment, exists bool) error {
		if !exists {
			return fmt.Errorf("%w: no deployment of %q", ErrNotFound, model)
		}
		if len(d.History) == 0 {
			return fmt.Errorf("%w: %q has no earlier deployment to roll back to", ErrConflict, model)
		}
		prev := d.History[len(d.History)-1]
		d.History = d.History[:len(d.History)-1]
		d.Catalog, d.Version, d.DeployedAt = prev.Catalog, prev.Version, s.now()
		return nil
	})
}

// Deployment returns a served model's deployment.
func (s *Store) Deployment(ctx context.Context, model string) (Deployment, error) {
	d, err := get[Deployment](ctx, s.deployments, Key(model))
	if err != nil {
		return Deployment{}, fmt.Errorf("catalog: deployment of %q: %w", model, err)
	}
	return d, nil
}

// Deployments returns every deployment, sorted by model.
func (s *Store) Deployments(ctx context.Context) ([]Deployment, error) {
	out, err := list[Deployment](ctx, s.deployments)
	if err != nil {
		return nil, err
	}
	sortBy(out, func(d Deployment) string { return d.Model })
	return out, nil
}

// Undeploy removes a served model's deployment.
func (s *Store) Undeploy(ctx context.Context, model string) error {
	if err := kv.Delete(ctx, s.deployments, Key(model)); err != nil {
		if errors.Is(err, kv.ErrNotFound) {
			return fmt.Errorf("catalog: deployment of %q: %w", model, ErrNotFound)
		}
		return fmt.Errorf("catalog: undeploy %q: %w", model, err)
	}
	return nil
}

// WatchDeployments is Watch for deployments.
func (s *Store) WatchDeployments(ctx context.Context, fn func(key string, d Deployment, deleted, initialDone bool)) error {
	return watch(ctx, s.deployments, fn)
}

// UpdatePull applies fn to a pull's record under compare-and-set, creating
// it (with ID set) when it does not exist yet.
func (s *Store) UpdatePull(ctx context.Context, id string, fn func(p *Pull)) (Pull, error) {
	if id == "" || !pullIDRE.MatchString(id) {
		return Pull{}, fmt.Errorf("%w: pull id %q", ErrInvalid, id)
	}
	return update(ctx, s.pulls, id, func(p *Pull, exists bool) error {
		if !exists {
			*p = Pull{ID: id, Status: PullRequested}
		}
		fn(p)
		p.UpdatedAt = s.now()
		return nil
	})
}

var pullIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// GetPull returns a pull's record.
func (s *Store) GetPull(ctx context.Context, id string) (Pull, error) {
	if !pullIDRE.MatchString(id) {
		return Pull{}, fmt.Errorf("catalog: pull %q: %w", id, ErrNotFound)
	}
	p, err := get[Pull](ctx, s.pulls, id)
	if err != nil {
		return Pull{}, fmt.Errorf("catalog: pull %q: %w", id, err)
	}
	return p, nil
}

func get[T any](ctx context.Context, b jetstream.KeyValue, key string) (T, error) {
	v, _, err := kv.Get[T](ctx, b, key)
	if errors.Is(err, kv.ErrNotFound) {
		return v, ErrNotFound
	}
	return v, err
}

func list[T any](ctx context.Context, b jetstream.KeyValue) ([]T, error) {
	es, err := kv.List[T](ctx, b)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	return kv.Values(es), nil
}

// update is kv.Update: errors of fn come back as they are, the store's with
// a "catalog: " prefix.
func update[T any](ctx context.Context, b jetstream.KeyValue, key string, fn func(v *T, exists bool) error) (T, error) {
	var fnErr error
	v, _, err := kv.Update(ctx, b, key, func(v *T, exists bool) error {
		fnErr = fn(v, exists)
		return fnErr
	})
	if err != nil && !errors.Is(err, fnErr) {
		err = fmt.Errorf("catalog: %w", err)
	}
	return v, err
}

// watch is kv.Watch without the values that do not decode (skipped, as
// they always were).
func watch[T any](ctx context.Context, b jetstream.KeyValue, fn func(key string, v T, deleted, initialDone bool)) error {
	err := kv.Watch(ctx, b, func(c kv.Change[T], initialDone bool) {
		if c.Err != nil {
			return
		}
		fn(c.Key, c.Value, c.Deleted, initialDone)
	})
	if err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	return nil
}

func sortBy[T any](s []T, key func(T) string) {
	slices.SortFunc(s, func(a, b T) int { return strings.Compare(key(a), key(b)) })
}
