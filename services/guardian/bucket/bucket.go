// Package bucket imports model folders from tenants' model buckets: the
// guardian polls each configured S3 prefix (pkg/tenantbucket), and a
// folder "<prefix><folder>/" whose manifest (ManifestName) is new or
// changed (a new ETag) becomes a new catalog version of that tenant's
// model "<tenant>/<name>". Its files are copied into the object store
// under the version's prefix while their sizes and SHA-256 are checked
// against the manifest, and the version is handed to the scanner with a
// ModelUploadedV1, like an upload. A folder that breaks the rules (a hash
// or size mismatch, a missing, unlisted or unsafely named file, too many
// or too large files, a bad manifest) becomes a rejected version with
// typed reasons, once per manifest ETag.
//
// What was done is remembered per folder in events.BucketTenantBucketFolders
// (the manifest ETag, the catalog version, the outcome), so a restart
// neither imports a folder twice nor misses one; a folder that failed for
// a transient reason (S3 or the bus down) is tried again at the next poll.
// The credentials are opened from their sealed form for each poll and
// never logged, stored in clear or put in events or errors.
package bucket

import (
	"context"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/netguard"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/pkg/tenantbucket"
)

// Reason codes of a rejected bucket folder.
const (
	CodeManifestInvalid = "manifest_invalid" // the manifest is not valid JSON of the documented shape
	CodeUnsafePath      = "unsafe_path"      // a listed or present file's path is not a safe relative path
	CodeFileMissing     = "file_missing"     // a file the manifest lists is not in the folder
	CodeUnexpectedFile  = "unexpected_file"  // the folder holds a file the manifest does not list
	CodeSizeMismatch    = "size_mismatch"    // a file's size is not the manifest's
	CodeHashMismatch    = "hash_mismatch"    // a file's SHA-256 is not the manifest's
	CodeTooLarge        = "too_large"        // a file or the folder is over the size limit
	CodeTooManyFiles    = "too_many_files"   // the folder holds more files than allowed
	CodeCatalogRefused  = "catalog_refused"  // the catalog refused the version (another owner, another kind)
	CodeSuperseded      = "superseded"       // the manifest changed before the version was imported
)

// Folder statuses.
const (
	FolderImporting = "importing" // claimed by a guardian, files being copied
	FolderImported  = "imported"  // handed to the scanner
	FolderRejected  = "rejected"  // rejected for this manifest ETag
	FolderFailed    = "failed"    // a transient failure; tried again at the next poll
)

// Defaults.
const (
	DefaultPollInterval     = 30 * time.Second
	DefaultMaxListObjects   = 100_000
	DefaultMaxFiles         = 1000
	DefaultMaxFileBytes     = 256 << 30
	DefaultMaxVersionBytes  = 2 << 40
	DefaultMaxManifestBytes = 1 << 20
	DefaultLeaseTTL         = 15 * time.Minute
	DefaultNotifyInterval   = 10 * time.Second
)

// Config tunes the watcher.
type Config struct {
	// PollInterval is how often every tenant's prefix is listed; a
	// configuration change lists at once. Default DefaultPollInterval.
	PollInterval time.Duration
	// MaxListObjects bounds the keys listed per tenant and poll; past it
	// the listing stops (the folders after it wait).
	MaxListObjects int
	Limits
	// StallTimeout is how long a file's copy may go without a byte from the
	// tenant's S3 before it is abandoned (and tried again at the next
	// poll); ListTimeout bounds one tenant's listing and the manifest's
	// read. Defaults 2m.
	StallTimeout time.Duration
	ListTimeout  time.Duration
	// LeaseTTL is how long a folder claimed by one guardian replica is
	// left to it before another takes it over (a replica that died mid-way).
	LeaseTTL time.Duration
	// Replica names this guardian in its claims. Default: random.
	Replica string
	// NotifyInterval is the least time between two listings of one
	// tenant's bucket that its S3 event notifications ask for: a tenant
	// sending a flood of them has its own bucket listed once per interval,
	// and no other tenant's. Default DefaultNotifyInterval.
	NotifyInterval time.Duration
}

// Deps are the watcher's collaborators.
type Deps struct {
	JS      jetstream.JetStream
	Objects objstore.Store
	Catalog *catalog.Store
	Configs *tenantbucket.Store
	// Reject publishes and records a rejected verdict on a version (the
	// guardian's, so that a version has one verdict id whoever rejects it).
	Reject func(ctx context.Context, name string, version int, files []catalog.File, reasons ...events.ModelReason) error
	// SecretsKey opens the sealed credentials; nil: no tenant bucket is
	// read (each is reported once).
	SecretsKey *sealed.PrivateKey
	Logger     *slog.Logger
	// Transport, when set, carries the S3 requests (tests); by default a
	// transport that never dials a link-local or metadata address
	// (netguard), whatever the tenant's endpoint resolves to.
	Transport http.RoundTripper
}

// Watcher polls the tenants' model buckets.
type Watcher struct {
	cfg     Config
	d       Deps
	log     *slog.Logger
	folders jetstream.KeyValue
	trigger chan struct{}
	passes  atomic.Uint64

	// S3 event notifications, per tenant: the subjects waiting for a
	// listing, and when each tenant's bucket was last listed for one.
	notify        chan struct{}
	notifyMu      sync.Mutex
	pending       map[string]bool
	notifiedAt    map[string]time.Time
	notifications atomic.Uint64
	notifiedPolls atomic.Uint64

	mu     sync.Mutex
	warned map[string]string // tenant -> the last problem reported
}

// New validates cfg and deps and builds the watcher.
func New(cfg Config, d Deps) (*Watcher, error) {
	if d.JS == nil || d.Objects == nil || d.Catalog == nil || d.Configs == nil || d.Reject == nil {
		return nil, errors.New("bucket: Deps.JS, Objects, Catalog, Configs and Reject are required")
	}
	if cfg.PollInterval < 0 || cfg.MaxListObjects < 0 || cfg.MaxFiles < 0 || cfg.MaxFileBytes < 0 || cfg.MaxVersionBytes < 0 || cfg.MaxManifestBytes < 0 || cfg.LeaseTTL < 0 {
		return nil, errors.New("bucket: config values must not be negative")
	}
	if d.Transport == nil {
		d.Transport = netguard.Transport()
	}
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.MaxListObjects == 0 {
		cfg.MaxListObjects = DefaultMaxListObjects
	}
	if cfg.MaxFiles == 0 {
		cfg.MaxFiles = DefaultMaxFiles
	}
	def(&cfg.MaxFileBytes, DefaultMaxFileBytes)
	def(&cfg.MaxVersionBytes, DefaultMaxVersionBytes)
	def(&cfg.MaxManifestBytes, DefaultMaxManifestBytes)
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = 2 * time.Minute
	}
	if cfg.ListTimeout <= 0 {
		cfg.ListTimeout = 2 * time.Minute
	}
	if cfg.NotifyInterval <= 0 {
		cfg.NotifyInterval = DefaultNotifyInterval
	}
	if cfg.Replica == "" {
		cfg.Replica = fmt.Sprintf("guardian-%d", time.Now().UnixNano())
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return &Watcher{cfg: cfg, d: d, log: d.Logger.With("component", "tenant-buckets"),
		trigger: make(chan struct{}, 1), warned: map[string]string{},
		notify: make(chan struct{}, 1), pending: map[string]bool{}, notifiedAt: map[string]time.Time{}}, nil
}

// Passes counts the completed polls of every tenant (tests wait on it).
func (w *Watcher) Passes() uint64 { return w.passes.Load() }

// Notifications counts the S3 event notifications received, and
// NotifiedPolls the tenant listings they led to (tests wait on them).
func (w *Watcher) Notifications() uint64 { return w.notifications.Load() }
func (w *Watcher) NotifiedPolls() uint64 { return w.notifiedPolls.Load() }

// Trigger asks for a poll of every tenant now (a configuration change).
func (w *Watcher) Trigger() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// notified takes an S3 event notification (events.ModelBucketNotify of
// a tenant): that tenant's bucket is listed soon.
func (w *Watcher) notified(subject string) {
	w.notifyMu.Lock()
	w.pending[subject] = true
	w.notifyMu.Unlock()
	w.notifications.Add(1)
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// pollNotified lists the buckets of the tenants whose notifications are
// pending, each at most once per NotifyInterval; a tenant notified again
// sooner waits for the rest of its interval.
func (w *Watcher) pollNotified(ctx context.Context) {
	cfgs, err := w.d.Configs.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("reading the tenant bucket configurations", "err", err)
		}
		return
	}
	now := time.Now()
	var due []tenantbucket.Config
	var wait time.Duration
	w.notifyMu.Lock()
	for _, c := range cfgs {
		subj := events.ModelBucketNotify(c.Tenant)
		if !w.pending[subj] {
			continue
		}
		if left := w.cfg.NotifyInterval - now.Sub(w.notifiedAt[subj]); left > 0 {
			if wait == 0 || left < wait {
				wait = left
			}
			continue
		}
		delete(w.pending, subj)
		w.notifiedAt[subj] = now
		due = append(due, c)
	}
	for subj := range w.pending {
		if !slices.ContainsFunc(cfgs, func(c tenantbucket.Config) bool { return events.ModelBucketNotify(c.Tenant) == subj }) {
			delete(w.pending, subj) // a tenant with no bucket
		}
	}
	w.notifyMu.Unlock()
	if wait > 0 {
		time.AfterFunc(wait, func() {
			select {
			case w.notify <- struct{}{}:
			default:
			}
		})
	}
	for _, c := range due {
		if ctx.Err() != nil {
			return
		}
		w.pollTenant(ctx, c)
		w.notifiedPolls.Add(1)
	}
}

// Run polls until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	var err error
	if w.folders, err = w.d.JS.KeyValue(ctx, events.BucketTenantBucketFolders); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("bucket: bucket %s: %w", events.BucketTenantBucketFolders, err)
	}
	watchDone := make(chan error, 1)
	go func() {
		for {
			err := w.d.Configs.Watch(ctx, w.Trigger)
			if ctx.Err() != nil {
				watchDone <- nil
				return
			}
			w.log.Warn("watching the tenant bucket configurations; starting again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	// S3 event notifications reaching the edge ask for a listing of their
	// tenant's bucket now.
	if sub, err := w.d.JS.Conn().Subscribe(events.ModelBucketNotifyAll, func(m *nats.Msg) { w.notified(m.Subject) }); err != nil {
		w.log.Warn("S3 event notifications will not speed up polls", "err", err)
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	t := time.NewTicker(w.cfg.PollInterval)
	defer t.Stop()
	w.pollAll(ctx)
	for {
		select {
		case <-ctx.Done():
			return <-watchDone
		case <-t.C:
			w.pollAll(ctx)
		case <-w.trigger:
			w.pollAll(ctx)
		case <-w.notify:
			w.pollNotified(ctx)
		}
	}
}

func (w *Watcher) pollAll(ctx context.Context) {
	defer w.passes.Add(1)
	cfgs, err := w.d.Configs.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("reading the tenant bucket configurations", "err", err)
		}
		return
	}
	for _, c := range cfgs {
		if ctx.Err() != nil {
			return
		}
		w.pollTenant(ctx, c)
	}
}

// warnOnce reports a tenant's problem once until it changes.
func (w *Watcher) warnOnce(tenant, problem string, args ...any) {
	w.mu.Lock()
	same := w.warned[tenant] == problem
	w.warned[tenant] = problem
	w.mu.Unlock()
	if !same && problem != "" {
		w.log.Warn(problem, append([]any{"tenant", tenant}, args...)...)
	}
}

// tenantClient is one tenant's bucket, opened for one poll.
type tenantClient struct {
	c      tenantbucket.Config
	s3     *minio.Client
	redact func(string) string
}

func (w *Watcher) open(c tenantbucket.Config) (*tenantClient, error) {
	cred, err := tenantbucket.Open(w.d.SecretsKey, c)
	if err != nil {
		return nil, err
	}
	host, secure, err := c.Host()
	if err != nil {
		return nil, err
	}
	lookup := minio.BucketLookupAuto
	if c.PathStyle {
		lookup = minio.BucketLookupPath
	}
	cl, err := minio.New(host, &minio.Options{
		Creds: credentials.NewStaticV4(cred.AccessKeyID, cred.SecretAccessKey, ""), Secure: secure,
		Region: c.Region, BucketLookup: lookup, Transport: w.d.Transport,
		// A failing bucket is tried again at the next poll: a few quick
		// retries here, not minutes of them holding up the other tenants.
		MaxRetries: 3,
	})
	redact := func(s string) string {
		for _, secret := range []string{cred.SecretAccessKey, cred.AccessKeyID} {
			if len(secret) >= 4 {
				s = strings.ReplaceAll(s, secret, "[REDACTED]")
			}
		}
		return s
	}
	if err != nil {
		return nil, errors.New(redact(err.Error()))
	}
	return &tenantClient{c: c, s3: cl, redact: redact}, nil
}

// listing is what one poll saw of a folder.
type listing struct {
	folder       string // the folder's key prefix, ending in "/"
	manifestETag string
	files        map[string]int64 // path relative to the folder -> size
	unsafe       []string
	count        int
}

func (w *Watcher) pollTenant(ctx context.Context, c tenantbucket.Config) {
	tc, err := w.open(c)
	if err != nil {
		w.warnOnce(c.Tenant, "tenant model bucket not readable: its credentials cannot be opened", "err", err)
		return
	}
	folders := map[string]*listing{}
	last, n, truncated := "", 0, false
	lctx, cancel := context.WithTimeout(ctx, w.cfg.ListTimeout)
	for oi := range tc.s3.ListObjectsIter(lctx, c.Bucket, minio.ListObjectsOptions{Prefix: c.Prefix, Recursive: true}) {
		if oi.Err != nil {
			cancel()
			w.warnOnce(c.Tenant, "tenant model bucket not readable: listing failed", "bucket", c.Bucket, "prefix", c.Prefix, "err", tc.redact(oi.Err.Error()))
			return
		}
		if n++; n > w.cfg.MaxListObjects {
			truncated = true
			break
		}
		rel := strings.TrimPrefix(oi.Key, c.Prefix)
		i := strings.IndexByte(rel, '/')
		if i <= 0 {
			continue // a file beside the folders, or a leading "/"
		}
		name, path := rel[:i], rel[i+1:]
		l := folders[name]
		if l == nil {
			l = &listing{folder: c.Prefix + name + "/", files: map[string]int64{}}
			folders[name] = l
		}
		last = name
		switch {
		case path == "":
			// a folder marker some consoles write
		case path == ManifestName:
			l.manifestETag = strings.Trim(oi.ETag, `"`)
		default:
			if l.count++; l.count > w.cfg.MaxFiles+1 {
				continue // counted, not kept
			}
			if !safePath(path) {
				l.unsafe = append(l.unsafe, path)
				continue
			}
			l.files[path] = oi.Size
		}
	}
	cancel()
	if truncated {
		w.warnOnce(c.Tenant, "tenant model bucket listing truncated: more objects under the prefix than allowed per poll", "limit", w.cfg.MaxListObjects)
		delete(folders, last) // possibly seen in part
	} else {
		w.warnOnce(c.Tenant, "")
	}
	names := make([]string, 0, len(folders))
	for name, l := range folders {
		if l.manifestETag != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		w.folder(ctx, tc, name, folders[name])
	}
}

var keyEnc = base32.StdEncoding.WithPadding(base32.NoPadding)

// FolderKey is the KV key of a folder's record.
func FolderKey(tenant, bucket, folder string) string {
	return "f." + tenant + "." + strings.ToLower(keyEnc.EncodeToString([]byte(bucket+"\x00"+folder)))
}

// Folder is the guardian's record of one folder of a tenant's bucket.
type Folder struct {
	Tenant string `json:"tenant"`
	Bucket string `json:"bucket"`
	Folder string `json:"folder"`
	// ETag is the manifest ETag this record is about.
	ETag    string `json:"etag"`
	Status  string `json:"status"`
	Model   string `json:"model,omitempty"`
	Version int    `json:"version,omitempty"`
	// Reasons say why a rejected folder was rejected.
	Reasons []events.ModelReason `json:"reasons,omitempty"`
	// Attempts counts the transient failures of this ETag; Error is the
	// last one.
	Attempts   int       `json:"attempts,omitempty"`
	Error      string    `json:"error,omitempty"`
	Owner      string    `json:"owner,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// errSkip: the folder needs nothing from this replica now.
var errSkip = errors.New("skip")

// claim takes the folder for etag, or errSkip when it is done or another
// replica holds it. superseded is the record of an earlier manifest whose
// import never finished: its version is to be rejected.
func (w *Watcher) claim(ctx context.Context, key string, tc *tenantClient, l *listing) (f Folder, superseded *Folder, err error) {
	now := time.Now().UTC()
	f, _, err = kv.Update(ctx, w.folders, key, func(f *Folder, exists bool) error {
		superseded = nil
		if exists && f.Status == FolderImporting && f.Owner != w.cfg.Replica && now.Before(f.LeaseUntil) {
			return errSkip // another replica is at it (this manifest or an earlier one)
		}
		if exists && f.ETag == l.manifestETag {
			if f.Status == FolderImported || f.Status == FolderRejected {
				return errSkip
			}
		} else {
			if exists && f.Version > 0 && f.Status != FolderImported && f.Status != FolderRejected {
				prev := *f
				superseded = &prev
			}
			*f = Folder{Tenant: tc.c.Tenant, Bucket: tc.c.Bucket, Folder: l.folder, ETag: l.manifestETag}
		}
		f.Status, f.Owner, f.LeaseUntil, f.UpdatedAt = FolderImporting, w.cfg.Replica, now.Add(w.cfg.LeaseTTL), now
		return nil
	})
	return f, superseded, err
}

func (w *Watcher) record(ctx context.Context, key string, fn func(f *Folder)) error {
	_, _, err := kv.Update(ctx, w.folders, key, func(f *Folder, exists bool) error {
		fn(f)
		f.UpdatedAt = time.Now().UTC()
		return nil
	})
	return err
}

// folder imports one folder whose manifest is new or changed.
func (w *Watcher) folder(ctx context.Context, tc *tenantClient, name string, l *listing) {
	key := FolderKey(tc.c.Tenant, tc.c.Bucket, l.folder)
	log := w.log.With("tenant", tc.c.Tenant, "bucket", tc.c.Bucket, "folder", l.folder, "etag", l.manifestETag)
	f, superseded, err := w.claim(ctx, key, tc, l)
	if errors.Is(err, errSkip) {
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("claiming a bucket folder", "err", err)
		}
		return
	}
	if superseded != nil {
		// An earlier manifest's import that never finished: its version
		// would wait forever.
		err := w.d.Reject(ctx, superseded.Model, superseded.Version, nil, events.ModelReason{Code: CodeSuperseded,
			Message: "the folder's manifest changed (ETag " + l.manifestETag + ") before this version was imported"})
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			log.Warn("rejecting a superseded bucket version", "model", superseded.Model, "version", superseded.Version, "err", err)
		}
	}
	out, err := w.importFolder(ctx, tc, name, l, &f, key, log)
	if err != nil {
		if ctx.Err() != nil {
			return // a stop, not a failure: the lease runs out, the next start resumes
		}
		msg := tc.redact(err.Error())
		log.Warn("bucket folder import failed; trying again at the next poll", "attempt", f.Attempts+1, "err", msg)
		if rerr := w.record(ctx, key, func(r *Folder) {
			r.Status, r.Attempts, r.Error, r.Owner, r.LeaseUntil = FolderFailed, r.Attempts+1, msg, "", time.Time{}
		}); rerr != nil {
			log.Warn("recording a bucket folder's failure", "err", rerr)
		}
		return
	}
	if rerr := w.record(ctx, key, func(r *Folder) {
		r.Status, r.Model, r.Version, r.Reasons = out.status, out.model, out.version, out.reasons
		r.Error, r.Owner, r.LeaseUntil = "", "", time.Time{}
	}); rerr != nil {
		log.Warn("recording a bucket folder's outcome", "err", rerr)
	}
	if out.status == FolderRejected {
		log.Warn("bucket folder rejected", "model", out.model, "version", out.version, "reasons", codes(out.reasons))
	} else {
		log.Info("bucket folder stored; scanning", "model", out.model, "version", out.version, "files", out.files, "bytes", out.bytes)
	}
}

func codes(rs []events.ModelReason) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Code
	}
	return out
}

type outcome struct {
	status  string
	model   string
	version int
	reasons []events.ModelReason
	files   int
	bytes   int64
}
