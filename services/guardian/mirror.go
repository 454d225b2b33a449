package guardian

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/ociref"
	"github.com/aiforge/aiforge/services/guardian/hub"
	"github.com/aiforge/aiforge/services/guardian/scan"
)

// UploadedID is the event id of the upload event the mirror publishes for a
// version it pulled.
func UploadedID(name string, version int) string {
	return fmt.Sprintf("uploaded-%s-v%d", name, version)
}

// handlePull mirrors a hub repository at a commit into a new catalog
// version, then hands it to the scanner with a ModelUploadedV1. Hub
// failures reject the version; bus, catalog and store failures are retried
// (a retried pull resumes: files already stored with the right digest are
// not downloaded again).
func (s *Service) handlePull(ctx context.Context, req *events.ModelPullRequestedV1) error {
	if ociref.IsOCI(req.Repo) {
		return s.handleOCIPull(ctx, req)
	}
	log := s.log.With("model", req.Name, "repo", req.Repo, "revision", req.Revision, "pull_id", req.PullID)
	cat := s.catalog()
	source := catalog.Source{Type: events.ModelSourceHub, Repo: req.Repo, Revision: req.Revision}

	commit, err := s.hub.Resolve(ctx, req.Repo, req.Revision)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("hub pull refused: resolving the revision failed", "err", s.redact(err.Error()))
		return s.rejectNew(ctx, req, req.Kind, req.BaseModel, source, catalog.Reason{Code: CodeHubError, Message: s.redact(err.Error())})
	}
	source.Commit = commit
	log = log.With("commit", commit)
	s.notePull(ctx, req, func(p *catalog.Pull) { p.Commit = commit })

	var v catalog.Version
	entry, err := cat.Get(ctx, req.Name)
	switch {
	case err == nil:
		if prev, ok := entry.FindSource(req.Repo, commit); ok {
			if prev.Status != catalog.StatusMirroring {
				log.Info("hub pull skipped: this commit is already in the catalog", "version", prev.Version, "status", prev.Status)
				s.notePull(ctx, req, func(p *catalog.Pull) { p.Status, p.Version, p.Skipped = catalog.PullDone, prev.Version, true })
				return nil
			}
			log.Info("resuming an interrupted hub pull", "version", prev.Version)
			v = *prev
		}
	case errors.Is(err, catalog.ErrNotFound):
	default:
		return err
	}
	if v.Version == 0 {
		v, err = cat.AddVersion(ctx, req.Name, req.Kind, req.BaseModel, catalog.Version{
			Status: catalog.StatusMirroring, Source: source, Progress: &catalog.Progress{},
		})
		if err != nil {
			if errors.Is(err, catalog.ErrInvalid) || errors.Is(err, catalog.ErrConflict) {
				log.Warn("hub pull refused by the catalog", "err", err)
				s.failPull(ctx, req, 0, catalog.Reason{Code: CodeCatalogRefused, Message: err.Error()})
				return nil
			}
			return err
		}
	}
	log = log.With("version", v.Version)
	s.notePull(ctx, req, func(p *catalog.Pull) { p.Status, p.Version = catalog.PullMirroring, v.Version })

	files, err := s.hub.ListFiles(ctx, req.Repo, commit)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.rejectPull(ctx, req, v.Version, nil, catalog.Reason{Code: CodeHubError, Message: s.redact(err.Error())})
	}
	prog := &progress{s: s, name: req.Name, version: v.Version, p: catalog.Progress{FilesTotal: len(files)}}
	for _, f := range files {
		prog.p.BytesTotal += f.Size
	}
	prog.flush(ctx, true)

	stored := make([]catalog.File, 0, len(files))
	manifest := map[string]string{}
	downloaded := 0
	for _, f := range files {
		key := v.Prefix + f.Path
		if f.SHA256 != "" {
			manifest[f.Path] = f.SHA256
			if info, err := s.deps.Objects.Stat(ctx, key); err == nil && info.Size == f.Size && info.SHA256 == f.SHA256 {
				stored = append(stored, catalog.File{Path: f.Path, Size: info.Size, SHA256: info.SHA256})
				prog.add(ctx, f.Size, true)
				continue
			}
		}
		info, reason, err := s.fetch(ctx, req.Repo, commit, f, key, prog)
		if err != nil {
			return err
		}
		if reason != nil {
			log.Warn("hub pull rejected", "file", f.Path, "code", reason.Code, "err", reason.Message)
			return s.rejectPull(ctx, req, v.Version, stored, *reason)
		}
		downloaded++
		stored = append(stored, catalog.File{Path: f.Path, Size: info.Size, SHA256: info.SHA256})
		prog.add(ctx, 0, true)
	}

	handed, err := s.handOff(ctx, req, events.ModelUploadedV1{
		Name: req.Name, Version: v.Version, Kind: kindOr(req.Kind), BaseModel: req.BaseModel, Source: source,
		Prefix: v.Prefix, Files: stored, Manifest: manifest,
	}, prog)
	if handed {
		log.Info("hub pull stored; scanning", "files", len(stored), "downloaded", downloaded, "bytes", prog.snapshot().BytesTotal)
	}
	return err
}

// handOff hands a pulled version to the scanner: the catalog version gets
// its files and the scanning status, a ModelUploadedV1 is published, and
// the pull is done. A version settled meanwhile (rejected, say) is left as
// it is (handed false, no error).
func (s *Service) handOff(ctx context.Context, req *events.ModelPullRequestedV1, up events.ModelUploadedV1, prog *progress) (handed bool, err error) {
	if _, err := s.catalog().UpdateVersion(ctx, up.Name, up.Version, func(cv *catalog.Version) error {
		cv.Status, cv.Files, cv.Source = catalog.StatusScanning, up.Files, up.Source
		p := prog.snapshot()
		cv.Progress = &p
		return nil
	}); err != nil {
		if errors.Is(err, catalog.ErrConflict) {
			return false, nil
		}
		return false, err
	}
	up.UploadedAt = time.Now().UTC()
	if _, err := events.Publish(ctx, s.deps.JS, up,
		events.Envelope{ID: UploadedID(up.Name, up.Version), Source: "guardian"}); err != nil {
		return false, fmt.Errorf("guardian: publish upload: %w", err)
	}
	s.notePull(ctx, req, func(p *catalog.Pull) { p.Status = catalog.PullDone })
	return true, nil
}

// notePull records a pull's progress for the client that requested it. It
// is best effort: the catalog version is the record that matters.
func (s *Service) notePull(ctx context.Context, req *events.ModelPullRequestedV1, fn func(p *catalog.Pull)) {
	_, err := s.catalog().UpdatePull(ctx, req.PullID, func(p *catalog.Pull) {
		if p.Name == "" {
			p.Name, p.Repo, p.Revision, p.RequestedAt = req.Name, req.Repo, req.Revision, req.RequestedAt
		}
		fn(p)
	})
	if err != nil {
		s.log.Warn("recording a pull's state", "pull_id", req.PullID, "err", err)
	}
}

func (s *Service) failPull(ctx context.Context, req *events.ModelPullRequestedV1, version int, r catalog.Reason) {
	s.notePull(ctx, req, func(p *catalog.Pull) {
		p.Status, p.Reason = catalog.PullFailed, &r
		if version > 0 {
			p.Version = version
		}
	})
}

// rejectPull rejects a pulled version and records the pull's failure.
func (s *Service) rejectPull(ctx context.Context, req *events.ModelPullRequestedV1, version int, files []catalog.File, r catalog.Reason) error {
	if err := s.reject(ctx, req.Name, version, files, r); err != nil {
		return err
	}
	s.failPull(ctx, req, version, r)
	return nil
}

func kindOr(k string) string {
	if k == "" {
		return events.ModelKindModel
	}
	return k
}

// fetch streams one file from the hub into the object store while the hub
// client hashes it. A hub failure (a digest or size mismatch among them) is
// a reason to reject; a store failure is an error to retry.
func (s *Service) fetch(ctx context.Context, repo, commit string, f hub.File, key string, prog *progress) (objstore.Info, *catalog.Reason, error) {
	return s.storeVerified(ctx, key, f.Path, f.Size, func(w io.Writer) (string, error) {
		return s.hub.Download(ctx, repo, commit, f, w, func(n int64) { prog.add(ctx, n, false) })
	}, func(err error) string {
		if errors.Is(err, hub.ErrMismatch) {
			return scan.CodeHashMismatch
		}
		return CodeHubError
	})
}

// storeVerified streams one file into the object store at key while
// download writes it, verifying it and returning the sha256 it hashed (a
// hub file, an OCI layer). The download's failure rejects the version with
// the reason code failure names; so does a store that recorded other bytes
// than were hashed. A store failure is an error to retry. Nothing partial
// or mismatched is left at key.
func (s *Service) storeVerified(ctx context.Context, key, path string, size int64, download func(w io.Writer) (string, error), failure func(error) string) (objstore.Info, *catalog.Reason, error) {
	pr, pw := io.Pipe()
	type result struct {
		sum string
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := download(pw)
		if err == nil {
			_ = pw.Close()
		} else {
			_ = pw.CloseWithError(err)
		}
		done <- result{sum, err}
	}()
	info, putErr := s.deps.Objects.Put(ctx, key, pr, size, "")
	_ = pr.CloseWithError(errors.New("guardian: the object store stopped reading"))
	res := <-done
	switch {
	case res.err != nil && ctx.Err() != nil:
		return objstore.Info{}, nil, ctx.Err()
	case res.err != nil:
		_ = s.deps.Objects.Delete(ctx, key)
		return objstore.Info{}, &catalog.Reason{Code: failure(res.err), File: path, Message: s.redact(res.err.Error())}, nil
	case putErr != nil:
		return objstore.Info{}, nil, fmt.Errorf("guardian: store %s: %w", path, putErr)
	case info.SHA256 != res.sum || info.Size != size:
		_ = s.deps.Objects.Delete(ctx, key)
		return objstore.Info{}, &catalog.Reason{Code: scan.CodeHashMismatch, File: path,
			Message: fmt.Sprintf("the store recorded sha256 %s (%d bytes), the download hashed %s (%d bytes)", info.SHA256, info.Size, res.sum, size)}, nil
	}
	return info, nil, nil
}

// rejectNew records a version (of kind and base) that failed with r
// before anything was downloaded, so the pull's failure is visible in the
// catalog; if the catalog refuses even that version (a name of another
// kind, say), the pull fails with r all the same.
func (s *Service) rejectNew(ctx context.Context, req *events.ModelPullRequestedV1, kind, base string, source catalog.Source, r catalog.Reason) error {
	if kind != events.ModelKindAdapter {
		base = ""
	}
	v, err := s.catalog().AddVersion(ctx, req.Name, kind, base, catalog.Version{Status: catalog.StatusMirroring, Source: source})
	if err != nil {
		if errors.Is(err, catalog.ErrInvalid) || errors.Is(err, catalog.ErrConflict) {
			s.log.Warn("pull failed, and the catalog refused a version to record it in", "model", req.Name, "code", r.Code, "err", r.Message, "catalog", err)
			s.failPull(ctx, req, 0, r)
			return nil
		}
		return err
	}
	return s.rejectPull(ctx, req, v.Version, nil, r)
}

// reject publishes a rejected verdict for a version (pulled, or imported
// from a tenant's bucket) and records it.
func (s *Service) reject(ctx context.Context, name string, version int, files []catalog.File, rs ...catalog.Reason) error {
	verdict := events.ModelVerdictV2{ModelVerdictV1: events.ModelVerdictV1{
		Name: name, Version: version, Status: events.VerdictRejected, Reasons: rs,
		Files: files, License: "needs-review", ScannedAt: time.Now().UTC(),
	}}
	if _, err := events.Publish(ctx, s.deps.JS, verdict,
		events.Envelope{ID: VerdictID(name, version), Source: "guardian"}); err != nil {
		return fmt.Errorf("guardian: publish verdict: %w", err)
	}
	if _, err := s.catalog().ApplyVerdict(ctx, verdict); err != nil {
		return fmt.Errorf("guardian: record verdict: %w", err)
	}
	return nil
}

// redact removes the hub token from s (defence in depth: the hub client
// never puts it in errors in the first place).
func (s *Service) redact(msg string) string {
	msg = s.oci.Redact(msg)
	if s.cfg.HubToken == "" {
		return msg
	}
	return strings.ReplaceAll(msg, s.cfg.HubToken, "[REDACTED]")
}

// progress tracks a pull's download and writes it to the catalog at most
// every ProgressEvery.
type progress struct {
	s       *Service
	name    string
	version int

	mu   sync.Mutex
	p    catalog.Progress
	last time.Time
}

func (p *progress) snapshot() catalog.Progress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.p
}

// add counts n bytes (and a finished file when fileDone) and flushes when
// due.
func (p *progress) add(ctx context.Context, n int64, fileDone bool) {
	p.mu.Lock()
	p.p.BytesDone += n
	if fileDone {
		p.p.FilesDone++
	}
	p.mu.Unlock()
	p.flush(ctx, false)
}

func (p *progress) flush(ctx context.Context, force bool) {
	p.mu.Lock()
	if !force && time.Since(p.last) < p.s.cfg.ProgressEvery {
		p.mu.Unlock()
		return
	}
	p.last = time.Now()
	snap := p.p
	p.mu.Unlock()
	// Data is flowing: keep the pull's message leased, so a long download
	// is never redelivered mid-way while a stalled one is.
	if err := events.InProgress(ctx); err != nil {
		p.s.log.Debug("extending the pull's lease", "model", p.name, "version", p.version, "err", err)
	}
	_, err := p.s.catalog().UpdateVersion(ctx, p.name, p.version, func(v *catalog.Version) error {
		v.Progress = &snap
		return nil
	})
	if err != nil {
		p.s.log.Debug("progress update", "model", p.name, "version", p.version, "err", err)
	}
}
