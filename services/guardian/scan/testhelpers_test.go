package scan

import (
	"context"
	"io"
	"io/fs"
)

// ScanDir scans every file of an upload. Each file is streamed once for its
// SHA-256 and validated according to its sniffed format. It is fail-closed:
// any error, unknown format or code-bearing file is a rejection. manifest
// (path -> expected sha256, optional) is checked for every listed path.
func ScanDir(ctx context.Context, fsys fs.FS, manifest map[string]string) Verdict {
	return ScanDirWith(ctx, fsys, Options{Manifest: manifest})
}

// ScanSafetensors fully validates a safetensors file. It never reads past
// size and never allocates more than the (bounded, checked) header length.
func ScanSafetensors(r io.ReaderAt, size int64) (FileReport, []Reason) {
	rep, _, reasons := scanSafetensors(r, size)
	return rep, reasons
}
