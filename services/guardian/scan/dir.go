package scan

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

type dirFile struct {
	report  *FileReport
	tensors []string // safetensors tensor names, when valid
	valid   bool
}

// ScanDir scans every file of an upload. Each file is streamed once for its
// SHA-256 and validated according to its sniffed format. It is fail-closed:
// any error, unknown format or code-bearing file is a rejection. manifest
// (path -> expected sha256, optional) is checked for every listed path.
func ScanDir(ctx context.Context, fsys fs.FS, manifest map[string]string) Verdict {
	var v Verdict
	reject := func(code, file, msg string) {
		v.Reasons = append(v.Reasons, Reason{Code: code, File: file, Message: msg})
	}
	files := map[string]*dirFile{}
	var order []string
	var indexes []string
	var readmeLic, configLic, ggufLic string
	var stParams, ggufParams int64

	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			reject(CodeReadError, p, err.Error())
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			reject(CodeReadError, p, "not a regular file: "+d.Type().String())
			return nil
		}
		rep := &FileReport{Path: p}
		df := &dirFile{report: rep}
		files[p] = df
		order = append(order, p)
		scanOne(ctx, fsys, p, df, reject)
		switch rep.Format {
		case "safetensors":
			if df.valid {
				stParams += rep.Params
			}
		case "gguf":
			if df.valid {
				ggufParams += rep.Params
				if ggufLic == "" && rep.License != "" {
					ggufLic = rep.License
				}
			}
		case "json":
			if strings.HasSuffix(p, ".safetensors.index.json") {
				indexes = append(indexes, p)
			}
			if path.Base(p) == "config.json" && path.Dir(p) == "." && rep.License != "" {
				configLic = rep.License
			}
		case "text":
			if strings.EqualFold(p, "README.md") && rep.License != "" {
				readmeLic = rep.License
			}
		}
		return nil
	})
	if err != nil {
		reject(CodeReadError, "", "walking upload: "+err.Error())
	}

	for _, ip := range indexes {
		checkShardIndex(fsys, ip, files, reject)
	}

	mpaths := make([]string, 0, len(manifest))
	for p := range manifest {
		mpaths = append(mpaths, p)
	}
	sort.Strings(mpaths)
	for _, p := range mpaths {
		want := strings.ToLower(strings.TrimSpace(manifest[p]))
		df, ok := files[path.Clean(strings.TrimPrefix(p, "./"))]
		if !ok {
			reject(CodeHashMismatch, p, "file listed in manifest is missing")
			continue
		}
		if df.report.SHA256 == "" || df.report.SHA256 != want {
			reject(CodeHashMismatch, p, fmt.Sprintf("sha256 %s, manifest says %s", df.report.SHA256, want))
		}
	}

	for _, p := range order {
		v.Files = append(v.Files, *files[p].report)
	}
	if len(v.Files) == 0 {
		reject(CodeEmptyUpload, "", "upload contains no files")
	}
	switch {
	case readmeLic != "":
		v.License = normalizeLicense(readmeLic)
	case configLic != "":
		v.License = normalizeLicense(configLic)
	case ggufLic != "":
		v.License = normalizeLicense(ggufLic)
	default:
		v.License = LicenseNeedsReview
	}
	v.Params = stParams
	if v.Params == 0 {
		v.Params = ggufParams
	}
	v.Accepted = len(v.Reasons) == 0
	return v
}

func scanOne(ctx context.Context, fsys fs.FS, p string, df *dirFile, reject func(code, file, msg string)) {
	rep := df.report
	f, err := fsys.Open(p)
	if err != nil {
		rep.Format = "unknown"
		reject(CodeReadError, p, err.Error())
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		rep.Format = "unknown"
		reject(CodeReadError, p, err.Error())
		return
	}
	if !st.Mode().IsRegular() {
		rep.Format = "unknown"
		reject(CodeReadError, p, "not a regular file")
		return
	}
	rep.Size = st.Size()
	ra, ok := f.(io.ReaderAt)
	if !ok {
		rep.Format = "unknown"
		reject(CodeReadError, p, "file does not support random access")
		return
	}
	// Stream once for the hash.
	h := sha256.New()
	n, err := io.Copy(h, &ctxReader{ctx: ctx, r: io.NewSectionReader(ra, 0, rep.Size)})
	if err != nil {
		rep.Format = "unknown"
		reject(CodeReadError, p, "hashing: "+err.Error())
		return
	}
	if n != rep.Size {
		rep.Format = "unknown"
		reject(CodeReadError, p, fmt.Sprintf("read %d bytes, stat says %d", n, rep.Size))
		return
	}
	rep.SHA256 = hex.EncodeToString(h.Sum(nil))

	headLen := min(rep.Size, sniffHeadLen)
	head := make([]byte, headLen)
	if err := readAtFull(ra, head, 0); err != nil {
		rep.Format = "unknown"
		reject(CodeReadError, p, "reading head: "+err.Error())
		return
	}
	rep.Format = Sniff(p, head)
	switch rep.Format {
	case "empty":
		df.valid = true
	case "safetensors":
		r, names, rs := scanSafetensors(ra, rep.Size)
		r.Path, r.SHA256 = rep.Path, rep.SHA256
		*rep = r
		for _, x := range rs {
			reject(x.Code, p, x.Message)
		}
		df.tensors = names
		df.valid = len(rs) == 0
	case "gguf":
		r, rs := ScanGGUF(ra, rep.Size)
		r.Path, r.SHA256 = rep.Path, rep.SHA256
		*rep = r
		for _, x := range rs {
			reject(x.Code, p, x.Message)
		}
		df.valid = len(rs) == 0
	case "json", "text":
		if rep.Size > maxSmallFileForParsing {
			reject(CodeUnknownFormat, p, fmt.Sprintf("%s file of %d bytes is too large", rep.Format, rep.Size))
			return
		}
		data := make([]byte, rep.Size)
		if err := readAtFull(ra, data, 0); err != nil {
			reject(CodeReadError, p, err.Error())
			return
		}
		if !isText(data) {
			rep.Format = "unknown"
			reject(CodeUnknownFormat, p, "file is not UTF-8 text throughout")
			return
		}
		if looksLikePickleText(data) {
			rep.Format = "pickle"
			reject(CodePickle, p, "protocol-0 pickle content")
			return
		}
		if rep.Format == "json" {
			val, err := decodeStrict(data)
			if err != nil {
				var dup *errDuplicateKey
				if errors.As(err, &dup) && strings.HasSuffix(p, ".safetensors.index.json") {
					reject(CodeShardDuplicate, p, "shard index: "+err.Error())
				} else {
					reject(CodeJSONInvalid, p, err.Error())
				}
				return
			}
			if path.Base(p) == "config.json" {
				if obj, ok := val.(*jsonObject); ok {
					if s, ok := obj.Values["license"].(string); ok {
						rep.License = s
					}
				}
			}
		} else if strings.EqualFold(path.Base(p), "README.md") {
			// license_name / license_link only qualify "other", which
			// always needs review; the id comes from "license".
			lic, _, _ := readmeLicense(data)
			rep.License = lic
		}
		df.valid = true
	case "pickle":
		reject(CodePickle, p, "pickle content is code-bearing and never loaded")
	case "zip":
		reject(CodeZip, p, "zip archives (e.g. torch .pt/.pth) are code-bearing and never unpacked")
		checkZipNames(ra, rep.Size, p, reject)
	case "keras":
		reject(CodeKeras, p, "HDF5/Keras files may embed code and are refused")
	case "python":
		reject(CodePython, p, "Python source is code and is refused")
	default:
		reject(CodeUnknownFormat, p, "content is not safetensors, GGUF, JSON or UTF-8 text")
	}
}

// checkZipNames reads only the central directory to report path traversal.
func checkZipNames(ra io.ReaderAt, size int64, p string, reject func(code, file, msg string)) {
	zr, err := zip.NewReader(ra, size)
	if zr == nil {
		if err != nil {
			reject(CodeZip, p, "unreadable zip directory: "+err.Error())
		}
		return
	}
	for _, zf := range zr.File {
		name := strings.ReplaceAll(zf.Name, "\\", "/")
		bad := strings.HasPrefix(name, "/") || (len(name) >= 2 && name[1] == ':')
		for _, el := range strings.Split(name, "/") {
			if el == ".." {
				bad = true
			}
		}
		if bad {
			reject(CodeZipTraversal, p, fmt.Sprintf("zip entry %q escapes the archive", zf.Name))
		}
	}
}

func checkShardIndex(fsys fs.FS, ip string, files map[string]*dirFile, reject func(code, file, msg string)) {
	df := files[ip]
	if df == nil || !df.valid {
		return // already rejected
	}
	data, err := fs.ReadFile(fsys, ip)
	if err != nil {
		reject(CodeReadError, ip, err.Error())
		return
	}
	val, err := decodeStrict(data)
	if err != nil {
		var dup *errDuplicateKey
		if errors.As(err, &dup) {
			reject(CodeShardDuplicate, ip, err.Error())
		} else {
			reject(CodeShardIndex, ip, err.Error())
		}
		return
	}
	obj, ok := val.(*jsonObject)
	if !ok {
		reject(CodeShardIndex, ip, "index is not a JSON object")
		return
	}
	wm, ok := obj.Values["weight_map"].(*jsonObject)
	if !ok {
		reject(CodeShardIndex, ip, "missing or invalid weight_map")
		return
	}
	dir := path.Dir(ip)
	mapped := map[string]map[string]bool{} // shard -> tensors
	for _, tensor := range wm.Keys {
		file, ok := wm.Values[tensor].(string)
		if !ok || file == "" {
			reject(CodeShardIndex, ip, fmt.Sprintf("weight_map[%q] is not a file name", tensor))
			continue
		}
		if strings.ContainsAny(file, "\\\x00") || strings.HasPrefix(file, "/") {
			reject(CodeShardIndex, ip, fmt.Sprintf("weight_map[%q] = %q points outside the upload", tensor, file))
			continue
		}
		full := path.Join(dir, file)
		if !fs.ValidPath(full) || strings.HasPrefix(full, "../") || full == ".." {
			reject(CodeShardIndex, ip, fmt.Sprintf("weight_map[%q] = %q points outside the upload", tensor, file))
			continue
		}
		sf := files[full]
		if sf == nil {
			reject(CodeShardIndex, ip, fmt.Sprintf("weight_map[%q] = %q is not a file of this upload", tensor, file))
			continue
		}
		if sf.report.Format != "safetensors" {
			reject(CodeShardIndex, ip, fmt.Sprintf("weight_map[%q] = %q is not a safetensors file", tensor, file))
			continue
		}
		if mapped[full] == nil {
			mapped[full] = map[string]bool{}
		}
		mapped[full][tensor] = true
	}
	shards := make([]string, 0, len(mapped))
	for s := range mapped {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	owner := map[string]string{}
	for _, s := range shards {
		sf := files[s]
		if !sf.valid {
			continue // its own reasons already reject it
		}
		have := map[string]bool{}
		for _, t := range sf.tensors {
			have[t] = true
			if prev, dup := owner[t]; dup {
				reject(CodeShardDuplicate, s, fmt.Sprintf("tensor %q also in shard %s", t, prev))
				continue
			}
			owner[t] = s
		}
		want := make([]string, 0, len(mapped[s]))
		for t := range mapped[s] {
			want = append(want, t)
		}
		sort.Strings(want)
		for _, t := range want {
			if !have[t] {
				reject(CodeShardIndex, ip, fmt.Sprintf("tensor %q mapped to %s, which does not contain it", t, s))
			}
		}
		for _, t := range sf.tensors {
			if !mapped[s][t] {
				reject(CodeShardIndex, ip, fmt.Sprintf("shard %s holds tensor %q that the index maps elsewhere or not at all", s, t))
			}
		}
	}
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
