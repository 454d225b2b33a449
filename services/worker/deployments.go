package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/aiforge/aiforge/pkg/catalog"
)

// Deployments. A deployment binds a served model name to one published
// catalog version. The Supervisor materialises the deployed version of every
// model it runs into ModelsDir/<escaped catalog name>/v<N>/ (sizes and
// SHA-256 checked against the catalog) and points the link
// ModelsDir/<escaped served name>/current at it, swapped atomically. An
// engine started with --model <ModelsDir>/<served>/current therefore loads
// the deployed weights, and after a deploy or a rollback its next restart
// loads the new binding: which version is in production has one answer on
// disk too.

// DeploymentStatus returns, per served model with a deployment, "ready
// <catalog> v<N>", "materialising <catalog> v<N>" or "error: ...".
func (s *Supervisor) DeploymentStatus() map[string]string {
	s.deployMu.Lock()
	defer s.deployMu.Unlock()
	return maps.Clone(s.deployStatus)
}

// CurrentLink is where the deployed weights of a served model appear.
func (s *Supervisor) CurrentLink(model string) string {
	return filepath.Join(s.cfg.ModelsDir, url.PathEscape(model), "current")
}

func (s *Supervisor) versionDir(name string, version int) string {
	return filepath.Join(s.cfg.ModelsDir, url.PathEscape(name), "v"+strconv.Itoa(version))
}

// watchDeployments follows the deployments until ctx ends, reopening the
// catalog after failures; reconcileDeployments does the work.
func (s *Supervisor) watchDeployments(ctx context.Context) {
	bo := s.newBackoff()
	for ctx.Err() == nil {
		store, err := catalog.Open(ctx, s.deps.JS)
		if err == nil {
			s.deployMu.Lock()
			s.catalogStore = store
			s.deployMu.Unlock()
			err = store.WatchDeployments(ctx, func(key string, d catalog.Deployment, deleted, initialDone bool) {
				if initialDone {
					return
				}
				s.deployMu.Lock()
				if deleted {
					delete(s.deployments, key)
				} else {
					s.deployments[key] = d
				}
				s.deployMu.Unlock()
				s.kickDeployments()
			})
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("deployment watch ended")
		}
		s.log.Warn("deployment watch failed; retrying", "err", err)
		if !bo.wait(ctx) {
			return
		}
	}
}

// kickDeployments asks the deployment loop to reconcile (a deployment
// changed, or a model started).
func (s *Supervisor) kickDeployments() {
	select {
	case s.deployKick <- struct{}{}:
	default:
	}
}

// deploymentLoop materialises deployed versions, one at a time, retrying
// failures with backoff.
func (s *Supervisor) deploymentLoop(ctx context.Context) {
	bo := s.newBackoff()
	for {
		failed := s.reconcileDeployments(ctx)
		var retry <-chan struct{}
		if failed {
			r := make(chan struct{})
			go func() {
				if bo.wait(ctx) {
					close(r)
				}
			}()
			retry = r
		} else {
			bo = s.newBackoff()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.deployKick:
		case <-retry:
		}
	}
}

// reconcileDeployments brings every served model's current link to its
// deployment; it reports whether anything failed.
func (s *Supervisor) reconcileDeployments(ctx context.Context) (failed bool) {
	s.deployMu.Lock()
	store := s.catalogStore
	deps := make([]catalog.Deployment, 0, len(s.deployments))
	for _, d := range s.deployments {
		deps = append(deps, d)
	}
	s.deployMu.Unlock()
	if store == nil {
		return false
	}
	s.mu.Lock()
	served := make(map[string]bool, len(s.workers))
	for name := range s.workers {
		served[name] = true
	}
	s.mu.Unlock()

	want := map[string]bool{}
	for _, d := range deps {
		if !served[d.Model] {
			continue
		}
		want[d.Model] = true
		label := fmt.Sprintf("%s v%d", d.Catalog, d.Version)
		s.deployMu.Lock()
		done := s.deployStatus[d.Model] == "ready "+label
		s.deployMu.Unlock()
		if done {
			continue
		}
		s.setDeployStatus(d.Model, "materialising "+label)
		dir, copied, err := s.materialiseDeployment(ctx, store, d)
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			failed = true
			s.setDeployStatus(d.Model, statusErrorPfx+err.Error())
			s.log.Warn("deployment not materialised; retrying", "model", d.Model, "catalog", d.Catalog, "version", d.Version, "err", err)
			continue
		}
		s.setDeployStatus(d.Model, "ready "+label)
		s.log.Info("deployed version materialised; the engine loads it from the current link at its next start",
			"model", d.Model, "catalog", d.Catalog, "version", d.Version, "dir", dir, "link", s.CurrentLink(d.Model), "bytes_copied", copied)
	}
	// Models no longer deployed (or no longer served here) lose their
	// status; their files stay until an operator removes them, so a running
	// engine never loses the files it has open.
	s.deployMu.Lock()
	for m := range s.deployStatus {
		if !want[m] {
			delete(s.deployStatus, m)
		}
	}
	s.deployMu.Unlock()
	return failed
}

func (s *Supervisor) setDeployStatus(model, st string) {
	s.deployMu.Lock()
	s.deployStatus[model] = st
	s.deployMu.Unlock()
}

// materialiseDeployment copies the deployed version's files and swaps the
// served model's current link to them.
func (s *Supervisor) materialiseDeployment(ctx context.Context, store *catalog.Store, d catalog.Deployment) (string, int64, error) {
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
	dir := s.versionDir(d.Catalog, d.Version)
	copied, err := catalog.Materialise(ctx, s.deps.Objects, *v, dir)
	if err != nil {
		return "", copied, fmt.Errorf("catalog %q: %w", d.Catalog, err)
	}
	if err := swapLink(dir, s.CurrentLink(d.Model)); err != nil {
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
