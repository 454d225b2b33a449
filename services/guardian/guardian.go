// Package guardian is the model foundry's gate: it scans every model version
// put in the object store (uploads and hub pulls) and records a verdict in
// the catalog, and it mirrors hub repositories into the object store
// (pinned to a commit, verified against the hub's LFS hashes) so that they
// take the same scanning path.
//
// Both halves are durable JetStream consumers on the MODELS stream: the
// scanner on ModelUploadedV1 (durable "guardian-scan"), the mirror on
// ModelPullRequestedV1 (durable "guardian-mirror"). The scanner is
// fail-closed: any error while reading or scanning a version rejects it with
// a typed reason; nothing is ever published by default.
package guardian

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/pkg/tenantbucket"
	"github.com/aiforge/aiforge/services/guardian/bucket"
	"github.com/aiforge/aiforge/services/guardian/hub"
	"github.com/aiforge/aiforge/services/guardian/oci"
	"github.com/aiforge/aiforge/services/guardian/scan"
)

// Reason codes of the guardian itself, beside those of package scan.
const (
	CodeFileMissing    = "file_missing"    // a file of the upload is not in the object store
	CodeUnexpectedFile = "unexpected_file" // the version's prefix holds a file the upload did not list
	CodePrefixMismatch = "prefix_mismatch" // the event's prefix is not the catalog's
	CodeInternal       = "scan_internal"   // the scanner failed (a panic); fail-closed
	CodeHubError       = "hub_error"       // the hub refused or failed a pull
	CodeStoreError     = "store_error"     // the object store failed during a pull
	CodeCatalogRefused = "catalog_refused" // the catalog refused the pull's version (e.g. a name of another kind)
)

// DefaultHubURL is the hub the mirror pulls from.
const DefaultHubURL = "https://huggingface.co"

// DefaultHubRedirectHosts are the CDN hosts huggingface.co redirects
// downloads to.
var DefaultHubRedirectHosts = []string{
	"cdn-lfs.hf.co", "cdn-lfs-us-1.hf.co", "cdn-lfs-eu-1.hf.co",
	"cdn-lfs.huggingface.co", "cdn-lfs-us-1.huggingface.co", "cdn-lfs-eu-1.huggingface.co",
	"cas-bridge.xethub.hf.co",
}

// Config configures the guardian.
type Config struct {
	// ScratchDir holds temporary copies of objects that the store cannot
	// read at random (S3). Default os.TempDir().
	ScratchDir string
	// HubURL is the hub the mirror pulls from. Default DefaultHubURL.
	HubURL string
	// HubToken authenticates the mirror against gated and private
	// repositories. It is sent to HubURL's host only and never appears in
	// logs, events, errors or the catalog.
	HubToken string
	// HubRedirectHosts are the hosts a hub download may be redirected to.
	// Default DefaultHubRedirectHosts.
	HubRedirectHosts []string
	// ScanAckWait is how long a scan's message stays leased without a word
	// from its scanner, which extends the lease every third of it while
	// scanning: a guardian that dies mid-scan has the version scanned again
	// after it. Default 1m.
	ScanAckWait time.Duration
	// MirrorAckWait is how long a pull may go without progress: while bytes
	// flow the pull extends its lease (events.InProgress) at every progress
	// update; a pull stalled longer is redelivered and resumes, skipping the
	// files already stored. Default 2m.
	MirrorAckWait time.Duration
	// MaxDeliver is how often a transient failure (bus, catalog) is retried
	// before the event is dead-lettered. Default 8.
	MaxDeliver int
	// ProgressEvery throttles the catalog's progress updates during a pull.
	// Default 2s.
	ProgressEvery time.Duration
	// OCI configures pulls of OCI artifacts (ocipull.go).
	OCI OCIConfig
	// Buckets tunes the watcher of the tenants' model buckets (package
	// bucket; PollInterval default 30s).
	Buckets bucket.Config
}

// Validate reports every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.ScanAckWait < 0 || c.MirrorAckWait < 0 || c.ProgressEvery < 0 || c.MaxDeliver < 0 {
		errs = append(errs, errors.New("durations and MaxDeliver must not be negative"))
	}
	if c.MirrorAckWait > 0 && c.ProgressEvery >= c.MirrorAckWait {
		errs = append(errs, errors.New("ProgressEvery must be shorter than MirrorAckWait: progress updates extend a pull's lease"))
	}
	if strings.ContainsAny(c.OCI.Username+c.OCI.Password, "\r\n\x00") {
		errs = append(errs, errors.New("the OCI registry credentials contain invalid characters"))
	}
	if strings.ContainsAny(c.HubToken, "\r\n\x00") {
		errs = append(errs, errors.New("the hub token contains invalid characters"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("guardian: config: %w", err)
	}
	return nil
}

// Deps are the guardian's collaborators.
type Deps struct {
	JS      jetstream.JetStream
	Objects objstore.Store
	Logger  *slog.Logger
	// HTTPClient is used for the hub; default http.DefaultClient's
	// transport.
	HTTPClient *http.Client
	// Registerer, when set, receives the metrics of the service's
	// consumers (events.NewConsumerMetrics).
	Registerer prometheus.Registerer
	// SecretsKey opens the sealed credentials of the tenants' model
	// buckets; nil: they are not watched (each one is reported).
	SecretsKey *sealed.PrivateKey
	// BucketTransport, when set, carries the requests to tenants' buckets
	// (tests).
	BucketTransport http.RoundTripper
}

// Service scans model versions and mirrors hub repositories.
type Service struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	hub  *hub.Client
	oci  *oci.Client
	// metrics are the consumers'; nil without Deps.Registerer.
	metrics *events.ConsumerMetrics

	mu      sync.Mutex
	cat     *catalog.Store
	buckets *bucket.Watcher
}

// New validates cfg and deps and builds the service.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.JS == nil || deps.Objects == nil {
		return nil, errors.New("guardian: Deps.JS and Deps.Objects are required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ScratchDir == "" {
		cfg.ScratchDir = os.TempDir()
	}
	if cfg.HubURL == "" {
		cfg.HubURL = DefaultHubURL
	}
	if cfg.HubRedirectHosts == nil {
		cfg.HubRedirectHosts = DefaultHubRedirectHosts
	}
	if cfg.ScanAckWait == 0 {
		cfg.ScanAckWait = time.Minute
	}
	if cfg.MirrorAckWait == 0 {
		cfg.MirrorAckWait = 2 * time.Minute
	}
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = 8
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = 2 * time.Second
	}
	log := deps.Logger.With("service", "guardian")
	hc, err := hub.New(hub.Config{
		BaseURL: cfg.HubURL, Token: cfg.HubToken, AllowedRedirectHosts: cfg.HubRedirectHosts,
		HTTPClient: deps.HTTPClient, UserAgent: "aiforge-guardian/1", Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("guardian: %w", err)
	}
	oc, err := newOCIClient(cfg.OCI, deps.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("guardian: %w", err)
	}
	var cm *events.ConsumerMetrics
	if deps.Registerer != nil {
		var err error
		if cm, err = events.NewConsumerMetrics(deps.Registerer); err != nil {
			return nil, fmt.Errorf("%s: metrics: %w", "guardian", err)
		}
	}
	return &Service{cfg: cfg, deps: deps, log: log, hub: hc, oci: oc, metrics: cm}, nil
}

// startErr is what Run returns when its start failed: nothing when ctx
// ended meanwhile (a stop during the start is not a failure).
func (s *Service) startErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("guardian: %w", err)
}

// Run consumes uploads (scanner) and pull requests (mirror) until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	cat, err := catalog.Open(ctx, s.deps.JS)
	if err != nil {
		return s.startErr(ctx, err)
	}
	s.mu.Lock()
	s.cat = cat
	s.mu.Unlock()

	scanReg := events.NewRegistry(func() events.Event { return &events.ModelUploadedV1{} })
	scanner, err := events.NewConsumer(s.deps.JS, scanReg, events.ConsumerConfig{
		Stream: events.StreamModels, Durable: "guardian-scan", MaxDeliver: s.cfg.MaxDeliver, Logger: s.log,
		AckWait: s.cfg.ScanAckWait, MaxAckPending: 16, Metrics: s.metrics,
		FilterSubjects: []string{events.ModelsUploadedAll},
	}, func(ctx context.Context, _ events.Envelope, ev events.Event) error {
		return s.handleUploaded(ctx, ev.(*events.ModelUploadedV1))
	})
	if err != nil {
		return s.startErr(ctx, err)
	}
	mirrorReg := events.NewRegistry(func() events.Event { return &events.ModelPullRequestedV1{} })
	mirror, err := events.NewConsumer(s.deps.JS, mirrorReg, events.ConsumerConfig{
		Stream: events.StreamModels, Durable: "guardian-mirror", MaxDeliver: s.cfg.MaxDeliver, Logger: s.log,
		AckWait: s.cfg.MirrorAckWait, MaxAckPending: 4, Metrics: s.metrics,
		FilterSubjects: []string{events.ModelsPullRequestedAll},
	}, func(ctx context.Context, _ events.Envelope, ev events.Event) error {
		return s.handlePull(ctx, ev.(*events.ModelPullRequestedV1))
	})
	if err != nil {
		return s.startErr(ctx, err)
	}
	configs, err := tenantbucket.OpenStore(ctx, s.deps.JS)
	if err != nil {
		return s.startErr(ctx, err)
	}
	buckets, err := bucket.New(s.cfg.Buckets, bucket.Deps{JS: s.deps.JS, Objects: s.deps.Objects, Catalog: cat,
		Configs: configs, Reject: s.reject, SecretsKey: s.deps.SecretsKey, Logger: s.log, Transport: s.deps.BucketTransport})
	if err != nil {
		return s.startErr(ctx, err)
	}
	s.mu.Lock()
	s.buckets = buckets
	s.mu.Unlock()
	errs := make(chan error, 3)
	go func() { errs <- scanner.Run(ctx) }()
	go func() { errs <- mirror.Run(ctx) }()
	go func() { errs <- buckets.Run(ctx) }()
	return errors.Join(<-errs, <-errs, <-errs)
}

func (s *Service) catalog() *catalog.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cat
}

// holdLease extends the handler's lease (events.InProgress) every period
// until the returned function is called.
func (s *Service) holdLease(ctx context.Context, every time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := events.InProgress(ctx); err != nil {
					s.log.Debug("extending a scan's lease", "err", err)
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// VerdictID is the event id of the verdict on a version: redelivered scans
// publish the same id, which JetStream deduplicates.
func VerdictID(name string, version int) string {
	return fmt.Sprintf("verdict-%s-v%d", name, version)
}

func (s *Service) handleUploaded(ctx context.Context, ev *events.ModelUploadedV1) error {
	log := s.log.With("model", ev.Name, "version", ev.Version)
	cat := s.catalog()
	entry, err := cat.Get(ctx, ev.Name)
	if errors.Is(err, catalog.ErrNotFound) {
		log.Warn("upload of a model the catalog does not know; ignored")
		return nil
	}
	if err != nil {
		return err
	}
	v, ok := entry.Find(ev.Version)
	if !ok {
		log.Warn("upload of a version the catalog does not know; ignored")
		return nil
	}
	if v.Status == catalog.StatusPublished || v.Status == catalog.StatusRejected {
		// Redelivery after the verdict was published and recorded.
		log.Debug("version already has a verdict", "status", v.Status)
		return nil
	}
	if v.Status != catalog.StatusScanning {
		_, err := cat.UpdateVersion(ctx, ev.Name, ev.Version, func(v *catalog.Version) error {
			v.Status = catalog.StatusScanning
			return nil
		})
		if errors.Is(err, catalog.ErrConflict) {
			return nil
		}
		if err != nil {
			return err
		}
	}

	// A scan reads every byte of the version (many GB for a large model):
	// keep the message leased while it runs. A scan whose process dies is
	// redelivered after ScanAckWait.
	stopLease := s.holdLease(ctx, s.cfg.ScanAckWait/3)
	verdict := s.scanVersion(ctx, ev, v.Prefix, entry.Kind)
	stopLease()
	if err := ctx.Err(); err != nil {
		return err // interrupted, not a verdict: retried
	}
	if _, err := events.Publish(ctx, s.deps.JS, verdict,
		events.Envelope{ID: VerdictID(ev.Name, ev.Version), Source: "guardian"}); err != nil {
		return fmt.Errorf("guardian: publish verdict: %w", err)
	}
	if _, err := cat.ApplyVerdict(ctx, verdict); err != nil {
		return fmt.Errorf("guardian: record verdict: %w", err)
	}
	log.Info("model version scanned", "status", verdict.Status, "reasons", len(verdict.Reasons),
		"parameters", verdict.Parameters, "license", verdict.License)
	return nil
}

// scanVersion scans the files of ev under prefix and returns the verdict.
// It is fail-closed: every problem is a reason, and a panic a rejection.
func (s *Service) scanVersion(ctx context.Context, ev *events.ModelUploadedV1, prefix, kind string) (out events.ModelVerdictV2) {
	out = events.ModelVerdictV2{ModelVerdictV1: events.ModelVerdictV1{Name: ev.Name, Version: ev.Version, Files: ev.Files, ScannedAt: time.Now().UTC(), License: scan.LicenseNeedsReview}}
	var reasons []events.ModelReason
	reject := func(code, file, msg string) {
		reasons = append(reasons, events.ModelReason{Code: code, File: file, Message: msg})
	}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("scanner panic; rejecting", "model", ev.Name, "version", ev.Version, "panic", r)
			reasons = append(reasons, events.ModelReason{Code: CodeInternal, Message: fmt.Sprintf("the scanner failed: %v", r)})
		}
		out.Reasons = reasons
		if len(reasons) == 0 {
			out.Status = events.VerdictPublished
		} else {
			out.Status = events.VerdictRejected
			out.Parameters, out.DTypes, out.Format = 0, nil, ""
		}
	}()

	if ev.Prefix != prefix {
		reject(CodePrefixMismatch, "", fmt.Sprintf("the upload names prefix %q, the catalog %q", ev.Prefix, prefix))
		return out
	}
	want := map[string]events.ModelFile{}
	for _, f := range ev.Files {
		if _, dup := want[f.Path]; dup {
			reject(scan.CodeReadError, f.Path, "file listed twice in the upload")
			continue
		}
		want[f.Path] = f
	}
	present := map[string]int64{}
	for info, err := range s.deps.Objects.List(ctx, prefix) {
		if err != nil {
			reject(scan.CodeReadError, "", "listing the object store: "+err.Error())
			return out
		}
		rel, ok := relPath(prefix, info.Key)
		if !ok {
			continue
		}
		if _, listed := want[rel]; !listed {
			reject(CodeUnexpectedFile, rel, "the object store holds a file the upload did not list")
			continue
		}
		present[rel] = info.Size
	}
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if _, ok := present[p]; !ok {
			reject(CodeFileMissing, p, "the file is not in the object store")
		}
	}

	fsys := newObjFS(ctx, s.deps.Objects, prefix, s.cfg.ScratchDir, present)
	v := scanDir(ctx, fsys, ev.Manifest, kind, s.cfg.ScratchDir)
	for _, r := range v.Reasons {
		reject(r.Code, r.File, r.Message)
	}
	// What the store computed while writing against what is there now: a
	// difference means the object changed after the upload (tampering).
	scanned := map[string]scan.FileReport{}
	for _, f := range v.Files {
		scanned[f.Path] = f
	}
	for _, p := range paths {
		f, ok := scanned[p]
		if !ok {
			continue // reported missing or unreadable above
		}
		w := want[p]
		if !strings.EqualFold(f.SHA256, w.SHA256) || f.Size != w.Size {
			reject(scan.CodeHashMismatch, p, fmt.Sprintf("the object changed after upload: sha256 %s (%d bytes), the upload recorded %s (%d bytes)", f.SHA256, f.Size, w.SHA256, w.Size))
		}
	}
	out.License, out.LicenseName, out.LicenseLink = v.License, v.LicenseName, v.LicenseLink
	out.Parameters = v.Params
	out.DTypes, out.Format = v.DTypes, v.Format
	out.ChatTemplate, out.ChatTemplateTruncated = v.ChatTemplate, v.ChatTemplateTruncated
	return out
}

// scanDir runs the scanner library on a version's files.
func scanDir(ctx context.Context, fsys *objFS, manifest map[string]string, kind, scratch string) scan.Verdict {
	return scan.ScanDirWith(ctx, fsys, scan.Options{Manifest: manifest, Kind: kind, ScratchDir: scratch})
}
