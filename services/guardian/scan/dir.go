package scan

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

type dirFile struct {
	report  *FileReport
	tensors []string // safetensors tensor names, when valid
	json    any      // the decoded document of a valid JSON file
	valid   bool
}

// Upload kinds (the catalog's model kinds).
const (
	KindModel   = "model"
	KindAdapter = "adapter"
)

const (
	// hashBufferSize is the read size of the hashing pass: large reads keep
	// the syscall count low so SHA-256 dominates.
	hashBufferSize = 1 << 20
	// spoolInMemory is the largest stream kept in memory instead of a
	// scratch file when a file does not support random access.
	spoolInMemory = 1 << 20
	// readAhead is how many hashBufferSize buffers a large file's reader
	// may fill ahead of the hash.
	readAhead = 3
)

// Options tunes ScanDirWith.
type Options struct {
	// Manifest maps upload paths to expected SHA-256 (hex); optional.
	Manifest map[string]string
	// Kind is "model" (the default when empty) or "adapter". An adapter
	// needs adapter_config.json (LoRA, integer r > 0) and safetensors weights.
	Kind string
	// ScratchDir holds temporary copies of files that are plain streams
	// (not io.ReaderAt); default os.TempDir(). Copies are removed after use.
	ScratchDir string
}

type dirScan struct {
	ctx     context.Context
	fsys    fs.FS
	opts    Options
	small   []byte   // hashing buffer for small files, grown on demand
	bufs    [][]byte // read-ahead buffers for large files, made on first use
	reasons []Reason
}

func (s *dirScan) reject(code, file, msg string) {
	s.reasons = append(s.reasons, Reason{Code: code, File: file, Message: msg})
}

// ScanDirWith is ScanDir with options: the manifest, the kind of upload and
// where plain streams are spooled.
func ScanDirWith(ctx context.Context, fsys fs.FS, opts Options) Verdict {
	var v Verdict
	s := &dirScan{ctx: ctx, fsys: fsys, opts: opts}
	reject := s.reject
	files := map[string]*dirFile{}
	var order []string
	var indexes []string
	var readmeLic, configLic, ggufLic string
	var tokTemplate, ggufTemplate string
	var stParams, ggufParams int64
	var stFiles, ggufFiles int
	stDTypes, ggufDTypes := map[string]int64{}, map[string]int64{}

	switch opts.Kind {
	case "", KindModel, KindAdapter:
	default:
		reject(CodeKind, "", fmt.Sprintf("kind %q is not %q or %q", opts.Kind, KindModel, KindAdapter))
	}

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
		s.scanOne(p, df)
		switch rep.Format {
		case "safetensors":
			if df.valid {
				stFiles++
				stParams += rep.Params
				for k, n := range rep.DTypes {
					stDTypes[k] += n
				}
			}
		case "gguf":
			if df.valid {
				ggufFiles++
				ggufParams += rep.Params
				for k, n := range rep.DTypes {
					ggufDTypes[k] += n
				}
				if ggufLic == "" && rep.License != "" {
					ggufLic = rep.License
				}
				if ggufTemplate == "" {
					ggufTemplate = rep.ChatTemplate
				}
			}
		case "json":
			if strings.HasSuffix(p, ".safetensors.index.json") {
				indexes = append(indexes, p)
			}
			if rep.ChatTemplate != "" && (tokTemplate == "" || path.Dir(p) == ".") {
				tokTemplate = rep.ChatTemplate
			}
			if path.Base(p) == "config.json" && path.Dir(p) == "." && rep.License != "" {
				configLic = rep.License
			}
		case "text":
			if strings.EqualFold(p, "README.md") && rep.License != "" {
				readmeLic = rep.License
				v.LicenseName, v.LicenseLink = rep.LicenseName, rep.LicenseLink
			}
		}
		return nil
	})
	if err != nil {
		reject(CodeReadError, "", "walking upload: "+err.Error())
	}

	for _, ip := range indexes {
		checkShardIndex(ip, files, reject)
	}
	if opts.Kind == KindAdapter {
		v.BaseModel = checkAdapter(files, reject)
	}

	mpaths := make([]string, 0, len(opts.Manifest))
	for p := range opts.Manifest {
		mpaths = append(mpaths, p)
	}
	sort.Strings(mpaths)
	for _, p := range mpaths {
		want := strings.ToLower(strings.TrimSpace(opts.Manifest[p]))
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
	v.ChatTemplate = tokTemplate
	if v.ChatTemplate == "" {
		v.ChatTemplate = ggufTemplate
	}
	if len(v.ChatTemplate) > MaxChatTemplate {
		cut := MaxChatTemplate
		for cut > 0 && !utf8.RuneStart(v.ChatTemplate[cut]) {
			cut--
		}
		v.ChatTemplate, v.ChatTemplateTruncated = v.ChatTemplate[:cut], true
	}
	switch {
	case stFiles > 0:
		v.Format, v.Params, v.DTypes = "safetensors", stParams, stDTypes
	case ggufFiles > 0:
		v.Format, v.Params, v.DTypes = "gguf", ggufParams, ggufDTypes
	}
	v.Reasons = s.reasons
	v.Accepted = len(v.Reasons) == 0
	return v
}

// checkAdapter validates a LoRA adapter upload and returns its declared
// base model.
func checkAdapter(files map[string]*dirFile, reject func(code, file, msg string)) string {
	const cfg = "adapter_config.json"
	weights := 0
	for p, df := range files {
		if df.valid && df.report.Format == "safetensors" && strings.HasSuffix(strings.ToLower(p), ".safetensors") {
			weights++
		}
	}
	if weights == 0 {
		reject(CodeAdapter, "", "an adapter needs at least one valid *.safetensors weight file")
	}
	df := files[cfg]
	if df == nil {
		reject(CodeAdapter, cfg, "an adapter needs adapter_config.json")
		return ""
	}
	obj, ok := df.json.(*jsonObject)
	if !df.valid || !ok {
		reject(CodeAdapter, cfg, "adapter_config.json is not a valid JSON object")
		return ""
	}
	if pt, ok := obj.Values["peft_type"].(string); !ok || !strings.EqualFold(pt, "LORA") {
		reject(CodeAdapter, cfg, fmt.Sprintf("peft_type %v is not LORA", obj.Values["peft_type"]))
	}
	rank, ok := obj.Values["r"].(json.Number)
	if r, err := strconv.ParseInt(string(rank), 10, 64); !ok || err != nil || r <= 0 {
		reject(CodeAdapter, cfg, fmt.Sprintf("r %v is not a positive integer", obj.Values["r"]))
	}
	switch base := obj.Values["base_model_name_or_path"].(type) {
	case string:
		return base
	case nil:
		return ""
	default:
		reject(CodeAdapter, cfg, "base_model_name_or_path is not a string")
		return ""
	}
}

// open opens p and returns random access to its content and its SHA-256,
// reading it exactly once. Files that are plain streams are spooled (to
// memory when small, else to a scratch file) while being hashed.
func (s *dirScan) open(p string, rep *FileReport) (ra io.ReaderAt, sum string, cleanup func(), err error) {
	cleanup = func() {}
	f, err := s.fsys.Open(p)
	if err != nil {
		return nil, "", cleanup, err
	}
	closeF := func() { f.Close() }
	st, err := f.Stat()
	if err != nil {
		closeF()
		return nil, "", cleanup, err
	}
	if !st.Mode().IsRegular() {
		closeF()
		return nil, "", cleanup, errors.New("not a regular file")
	}
	rep.Size = st.Size()
	if rep.Size < 0 {
		closeF()
		return nil, "", cleanup, fmt.Errorf("negative size %d", rep.Size)
	}
	h := sha256.New()
	if fra, ok := f.(io.ReaderAt); ok {
		n, err := s.copy(h, &ctxReader{ctx: s.ctx, r: io.NewSectionReader(fra, 0, rep.Size)}, rep.Size)
		if err == nil && n != rep.Size {
			err = fmt.Errorf("read %d bytes, stat says %d", n, rep.Size)
		}
		if err != nil {
			closeF()
			return nil, "", cleanup, fmt.Errorf("hashing: %w", err)
		}
		return fra, hex.EncodeToString(h.Sum(nil)), closeF, nil
	}
	defer closeF()
	// A stream: one more byte than stat promises tells a longer stream.
	src := &ctxReader{ctx: s.ctx, r: io.LimitReader(f, rep.Size+1)}
	if rep.Size <= spoolInMemory {
		data, err := io.ReadAll(src)
		if err == nil && int64(len(data)) != rep.Size {
			err = fmt.Errorf("read %d bytes, stat says %d", len(data), rep.Size)
		}
		if err != nil {
			return nil, "", cleanup, fmt.Errorf("reading stream: %w", err)
		}
		h.Write(data)
		return bytes.NewReader(data), hex.EncodeToString(h.Sum(nil)), cleanup, nil
	}
	tmp, err := os.CreateTemp(s.opts.ScratchDir, "aiforge-scan-*")
	if err != nil {
		return nil, "", cleanup, fmt.Errorf("scratch file: %w", err)
	}
	cleanup = func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}
	n, err := s.copy(io.MultiWriter(h, tmp), src, rep.Size)
	if err == nil && n != rep.Size {
		err = fmt.Errorf("read %d bytes, stat says %d", n, rep.Size)
	}
	if err != nil {
		cleanup()
		return nil, "", func() {}, fmt.Errorf("spooling stream: %w", err)
	}
	return tmp, hex.EncodeToString(h.Sum(nil)), cleanup, nil
}

// copy streams src into dst (the hash, and the scratch file for streams).
// Files larger than one buffer are read ahead by a second goroutine, so
// reading (disk, network, page cache) overlaps hashing.
func (s *dirScan) copy(dst io.Writer, src io.Reader, size int64) (int64, error) {
	if size < hashBufferSize {
		want := int(max(size+1, 4096)) // +1: a longer stream shows in one read
		if len(s.small) < want {
			s.small = make([]byte, want)
		}
		return io.CopyBuffer(dst, src, s.small[:want])
	}
	if s.bufs == nil {
		s.bufs = make([][]byte, readAhead)
		for i := range s.bufs {
			s.bufs[i] = make([]byte, hashBufferSize)
		}
	}
	type chunk struct {
		b   []byte
		err error
	}
	free := make(chan []byte, len(s.bufs))
	full := make(chan chunk, len(s.bufs)+1) // every buffer plus one error
	stop := make(chan struct{})
	for _, b := range s.bufs {
		free <- b
	}
	go func() {
		defer close(full)
		for {
			var b []byte
			select {
			case b = <-free:
			case <-stop:
				return
			}
			n, err := io.ReadFull(src, b)
			if n > 0 {
				full <- chunk{b: b[:n]}
			}
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF {
					full <- chunk{err: err}
				}
				return
			}
		}
	}()
	var total int64
	var err error
	for c := range full { // drained to the end: the reader never leaks
		switch {
		case err != nil:
		case c.err != nil:
			err = c.err
		default:
			if _, werr := dst.Write(c.b); werr != nil {
				err = werr
				close(stop)
				continue
			}
			total += int64(len(c.b))
			free <- c.b[:cap(c.b)]
		}
	}
	return total, err
}

func (s *dirScan) scanOne(p string, df *dirFile) {
	reject := s.reject
	rep := df.report
	ra, sum, cleanup, err := s.open(p, rep)
	defer cleanup()
	if err != nil {
		rep.Format = "unknown"
		reject(CodeReadError, p, err.Error())
		return
	}
	rep.SHA256 = sum

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
		df.valid = len(rs) == 0 && !s.zipPolyglot(ra, rep.Size, p)
	case "gguf":
		r, rs := ScanGGUF(ra, rep.Size)
		r.Path, r.SHA256 = rep.Path, rep.SHA256
		*rep = r
		for _, x := range rs {
			reject(x.Code, p, x.Message)
		}
		df.valid = len(rs) == 0 && !s.zipPolyglot(ra, rep.Size, p)
	case "sentencepiece":
		if _, err := scanSentencePiece(ra, rep.Size); err != nil {
			reject(CodeSentencePiece, p, "not a valid SentencePiece model: "+err.Error())
			return
		}
		df.valid = !s.zipPolyglot(ra, rep.Size, p)
	case "image":
		df.valid = !s.zipPolyglot(ra, rep.Size, p)
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
			df.json = val
			if path.Base(p) == "config.json" {
				if obj, ok := val.(*jsonObject); ok {
					if s, ok := obj.Values["license"].(string); ok {
						rep.License = s
					}
				}
			}
			if path.Base(p) == "tokenizer_config.json" {
				rep.ChatTemplate = chatTemplateOf(val)
			}
		} else if strings.EqualFold(path.Base(p), "README.md") {
			// license_name / license_link only qualify "other", which
			// always needs review; the id comes from "license".
			lic, name, link := readmeLicense(data)
			rep.License, rep.LicenseName, rep.LicenseLink = lic, bounded(name, 256), bounded(link, 1024)
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
		reject(CodeUnknownFormat, p, "content is not safetensors, GGUF, SentencePiece, an image, JSON or UTF-8 text")
	}
}

// zipPolyglot rejects an accepted binary format that also parses as a zip
// archive from its end (a zip appended to, or hidden in the data of, a
// weight file or image), reporting whether it did.
func (s *dirScan) zipPolyglot(ra io.ReaderAt, size int64, p string) bool {
	ok, err := hasZipEnd(ra, size)
	if err != nil {
		s.reject(CodeReadError, p, "reading tail: "+err.Error())
		return true
	}
	if ok {
		s.reject(CodeZip, p, "file is also a zip archive (polyglot)")
		checkZipNames(ra, size, p, s.reject)
	}
	return ok
}

// hasZipEnd reports whether the file also reads as a non-empty zip archive
// from its end, as zip readers (Go's, Python's) find one: an end record in
// the tail whose central directory entries carry their signatures. Only the
// tail and the directory are read; nothing is unpacked.
func hasZipEnd(ra io.ReaderAt, size int64) (bool, error) {
	if size < 22 {
		return false, nil
	}
	zr, _ := zip.NewReader(ra, size)
	return zr != nil && len(zr.File) > 0, nil
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

func checkShardIndex(ip string, files map[string]*dirFile, reject func(code, file, msg string)) {
	df := files[ip]
	if df == nil || !df.valid {
		return // already rejected
	}
	obj, ok := df.json.(*jsonObject)
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

// chatTemplateOf returns a tokenizer config's chat_template as text: the
// string itself, or, for the list form ([{"name": …, "template": …}]), the
// "default" template, else the first. It is never rendered.
func chatTemplateOf(v any) string {
	obj, ok := v.(*jsonObject)
	if !ok {
		return ""
	}
	switch t := obj.Values["chat_template"].(type) {
	case string:
		return t
	case []any:
		first := ""
		for _, item := range t {
			o, ok := item.(*jsonObject)
			if !ok {
				continue
			}
			tmpl, _ := o.Values["template"].(string)
			if name, _ := o.Values["name"].(string); name == "default" && tmpl != "" {
				return tmpl
			}
			if first == "" {
				first = tmpl
			}
		}
		return first
	}
	return ""
}

// bounded cuts s to at most n bytes, at a rune boundary.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
