package guardian

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/ociref"
	"github.com/aiforge/aiforge/services/guardian/oci"
	"github.com/aiforge/aiforge/services/guardian/scan"
)

// Reason codes of OCI pulls (a digest or size mismatch is
// scan.CodeHashMismatch).
const (
	CodeOCIError       = "oci_error"                // the registry refused or failed the pull
	CodeOCILimit       = "oci_limit"                // the artifact exceeds a bound (manifest, layers, bytes, entries)
	CodeOCIUnsupported = "oci_unsupported"          // not an ORAS file artifact or a KitOps ModelKit
	CodeOCIUnsafePath  = "oci_unsafe_path"          // a file path is absolute, escapes the version, repeats, or is a link
	CodeOCIAdapterBase = "oci_adapter_base_missing" // an adapter artifact without a base model (and none asked for)
)

// OCIConfig configures pulls of OCI artifacts.
type OCIConfig struct {
	// InsecureRegistries (host[:port]) are spoken to over plain HTTP.
	InsecureRegistries []string
	// AuthFile is a Docker config.json; Username and Password, when set,
	// are used for every registry instead. Neither ever leaves the guardian.
	AuthFile           string
	Username, Password string
	Limits             oci.Limits
}

func newOCIClient(cfg OCIConfig, hc *http.Client) (*oci.Client, error) {
	return oci.New(oci.Config{
		InsecureRegistries: cfg.InsecureRegistries, AuthFile: cfg.AuthFile,
		Username: cfg.Username, Password: cfg.Password, HTTPClient: hc, Limits: cfg.Limits,
		UserAgent: "aiforge-guardian/1",
	})
}

// ociCode maps an OCI failure to its reason code.
func ociCode(err error) string {
	switch {
	case errors.Is(err, oci.ErrMismatch):
		return scan.CodeHashMismatch
	case errors.Is(err, oci.ErrLimit):
		return CodeOCILimit
	case errors.Is(err, oci.ErrUnsupported):
		return CodeOCIUnsupported
	case errors.Is(err, oci.ErrUnsafePath):
		return CodeOCIUnsafePath
	}
	return CodeOCIError
}

// findOCI returns the newest version of e pinned to digest from repo that
// is not rejected.
func findOCI(e catalog.Entry, repo, digest string) (*catalog.Version, bool) {
	for i := len(e.Versions) - 1; i >= 0; i-- {
		v := &e.Versions[i]
		if v.Source.Type == events.ModelSourceOCI && v.Source.Repo == repo && v.Source.Commit == digest && v.Status != catalog.StatusRejected {
			return v, true
		}
	}
	return nil, false
}

// handleOCIPull mirrors an OCI artifact into a new catalog version: the
// reference is pinned to its manifest digest, each layer streamed into the
// object store verified against its digest and size (archive layers are
// spooled to scratch, verified, then extracted), and the version scanned
// like any other. A digest already in the catalog downloads nothing.
func (s *Service) handleOCIPull(ctx context.Context, req *events.ModelPullRequestedV1) error {
	log := s.log.With("model", req.Name, "repo", req.Repo, "reference", req.Revision, "pull_id", req.PullID)
	cat := s.catalog()
	ref, err := ociref.Parse(ociref.Join(req.Repo, req.Revision))
	source := catalog.Source{Type: events.ModelSourceOCI, Repo: strings.TrimPrefix(req.Repo, ociref.Scheme), Revision: req.Revision}
	kind, base := kindOr(req.Kind), req.BaseModel
	if err != nil {
		return s.rejectNew(ctx, req, kind, base, source, catalog.Reason{Code: CodeOCIUnsupported, Message: err.Error()})
	}
	m, err := s.oci.Resolve(ctx, ref)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("oci pull refused: resolving the reference failed", "err", s.redact(err.Error()))
		return s.rejectNew(ctx, req, kind, base, source, catalog.Reason{Code: ociCode(err), Message: s.redact(err.Error())})
	}
	source.Commit = m.Digest
	log = log.With("digest", m.Digest)
	s.notePull(ctx, req, func(p *catalog.Pull) { p.Commit = m.Digest })

	// A digest already mirrored: nothing more is read, not even the config.
	entry, err := cat.Get(ctx, req.Name)
	var resume *catalog.Version
	switch {
	case err == nil:
		if prev, ok := findOCI(entry, source.Repo, m.Digest); ok {
			if prev.Status != catalog.StatusMirroring {
				log.Info("oci pull skipped: this digest is already in the catalog", "version", prev.Version, "status", prev.Status)
				s.notePull(ctx, req, func(p *catalog.Pull) { p.Status, p.Version, p.Skipped = catalog.PullDone, prev.Version, true })
				return nil
			}
			resume = prev
		}
	case errors.Is(err, catalog.ErrNotFound):
	default:
		return err
	}

	plan, err := s.planOCI(ctx, ref, m)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.rejectNew(ctx, req, kind, base, source, catalog.Reason{Code: ociCode(err), Message: s.redact(err.Error())})
	}
	if req.Kind == "" && plan.Kind != "" {
		kind = plan.Kind
	}
	if kind == events.ModelKindAdapter && base == "" {
		base = plan.BaseModel
	}
	if kind == events.ModelKindModel {
		base = ""
	}
	if kind == events.ModelKindAdapter && base == "" {
		r := catalog.Reason{Code: CodeOCIAdapterBase, Message: "the artifact is a LoRA adapter but names no base model; pull it with --base-model"}
		log.Warn("oci pull refused", "code", r.Code)
		s.failPull(ctx, req, 0, r)
		return nil
	}

	var v catalog.Version
	if resume != nil {
		log.Info("resuming an interrupted oci pull", "version", resume.Version)
		v = *resume
	} else {
		v, err = cat.AddVersion(ctx, req.Name, kind, base, catalog.Version{
			Status: catalog.StatusMirroring, Source: source, Progress: &catalog.Progress{},
		})
		if err != nil {
			if errors.Is(err, catalog.ErrInvalid) || errors.Is(err, catalog.ErrConflict) {
				log.Warn("oci pull refused by the catalog", "err", err)
				s.failPull(ctx, req, 0, catalog.Reason{Code: CodeCatalogRefused, Message: err.Error()})
				return nil
			}
			return err
		}
	}
	log = log.With("version", v.Version, "format", plan.Format, "kind", kind)
	s.notePull(ctx, req, func(p *catalog.Pull) { p.Status, p.Version = catalog.PullMirroring, v.Version })

	prog := &progress{s: s, name: req.Name, version: v.Version, p: catalog.Progress{FilesTotal: len(plan.Layers)}}
	for _, l := range plan.Layers {
		prog.p.BytesTotal += l.Desc.Size
	}
	prog.flush(ctx, true)

	var stored []catalog.File
	manifest := map[string]string{}
	x := &oci.Extractor{Limits: s.oci.Limits(), Root: plan.Root}
	downloaded := 0
	for _, l := range plan.Layers {
		if l.Archive {
			files, reason, err := s.ociExtract(ctx, ref, l, v.Prefix, x, prog)
			stored = append(stored, files...)
			if err != nil {
				return err
			}
			if reason != nil {
				log.Warn("oci pull rejected", "layer", l.Desc.Digest, "code", reason.Code, "err", reason.Message)
				return s.rejectPull(ctx, req, v.Version, stored, *reason)
			}
			downloaded++
			prog.add(ctx, 0, true)
			continue
		}
		sum := l.Desc.Digest.Encoded()
		if want, ok := plan.SHA256s[l.Path]; ok && !strings.EqualFold(want, sum) {
			return s.rejectPull(ctx, req, v.Version, stored, catalog.Reason{Code: scan.CodeHashMismatch, File: l.Path,
				Message: fmt.Sprintf("the manifest's annotation says sha256 %s, its layer is %s", want, l.Desc.Digest)})
		}
		manifest[l.Path] = sum
		key := v.Prefix + l.Path
		if info, err := s.deps.Objects.Stat(ctx, key); err == nil && info.Size == l.Desc.Size && info.SHA256 == sum {
			stored = append(stored, catalog.File{Path: l.Path, Size: info.Size, SHA256: info.SHA256})
			prog.add(ctx, l.Desc.Size, true)
			continue
		}
		info, reason, err := s.ociFetch(ctx, ref, l, key, prog)
		if err != nil {
			return err
		}
		if reason != nil {
			log.Warn("oci pull rejected", "file", l.Path, "code", reason.Code, "err", reason.Message)
			return s.rejectPull(ctx, req, v.Version, stored, *reason)
		}
		downloaded++
		stored = append(stored, catalog.File{Path: l.Path, Size: info.Size, SHA256: info.SHA256})
		prog.add(ctx, 0, true)
	}

	handed, err := s.handOff(ctx, req, events.ModelUploadedV1{
		Name: req.Name, Version: v.Version, Kind: kind, BaseModel: base, Source: source,
		Prefix: v.Prefix, Files: stored, Manifest: manifest,
	}, prog)
	if handed {
		log.Info("oci pull stored; scanning", "files", len(stored), "layers_downloaded", downloaded, "bytes", prog.snapshot().BytesTotal)
	}
	return err
}

// planOCI maps the artifact's layers to files: a ModelKit by its Kitfile
// (fetched within bounds), anything else as ORAS files.
func (s *Service) planOCI(ctx context.Context, ref ociref.Ref, m oci.Manifest) (oci.Plan, error) {
	if !oci.IsModelKit(m) {
		return oci.PlanFiles(m)
	}
	kitfile, err := s.oci.FetchSmall(ctx, ref, m.Config, s.oci.Limits().MaxConfigBytes)
	if err != nil {
		return oci.Plan{}, err
	}
	return oci.PlanModelKit(m, kitfile)
}

// ociFetch streams one file layer into the object store while the client
// verifies it.
func (s *Service) ociFetch(ctx context.Context, ref ociref.Ref, l oci.Layer, key string, prog *progress) (objstore.Info, *catalog.Reason, error) {
	return s.storeVerified(ctx, key, l.Path, l.Desc.Size, func(w io.Writer) (string, error) {
		return s.oci.Download(ctx, ref, l.Desc, w, func(n int64) { prog.add(ctx, n, false) })
	}, ociCode)
}

// ociExtract downloads an archive layer to scratch, verifying it, and only
// then extracts its files into the object store: unverified bytes are never
// unpacked.
func (s *Service) ociExtract(ctx context.Context, ref ociref.Ref, l oci.Layer, prefix string, x *oci.Extractor, prog *progress) ([]catalog.File, *catalog.Reason, error) {
	f, err := os.CreateTemp(s.cfg.ScratchDir, "oci-layer-*")
	if err != nil {
		return nil, nil, fmt.Errorf("guardian: scratch: %w", err)
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	if _, err := s.oci.Download(ctx, ref, l.Desc, f, func(n int64) { prog.add(ctx, n, false) }); err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, &catalog.Reason{Code: ociCode(err), Message: s.redact(err.Error())}, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, fmt.Errorf("guardian: scratch: %w", err)
	}
	var files []catalog.File
	var storeErr error
	err = x.Extract(f, l.Gzip, func(p string, r io.Reader, size int64) error {
		info, err := s.deps.Objects.Put(ctx, prefix+p, r, size, "")
		if err != nil {
			storeErr = fmt.Errorf("guardian: store %s: %w", p, err)
			return storeErr
		}
		files = append(files, catalog.File{Path: p, Size: info.Size, SHA256: info.SHA256})
		return nil
	})
	switch {
	case storeErr != nil:
		return files, nil, storeErr
	case err != nil:
		return files, &catalog.Reason{Code: ociCode(err), Message: fmt.Sprintf("layer %s (%s): %v", l.Desc.Digest, l.Role, err)}, nil
	}
	return files, nil, nil
}
