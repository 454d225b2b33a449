// Package deploy materialises deployments. A deployment binds a served
// model name to one published catalog version. The Manager materialises the
// deployed version of every model it is told is served here into
// Dir/<escaped catalog name>/v<N>/ (sizes and SHA-256 checked against the
// catalog) and points the link Dir/<escaped served name>/current at it,
// swapped atomically. An engine started with --model <Dir>/<served>/current
// therefore loads the deployed weights, and after a deploy or a rollback its
// next restart loads the new binding: which version is in production has one
// answer on disk too.
package deploy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/services/worker/internal/supervise"
)

// Config configures a Manager.
type Config struct {
	// Dir holds the materialised versions and the current links; required.
	Dir string
	// RetryInterval paces retries (supervise.NewBackoff); required.
	RetryInterval time.Duration
}

// Deps are a Manager's collaborators.
type Deps struct {
	JS      jetstream.JetStream
	Objects objstore.Store
	Logger  *slog.Logger
}

// Manager keeps the current link of every served model at its deployment.
type Manager struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	kick chan struct{}

	mu          sync.Mutex
	store       *catalog.Store
	served      map[string]bool
	deployments map[string]catalog.Deployment // KV key -> deployment
	status      map[string]string             // served model -> state
}

// New returns a Manager; Run starts it.
func New(cfg Config, deps Deps) *Manager {
	return &Manager{
		cfg: cfg, deps: deps, log: deps.Logger,
		kick:        make(chan struct{}, 1),
		served:      make(map[string]bool),
		deployments: make(map[string]catalog.Deployment),
		status:      make(map[string]string),
	}
}

// Status returns, per served model with a deployment, "ready <catalog>
// v<N>", "materialising <catalog> v<N>" or "error: ...".
func (m *Manager) Status() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.status)
}

// CurrentLink is where the deployed weights of a served model appear.
func (m *Manager) CurrentLink(model string) string {
	return filepath.Join(m.cfg.Dir, url.PathEscape(model), "current")
}

// VersionDir is where a catalog version is materialised.
func (m *Manager) VersionDir(name string, version int) string {
	return filepath.Join(m.cfg.Dir, url.PathEscape(name), "v"+strconv.Itoa(version))
}

// SetServed replaces the served model names whose deployments are
// materialised.
func (m *Manager) SetServed(models []string) {
	served := make(map[string]bool, len(models))
	for _, name := range models {
		served[name] = true
	}
	m.mu.Lock()
	m.served = served
	m.mu.Unlock()
	m.kickReconcile()
}

// Run follows the deployments and materialises them until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.loop(ctx) }()
	m.watch(ctx)
	wg.Wait()
}

// watch follows the deployments until ctx ends, reopening the catalog
// after failures; reconcile does the work.
func (m *Manager) watch(ctx context.Context) {
	bo := supervise.NewBackoff(m.cfg.RetryInterval)
	for ctx.Err() == nil {
		store, err := catalog.Open(ctx, m.deps.JS)
		if err == nil {
			m.mu.Lock()
			m.store = store
			m.mu.Unlock()
			err = store.WatchDeployments(ctx, func(key string, d catalog.Deployment, deleted, initialDone bool) {
				if initialDone {
					return
				}
				m.mu.Lock()
				if deleted {
					delete(m.deployments, key)
				} else {
					m.deployments[key] = d
				}
				m.mu.Unlock()
				m.kickReconcile()
			})
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("deployment watch ended")
		}
		m.log.Warn("deployment watch failed; retrying", "err", err)
		if !bo.Wait(ctx) {
			return
		}
	}
}

// kickReconcile asks the loop to reconcile (a deployment changed, or a
// model started).
func (m *Manager) kickReconcile() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// loop materialises deployed versions, one at a time, retrying failures
// with backoff.
func (m *Manager) loop(ctx context.Context) {
	bo := supervise.NewBackoff(m.cfg.RetryInterval)
	for {
		failed := m.reconcile(ctx)
		var retry <-chan struct{}
		if failed {
			r := make(chan struct{})
			go func() {
				if bo.Wait(ctx) {
					close(r)
				}
			}()
			retry = r
		} else {
			bo = supervise.NewBackoff(m.cfg.RetryInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-retry:
		}
	}
}

// reconcile brings every served model's current link to its deployment; it
// reports whether anything failed.
func (m *Manager) reconcile(ctx context.Context) (failed bool) {
	m.mu.Lock()
	store := m.store
	served := m.served
	deps := make([]catalog.Deployment, 0, len(m.deployments))
	for _, d := range m.deployments {
		deps = append(deps, d)
	}
	m.mu.Unlock()
	if store == nil {
		return false
	}

	want := map[string]bool{}
	for _, d := range deps {
		if !served[d.Model] {
			continue
		}
		want[d.Model] = true
		label := fmt.Sprintf("%s v%d", d.Catalog, d.Version)
		m.mu.Lock()
		done := m.status[d.Model] == "ready "+label
		m.mu.Unlock()
		if done {
			continue
		}
		m.setStatus(d.Model, "materialising "+label)
		dir, copied, err := m.materialise(ctx, store, d)
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			failed = true
			m.setStatus(d.Model, supervise.StatusErrorPrefix+err.Error())
			m.log.Warn("deployment not materialised; retrying", "model", d.Model, "catalog", d.Catalog, "version", d.Version, "err", err)
			continue
		}
		m.setStatus(d.Model, "ready "+label)
		m.log.Info("deployed version materialised; the engine loads it from the current link at its next start",
			"model", d.Model, "catalog", d.Catalog, "version", d.Version, "dir", dir, "link", m.CurrentLink(d.Model), "bytes_copied", copied)
	}
	// Models no longer deployed (or no longer served here) lose their
	// status; their files stay until an operator removes them, so a running
	// engine never loses the files it has open.
	m.mu.Lock()
	for model := range m.status {
		if !want[model] {
			delete(m.status, model)
		}
	}
	m.mu.Unlock()
	return failed
}

func (m *Manager) setStatus(model, st string) {
	m.mu.Lock()
	m.status[model] = st
	m.mu.Unlock()
}

// materialise copies the deployed version's files and swaps the
// served model's current link to them.
func (m *Manager) materialise(ctx context.Context, store *catalog.Store, d catalog.Deployment) (string, int64, error) {
	e, err := store.Get(ctx, d.Catalog)
	if err != nil {
		return "", 0, err
	}
	v, ok := e.Find(d.Version)
	if !ok {
		return "", 0, fmt.Errorf("catalog %q has no version %d", d.Catalog, d.Version)
	}
	if v.Status != catalog.StatusPublished {
		// Deploy refuses such versions; a deployment written some other way
		// is never acted on.
		return "", 0, fmt.Errorf("catalog %q version %d is %s, not published", d.Catalog, d.Version, v.Status)
	}
	dir := m.VersionDir(d.Catalog, d.Version)
	copied, err := catalog.Materialise(ctx, m.deps.Objects, *v, dir)
	if err != nil {
		return "", copied, fmt.Errorf("catalog %q: %w", d.Catalog, err)
	}
	if err := swapLink(dir, m.CurrentLink(d.Model)); err != nil {
		return "", copied, err
	}
	return dir, copied, nil
}

// swapLink points link at target, replacing any previous link atomically
// (a new link renamed over the old one).
func swapLink(target, link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("deployment link: %w", err)
	}
	tmp := link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("deployment link: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("deployment link: %w", err)
	}
	return nil
}
