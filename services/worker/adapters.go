package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// LoRA adapters. The Supervisor watches the catalog: every entry of kind
// adapter whose base model is a model it runs is served as a model of its
// own. Its newest published version is materialised from the object store
// into AdapterDir/<escaped name>/v<N>/ (sizes and SHA-256 checked against
// the catalog), loaded into the base model's engine through vLLM's runtime
// LoRA API (POST /v1/load_lora_adapter) under the adapter's catalog name, and
// served on the bus by a worker whose upstream model is that name. A newer
// version is unloaded and loaded again from its own directory; a deleted
// adapter is unloaded and no longer served; an adapter the engine forgot (a
// restart) fails the worker's health check and is loaded again.

// adapterRun is one adapter version being served on one base binding.
type adapterRun struct {
	name    string
	base    registry.Model
	version catalog.Version
	cancel  context.CancelFunc
	done    chan struct{}
	// prev is the run this one replaces; it must be gone before this one
	// touches the engine.
	prev *adapterRun
	// unload asks the run to unload the adapter from the engine as it stops
	// (deleted, no longer published, base gone or moved); a run replaced by
	// a newer version leaves that to its successor.
	unload atomic.Bool
}

// AdapterStatus returns each served adapter's state: "serving", "starting"
// or "error: ...".
func (s *Supervisor) AdapterStatus() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.adapterStatus)
}

// watchCatalog follows the catalog's adapters until ctx ends, reopening the
// catalog after failures (its buckets may not exist yet).
func (s *Supervisor) watchCatalog(ctx context.Context) {
	bo := s.newBackoff()
	for ctx.Err() == nil {
		store, err := catalog.Open(ctx, s.deps.JS)
		if err == nil {
			err = store.Watch(ctx, s.onCatalog)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("catalog watch ended")
		}
		s.log.Warn("catalog watch failed; retrying", "err", err)
		if !bo.wait(ctx) {
			return
		}
	}
}

func (s *Supervisor) onCatalog(key string, e catalog.Entry, deleted, initialDone bool) {
	if initialDone {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if deleted {
		name, ok := s.catalogKeys[key]
		if !ok {
			return
		}
		delete(s.catalogKeys, key)
		delete(s.catalogAdapters, name)
		s.reconcileAdaptersLocked()
		return
	}
	if e.Kind != events.ModelKindAdapter {
		return
	}
	s.catalogKeys[key] = e.Name
	s.catalogAdapters[e.Name] = e
	s.reconcileAdaptersLocked()
}

// reconcileAdaptersLocked starts, replaces and stops adapter runs so that
// every published adapter of a running base model is served, at its newest
// published version.
func (s *Supervisor) reconcileAdaptersLocked() {
	if s.runCtx == nil || s.runCtx.Err() != nil {
		return
	}
	type want struct {
		base    registry.Model
		version catalog.Version
	}
	desired := make(map[string]want)
	for name, e := range s.catalogAdapters {
		v, ok := e.LatestPublished()
		if !ok {
			continue // uploading, mirroring, scanning or rejected: never served
		}
		w, ok := s.workers[e.BaseModel]
		if !ok {
			continue
		}
		desired[name] = want{base: w.binding, version: *v}
	}
	replaced := make(map[string]*adapterRun)
	for name, run := range s.adapters {
		d, ok := desired[name]
		if ok && d.version.Version == run.version.Version && d.base.Engine == run.base.Engine {
			continue
		}
		switch {
		case !ok:
			s.log.Info("adapter no longer served; unloading it", "adapter", name, "version", run.version.Version)
			run.unload.Store(true)
		case d.base.Engine.BaseURL != run.base.Engine.BaseURL:
			run.unload.Store(true) // the new run loads it into another engine
			replaced[name] = run
		default:
			replaced[name] = run
		}
		run.cancel()
		delete(s.adapters, name)
		delete(s.adapterStatus, name)
	}
	for name, d := range desired {
		if _, ok := s.adapters[name]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(s.runCtx)
		run := &adapterRun{name: name, base: d.base, version: d.version, cancel: cancel,
			done: make(chan struct{}), prev: replaced[name]}
		s.adapters[name] = run
		s.adapterStatus[name] = StatusStarting
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer close(run.done)
			s.runAdapter(ctx, run)
		}()
	}
}

// stopAdaptersLocked cancels every adapter run, leaving adapters loaded (the
// process is stopping; the next one finds them in place).
func (s *Supervisor) stopAdaptersLocked() {
	for name, run := range s.adapters {
		run.cancel()
		delete(s.adapters, name)
	}
	clear(s.adapterStatus)
}

func (s *Supervisor) setAdapterStatus(run *adapterRun, st string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.adapters[run.name] == run {
		s.adapterStatus[run.name] = st
	}
}

// backoff doubles a wait from 100ms up to 8 RetryIntervals.
type backoff struct{ cur, max time.Duration }

func (s *Supervisor) newBackoff() *backoff {
	return &backoff{cur: min(100*time.Millisecond, s.cfg.RetryInterval), max: 8 * s.cfg.RetryInterval}
}

func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	return d
}

func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runAdapter materialises, loads and serves one adapter version until ctx
// ends, retrying failures with backoff.
func (s *Supervisor) runAdapter(ctx context.Context, run *adapterRun) {
	log := s.log.With("adapter", run.name, "version", run.version.Version, "base_model", run.base.Name)
	prev := run.prev
	run.prev = nil
	defer func() {
		if prev != nil {
			<-prev.done // never unload under a predecessor still draining
		}
		if !run.unload.Load() {
			return
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := s.unloadAdapter(uctx, run.base.Engine, run.name); err != nil {
			log.Warn("could not unload adapter", "err", err)
		} else {
			log.Info("adapter unloaded")
		}
	}()
	bo := s.newBackoff()
	lastErr := ""
	fail := func(err error) bool {
		if msg := err.Error(); msg != lastErr {
			log.Error("adapter failed; retrying", "err", err)
			lastErr = msg
		} else {
			log.Debug("adapter failed again; retrying", "err", err)
		}
		s.setAdapterStatus(run, statusErrorPfx+err.Error())
		return bo.wait(ctx)
	}
	dir := ""
	for ctx.Err() == nil {
		if dir == "" {
			d, err := s.materialise(ctx, run.name, run.version)
			if err != nil {
				if ctx.Err() != nil || !fail(err) {
					return
				}
				continue
			}
			dir = d
		}
		if prev != nil {
			select {
			case <-prev.done:
				prev = nil
			case <-ctx.Done():
				return
			}
		}
		if err := s.ensureLoaded(ctx, run.base.Engine, run.name, dir); err != nil {
			if ctx.Err() != nil || !fail(err) {
				return
			}
			continue
		}
		log.Info("adapter loaded", "path", dir)
		err := s.serveAdapter(ctx, run, dir, log)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("adapter worker stopped unexpectedly")
		}
		if !fail(err) {
			return
		}
	}
}

// serveAdapter runs the adapter's worker until ctx ends or it fails; when a
// health check fails (the engine may have restarted and forgotten the
// adapter) it loads the adapter again, with backoff, until the worker
// recovers.
func (s *Supervisor) serveAdapter(ctx context.Context, run *adapterRun, dir string, log *slog.Logger) error {
	cfg := s.cfg.WorkerDefaults
	cfg.Model = run.name
	cfg.Engine = run.base.Engine
	cfg.Engine.Model = run.name
	if cfg.Engine.MaxConcurrency == 0 {
		cfg.Engine.MaxConcurrency = s.cfg.WorkerDefaults.Engine.MaxConcurrency
	}
	cfg.WorkerID = ""
	if p := s.cfg.WorkerDefaults.WorkerID; p != "" {
		cfg.WorkerID = p + "-" + newWorkerID()[2:]
	}
	svc, err := New(cfg, s.deps)
	if err != nil {
		return err
	}
	reload := make(chan struct{}, 1)
	svc.checkBackoffMax = s.cfg.RetryInterval
	svc.onCheckFailed = func(err error) { s.setAdapterStatus(run, statusErrorPfx+err.Error()) }
	svc.onServing = func() { s.setAdapterStatus(run, StatusServing) }
	svc.onUnhealthy = func(err error) {
		s.setAdapterStatus(run, statusErrorPfx+"engine unhealthy: "+err.Error())
		select {
		case reload <- struct{}{}:
		default:
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(sctx) }()
	bo := s.newBackoff()
	var retry <-chan time.Time
	for {
		select {
		case err := <-errc:
			return err
		case <-reload:
			retry = time.After(0)
		case <-retry:
			if err := s.ensureLoaded(ctx, run.base.Engine, run.name, dir); err != nil {
				if ctx.Err() == nil {
					log.Warn("could not load adapter again; retrying", "err", err)
				}
				retry = time.After(bo.next())
				continue
			}
			retry = nil
			bo = s.newBackoff()
			log.Info("adapter loaded again after a failed health check")
		}
	}
}

// adapterDir is where a version's files are materialised.
func (s *Supervisor) adapterDir(name string, version int) string {
	return filepath.Join(s.cfg.AdapterDir, url.PathEscape(name), "v"+strconv.Itoa(version))
}

// materialise copies a version's files from the object store into its
// directory, verified against the catalog (catalog.Materialise).
func (s *Supervisor) materialise(ctx context.Context, name string, v catalog.Version) (string, error) {
	dir := s.adapterDir(name, v.Version)
	if _, err := catalog.Materialise(ctx, s.deps.Objects, v, dir); err != nil {
		return "", fmt.Errorf("adapter %q: %w", name, err)
	}
	return dir, nil
}

// engineAdapter reports whether the engine lists name, and from which path.
func (s *Supervisor) engineAdapter(ctx context.Context, eng registry.Engine, name string) (listed bool, root string, err error) {
	body, status, err := s.engineCall(ctx, eng, http.MethodGet, "/models", nil)
	if err != nil {
		return false, "", err
	}
	if status != http.StatusOK {
		return false, "", fmt.Errorf("GET %s/models answered %d", redactURL(eng.BaseURL), status)
	}
	var list struct {
		Data []struct {
			ID   string `json:"id"`
			Root string `json:"root"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return false, "", fmt.Errorf("GET %s/models did not answer an OpenAI model list: %w", redactURL(eng.BaseURL), err)
	}
	for _, m := range list.Data {
		if m.ID == name {
			return true, m.Root, nil
		}
	}
	return false, "", nil
}

// ensureLoaded makes the engine serve adapter name from dir: nothing to do
// when it already does; an adapter of that name loaded from elsewhere (an
// older version) is unloaded first.
func (s *Supervisor) ensureLoaded(ctx context.Context, eng registry.Engine, name, dir string) error {
	listed, root, err := s.engineAdapter(ctx, eng, name)
	if err != nil {
		return err
	}
	if listed && root == dir {
		return nil
	}
	if listed {
		if err := s.unloadAdapter(ctx, eng, name); err != nil {
			return err
		}
	}
	req, _ := json.Marshal(map[string]string{"lora_name": name, "lora_path": dir})
	body, status, err := s.engineCall(ctx, eng, http.MethodPost, "/load_lora_adapter", req)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("engine at %s refused to load adapter %q (status %d): %s", redactURL(eng.BaseURL), name, status, engineMessage(body))
	}
	return nil
}

// unloadAdapter asks the engine to unload name.
func (s *Supervisor) unloadAdapter(ctx context.Context, eng registry.Engine, name string) error {
	req, _ := json.Marshal(map[string]string{"lora_name": name})
	body, status, err := s.engineCall(ctx, eng, http.MethodPost, "/unload_lora_adapter", req)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("engine at %s refused to unload adapter %q (status %d): %s", redactURL(eng.BaseURL), name, status, engineMessage(body))
	}
	return nil
}

// engineCall makes one request to the engine and returns its answer (at
// most 8 MiB). Errors name the engine by its redacted URL, never its key.
func (s *Supervisor) engineCall(ctx context.Context, eng registry.Engine, method, path string, body []byte) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	u := strings.TrimRight(eng.BaseURL, "/") + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, 0, fmt.Errorf("engine request: %w", unwrapURLError(err))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if eng.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+eng.APIKey)
	}
	resp, err := s.deps.HTTPClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, redactURL(u), unwrapURLError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: reading the answer: %w", method, redactURL(u), err)
	}
	return b, resp.StatusCode, nil
}

// engineMessage is the message of an OpenAI-shaped error body, or the
// body's start.
func engineMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil {
		if e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Message != "" {
			return e.Message
		}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}
