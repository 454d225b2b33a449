package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
)

// SourceRepo is the Repo of a bucket folder's catalog source.
func SourceRepo(bucket, folder string) string { return "s3://" + bucket + "/" + folder }

// UploadedID is the event id of the upload event of a bucket version.
func UploadedID(name string, version int) string {
	return fmt.Sprintf("bucket-uploaded-%s-v%d", name, version)
}

func isNoSuchKey(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == "NoSuchKey" || r.StatusCode == http.StatusNotFound && r.Code != "NoSuchBucket"
}

// importFolder makes (or resumes) the folder's catalog version, checks
// and copies its files and hands it to the scanner. A returned error is
// transient (tried again); a rule broken is an outcome with reasons.
func (w *Watcher) importFolder(ctx context.Context, tc *tenantClient, name string, l *listing, f *Folder, key string, log *slog.Logger) (outcome, error) {
	tenant := tc.c.Tenant
	mctx, mcancel := context.WithTimeout(ctx, w.cfg.ListTimeout)
	defer mcancel()
	obj, err := tc.s3.GetObject(mctx, tc.c.Bucket, l.folder+ManifestName, minio.GetObjectOptions{})
	if err != nil {
		return outcome{}, fmt.Errorf("reading the manifest: %w", err)
	}
	defer func() { _ = obj.Close() }()
	st, err := obj.Stat()
	if err != nil {
		return outcome{}, fmt.Errorf("reading the manifest: %w", err)
	}
	if strings.Trim(st.ETag, `"`) != l.manifestETag {
		return outcome{}, errors.New("the manifest changed while it was read")
	}
	m, reasons := parseManifest(obj, w.cfg.Limits)

	model := name
	if m.Name != "" && safePath(m.Name) && !strings.Contains(m.Name, "/") {
		model = m.Name
	}
	catName := tenant + "/" + model
	if err := catalog.ValidateName(catName); err != nil {
		if model == name || catalog.ValidateName(tenant+"/"+name) != nil {
			// Nothing can be recorded in the catalog under this folder.
			return outcome{status: FolderRejected, reasons: []events.ModelReason{{Code: CodeManifestInvalid,
				Message: fmt.Sprintf("%q is not a catalog name: %v", bounded(catName), err)}}}, nil
		}
		reasons = append(reasons, events.ModelReason{Code: CodeManifestInvalid, File: ManifestName, Message: fmt.Sprintf("name %q does not make a catalog name", bounded(m.Name))})
		catName = tenant + "/" + name
	}
	kind, base := m.Kind, m.BaseModel
	if kind != events.ModelKindModel && kind != events.ModelKindAdapter || kind == events.ModelKindAdapter && base == "" {
		kind, base = events.ModelKindModel, ""
	}
	if kind == events.ModelKindModel {
		base = ""
	}
	src := catalog.Source{Type: events.ModelSourceBucket, Repo: SourceRepo(tc.c.Bucket, l.folder), Commit: l.manifestETag}

	v, done, err := w.version(ctx, tenant, catName, kind, base, src)
	if err != nil {
		if errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrInvalid) {
			return outcome{status: FolderRejected, model: catName, reasons: []events.ModelReason{{Code: CodeCatalogRefused, Message: err.Error()}}}, nil
		}
		return outcome{}, err
	}
	out := outcome{status: FolderImported, model: catName, version: v.Version}
	if done != nil {
		return *done, nil
	}
	if err := w.record(ctx, key, func(r *Folder) { r.Model, r.Version = catName, v.Version }); err != nil {
		return outcome{}, err
	}
	log = log.With("model", catName, "version", v.Version)
	reject := func(stored []catalog.File, rs []events.ModelReason) (outcome, error) {
		if err := w.d.Reject(ctx, catName, v.Version, stored, rs...); err != nil {
			return outcome{}, err
		}
		out.status, out.reasons = FolderRejected, rs
		return out, nil
	}
	if len(reasons) > 0 {
		return reject(nil, reasons)
	}
	if rs := compare(m, l, w.cfg.MaxFiles); len(rs) > 0 {
		return reject(nil, rs)
	}

	files := append([]events.ModelFile(nil), m.Files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	stored := make([]catalog.File, 0, len(files))
	manifest := map[string]string{}
	leased := time.Now()
	for _, mf := range files {
		mf.SHA256 = strings.ToLower(mf.SHA256)
		manifest[mf.Path] = mf.SHA256
		okey := v.Prefix + mf.Path
		if info, err := w.d.Objects.Stat(ctx, okey); err == nil && info.Size == mf.Size && info.SHA256 == mf.SHA256 {
			stored = append(stored, mf)
			continue // copied before an interruption
		}
		reason, err := w.copyFile(ctx, tc, l.folder+mf.Path, okey, mf)
		if err != nil {
			return outcome{}, fmt.Errorf("copying %s: %w", mf.Path, err)
		}
		if reason != nil {
			return reject(stored, []events.ModelReason{*reason})
		}
		stored = append(stored, mf)
		out.files++
		out.bytes += mf.Size
		if time.Since(leased) > w.cfg.LeaseTTL/3 {
			leased = time.Now()
			if err := w.record(ctx, key, func(r *Folder) { r.LeaseUntil = leased.Add(w.cfg.LeaseTTL).UTC() }); err != nil {
				log.Warn("extending a bucket folder's lease", "err", err)
			}
		}
	}
	if _, err := w.d.Catalog.UpdateVersion(ctx, catName, v.Version, func(cv *catalog.Version) error {
		cv.Status, cv.Files, cv.Source = catalog.StatusScanning, stored, src
		return nil
	}); err != nil && !errors.Is(err, catalog.ErrConflict) {
		return outcome{}, err
	}
	if err := w.publishUploaded(ctx, tenant, catName, kind, base, v.Version, v.Prefix, src, stored, manifest); err != nil {
		return outcome{}, err
	}
	return out, nil
}

func (w *Watcher) publishUploaded(ctx context.Context, tenant, name, kind, base string, version int, prefix string, src catalog.Source, files []catalog.File, manifest map[string]string) error {
	up := events.ModelUploadedV1{
		Name: name, Version: version, Kind: kind, BaseModel: base, Source: src,
		Prefix: prefix, Files: files, Manifest: manifest, UploadedAt: time.Now().UTC(),
	}
	if _, err := events.Publish(ctx, w.d.JS, up, events.Envelope{ID: UploadedID(name, version), Source: "guardian", Tenant: tenant}); err != nil {
		return fmt.Errorf("publish upload: %w", err)
	}
	return nil
}

// version finds the catalog version of src (an import interrupted, or one
// done but not recorded) or adds it. done is the outcome when the version
// was already handed over.
func (w *Watcher) version(ctx context.Context, tenant, name, kind, base string, src catalog.Source) (catalog.Version, *outcome, error) {
	e, err := w.d.Catalog.Get(ctx, name)
	switch {
	case err == nil:
		for i := len(e.Versions) - 1; i >= 0; i-- {
			v := e.Versions[i]
			if v.Source != src {
				continue
			}
			o := outcome{status: FolderImported, model: name, version: v.Version}
			switch v.Status {
			case catalog.StatusUploading:
				return v, nil, nil
			case catalog.StatusRejected:
				o.status, o.reasons = FolderRejected, v.Reasons
			case catalog.StatusScanning:
				// Handed over; the upload event may not have gone out
				// (same id: deduplicated when it had).
				manifest := map[string]string{}
				for _, f := range v.Files {
					manifest[f.Path] = f.SHA256
				}
				if err := w.publishUploaded(ctx, tenant, name, e.Kind, e.BaseModel, v.Version, v.Prefix, src, v.Files, manifest); err != nil {
					return catalog.Version{}, nil, err
				}
			}
			return v, &o, nil
		}
	case errors.Is(err, catalog.ErrNotFound):
	default:
		return catalog.Version{}, nil, err
	}
	v, err := w.d.Catalog.AddOwnedVersion(ctx, tenant, name, kind, base, catalog.Version{Status: catalog.StatusUploading, Source: src})
	return v, nil, err
}

// compare checks the folder's listing against the manifest.
func compare(m Manifest, l *listing, maxFiles int) []events.ModelReason {
	var rs []events.ModelReason
	if l.count > maxFiles {
		return []events.ModelReason{{Code: CodeTooManyFiles, Message: fmt.Sprintf("the folder holds more than %d files", maxFiles)}}
	}
	for _, p := range l.unsafe {
		rs = append(rs, events.ModelReason{Code: CodeUnsafePath, File: bounded(p), Message: "the folder holds a file whose path is not a safe relative path"})
	}
	listed := map[string]bool{}
	for _, f := range m.Files {
		listed[f.Path] = true
		size, ok := l.files[f.Path]
		switch {
		case !ok:
			rs = append(rs, events.ModelReason{Code: CodeFileMissing, File: f.Path, Message: "the manifest lists a file the folder does not hold"})
		case size != f.Size:
			rs = append(rs, events.ModelReason{Code: CodeSizeMismatch, File: f.Path, Message: fmt.Sprintf("the file is %d bytes, the manifest says %d", size, f.Size)})
		}
	}
	extra := make([]string, 0)
	for p := range l.files {
		if !listed[p] {
			extra = append(extra, p)
		}
	}
	sort.Strings(extra)
	for _, p := range extra {
		rs = append(rs, events.ModelReason{Code: CodeUnexpectedFile, File: p, Message: "the folder holds a file the manifest does not list"})
	}
	return rs
}

// countReader counts what it reads and keeps the first error.
type countReader struct {
	r    io.Reader
	n    int64
	err  error
	seen atomic.Int64 // n, for the stall watchdog
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.seen.Store(c.n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// errStalled: a tenant's S3 stopped sending a file's bytes.
var errStalled = errors.New("the bucket stopped sending data")

// watchStall cancels ctx when cr makes no progress for stall; stop ends
// the watch.
func watchStall(ctx context.Context, cancel context.CancelCauseFunc, cr *countReader, stall time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(stall / 4)
		defer t.Stop()
		last, since := int64(-1), time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if n := cr.seen.Load(); n != last {
					last, since = n, time.Now()
				} else if time.Since(since) >= stall {
					cancel(errStalled)
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// copyFile streams one file from the tenant's bucket into the object
// store, which hashes it while writing.
func (w *Watcher) copyFile(ctx context.Context, tc *tenantClient, src, dst string, mf events.ModelFile) (*events.ModelReason, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	obj, err := tc.s3.GetObject(ctx, tc.c.Bucket, src, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = obj.Close() }()
	st, err := obj.Stat()
	if err != nil {
		if isNoSuchKey(err) {
			return &events.ModelReason{Code: CodeFileMissing, File: mf.Path, Message: "the file vanished from the folder"}, nil
		}
		return nil, err
	}
	if st.Size != mf.Size {
		return &events.ModelReason{Code: CodeSizeMismatch, File: mf.Path, Message: fmt.Sprintf("the file is %d bytes, the manifest says %d", st.Size, mf.Size)}, nil
	}
	cr := &countReader{r: obj}
	stop := watchStall(ctx, cancel, cr, w.cfg.StallTimeout)
	info, err := w.d.Objects.Put(ctx, dst, cr, mf.Size, "")
	stop()
	if errors.Is(context.Cause(ctx), errStalled) {
		return nil, fmt.Errorf("%w for %s", errStalled, w.cfg.StallTimeout)
	}
	if err != nil {
		if (cr.err == nil || errors.Is(cr.err, io.EOF)) && cr.n != mf.Size {
			return &events.ModelReason{Code: CodeSizeMismatch, File: mf.Path, Message: "the file changed size while it was copied"}, nil
		}
		return nil, err
	}
	if !strings.EqualFold(info.SHA256, mf.SHA256) || info.Size != mf.Size {
		_ = w.d.Objects.Delete(ctx, dst)
		return &events.ModelReason{Code: CodeHashMismatch, File: mf.Path,
			Message: fmt.Sprintf("the file's sha256 is %s (%d bytes), the manifest says %s (%d bytes)", info.SHA256, info.Size, mf.SHA256, mf.Size)}, nil
	}
	return nil, nil
}
