package scan

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"testing"
)

var (
	pngFile  = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x01")
	jpegFile = []byte("\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01")
	gifFile  = []byte("GIF89a\x01\x00\x01\x00\x80\x00\x00")
	webpFile = []byte("RIFF\x1a\x00\x00\x00WEBPVP8 \x0e\x00\x00\x00")
)

func TestImagesAccepted(t *testing.T) {
	st := writeST(nil, stT{"w", "U8", []int64{4}})
	v := scanFiles(map[string][]byte{
		"model.safetensors": st,
		"assets/logo.png":   pngFile,
		"photo.jpg":         jpegFile,
		"anim.gif":          gifFile,
		"card.webp":         webpFile,
	}, nil)
	if !v.Accepted {
		t.Fatalf("%v", v.Reasons)
	}
	images := 0
	for _, f := range v.Files {
		if f.Format == "image" {
			images++
		}
	}
	if images != 4 {
		t.Fatalf("%+v", v.Files)
	}
	// only the magic bytes count: RIFF that is not WebP stays unknown
	v = scanFiles(map[string][]byte{"a.webp": []byte("RIFF\x1a\x00\x00\x00WAVEfmt ")}, nil)
	if v.Accepted || !hasCode(v.Reasons, CodeUnknownFormat) {
		t.Fatalf("%v", v.Reasons)
	}
}

func TestVerdictWeightsSummary(t *testing.T) {
	s1 := writeST(nil, stT{"a", "F32", []int64{2}}, stT{"b", "BF16", []int64{3}})
	s2 := writeST(nil, stT{"c", "BF16", []int64{5}})
	v := scanFiles(map[string][]byte{"a.safetensors": s1, "b.safetensors": s2, "config.json": []byte(`{}`)}, nil)
	if !v.Accepted || v.Format != "safetensors" || v.Params != 10 || v.DTypes["BF16"] != 8 || v.DTypes["F32"] != 2 || len(v.DTypes) != 2 {
		t.Fatalf("%+v", v)
	}
	v = scanFiles(map[string][]byte{"m.gguf": validGGUF()}, nil)
	if !v.Accepted || v.Format != "gguf" || v.DTypes["Q4_K"] != 256 || v.Params != 384 {
		t.Fatalf("%+v", v)
	}
	v = scanFiles(map[string][]byte{"README.md": []byte("# x\n")}, nil)
	if !v.Accepted || v.Format != "" || v.Params != 0 || len(v.DTypes) != 0 {
		t.Fatalf("%+v", v)
	}
}

func scanAdapter(files map[string][]byte) Verdict {
	return ScanDirWith(context.Background(), mapFS(files), Options{Kind: KindAdapter})
}

func TestAdapter(t *testing.T) {
	w := writeST(nil, stT{"base_model.model.layers.0.q_proj.lora_A.weight", "F16", []int64{8, 16}})
	cfg := []byte(`{"peft_type":"LORA","r":8,"lora_alpha":16,"base_model_name_or_path":"meta-llama/Llama-3.1-8B","target_modules":["q_proj"]}`)
	v := scanAdapter(map[string][]byte{"adapter_config.json": cfg, "adapter_model.safetensors": w})
	if !v.Accepted || v.BaseModel != "meta-llama/Llama-3.1-8B" || v.Format != "safetensors" || v.Params != 128 {
		t.Fatalf("%+v", v)
	}
	lower := []byte(`{"peft_type":"lora","r":4}`)
	if v := scanAdapter(map[string][]byte{"adapter_config.json": lower, "adapter_model.safetensors": w}); !v.Accepted || v.BaseModel != "" {
		t.Fatalf("%+v", v)
	}
	bad := map[string]map[string][]byte{
		"no config":         {"adapter_model.safetensors": w},
		"no weights":        {"adapter_config.json": cfg},
		"pickle weights":    {"adapter_config.json": cfg, "adapter_model.bin": picklePayload},
		"config not object": {"adapter_config.json": []byte(`["LORA"]`), "adapter_model.safetensors": w},
		"config invalid":    {"adapter_config.json": []byte(`{"peft_type":"LORA",}`), "adapter_model.safetensors": w},
		"not lora":          {"adapter_config.json": []byte(`{"peft_type":"PREFIX_TUNING","r":8}`), "adapter_model.safetensors": w},
		"r zero":            {"adapter_config.json": []byte(`{"peft_type":"LORA","r":0}`), "adapter_model.safetensors": w},
		"r float":           {"adapter_config.json": []byte(`{"peft_type":"LORA","r":8.5}`), "adapter_model.safetensors": w},
		"r string":          {"adapter_config.json": []byte(`{"peft_type":"LORA","r":"8"}`), "adapter_model.safetensors": w},
		"r missing":         {"adapter_config.json": []byte(`{"peft_type":"LORA"}`), "adapter_model.safetensors": w},
		"base not string":   {"adapter_config.json": []byte(`{"peft_type":"LORA","r":8,"base_model_name_or_path":1}`), "adapter_model.safetensors": w},
		"invalid weights":   {"adapter_config.json": cfg, "adapter_model.safetensors": rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 2)},
		"config in subdir":  {"sub/adapter_config.json": cfg, "adapter_model.safetensors": w},
	}
	for name, files := range bad {
		t.Run(name, func(t *testing.T) {
			v := scanAdapter(files)
			if v.Accepted || !hasCode(v.Reasons, CodeAdapter) {
				t.Fatalf("%v", v.Reasons)
			}
		})
	}
	// the same files as a model need no adapter config
	if v := ScanDirWith(context.Background(), mapFS(map[string][]byte{"adapter_model.safetensors": w}), Options{Kind: KindModel}); !v.Accepted {
		t.Fatalf("%v", v.Reasons)
	}
	if v := ScanDirWith(context.Background(), mapFS(map[string][]byte{"adapter_model.safetensors": w}), Options{Kind: "dataset"}); v.Accepted || !hasCode(v.Reasons, CodeKind) {
		t.Fatalf("%v", v.Reasons)
	}
}

// streamFS hides ReadAt (and Seek) from its files, as an object store's
// fs.FS does: each file is a plain stream.
type streamFS struct {
	fsys   fs.FS
	opened int
}

type streamFile struct{ f fs.File }

func (s streamFile) Stat() (fs.FileInfo, error) { return s.f.Stat() }
func (s streamFile) Read(p []byte) (int, error) { return s.f.Read(p) }
func (s streamFile) Close() error               { return s.f.Close() }

func (s *streamFS) Open(name string) (fs.File, error) {
	f, err := s.fsys.Open(name)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return f, nil // directories keep ReadDir for the walk
	}
	s.opened++
	return streamFile{f}, nil
}

func TestScanDirStreams(t *testing.T) {
	big := writeST(map[string]string{"format": "pt"}, stT{"w", "F32", []int64{1024, 600}}, stT{"b", "U8", []int64{7}}) // > spoolInMemory
	if len(big) <= spoolInMemory {
		t.Fatalf("test file of %d bytes does not exercise the scratch file", len(big))
	}
	big[len(big)-1] = 0x5a // data content must not matter, only the hash
	files := map[string][]byte{
		"model.safetensors": big,
		"config.json":       []byte(`{"license":"mit"}`),
		"tokenizer.model":   writeSP("<unk>", "a"),
		"logo.png":          pngFile,
	}
	manifest := map[string]string{"model.safetensors": sha(big), "config.json": sha(files["config.json"])}
	scratch := t.TempDir()
	sfs := &streamFS{fsys: mapFS(files)}
	v := ScanDirWith(context.Background(), sfs, Options{Manifest: manifest, ScratchDir: scratch})
	if !v.Accepted || v.Params != 1024*600+7 || v.License != "mit" || sfs.opened != len(files) {
		t.Fatalf("%+v (opened %d)", v, sfs.opened)
	}
	for _, f := range v.Files {
		if f.SHA256 != sha(files[f.Path]) || f.Size != int64(len(files[f.Path])) {
			t.Fatalf("report %+v", f)
		}
	}
	if left, _ := os.ReadDir(scratch); len(left) != 0 {
		t.Fatalf("scratch files left behind: %v", left)
	}

	// the same verdicts as with random access: refusals and validation
	bad := map[string][]byte{
		"model.safetensors": append(bytes.Clone(big), 0), // trailing byte
		"pytorch_model.bin": picklePayload,
		"m.pt":              zipWith(t, "../evil"),
	}
	v = ScanDirWith(context.Background(), &streamFS{fsys: mapFS(bad)}, Options{ScratchDir: scratch})
	for _, code := range []string{CodeSTOffsets, CodePickle, CodeZip, CodeZipTraversal} {
		if !hasCode(v.Reasons, code) {
			t.Fatalf("want %s: %v", code, v.Reasons)
		}
	}
	if left, _ := os.ReadDir(scratch); len(left) != 0 {
		t.Fatalf("scratch files left behind: %v", left)
	}

	// a missing scratch directory is a read error, not an acceptance
	v = ScanDirWith(context.Background(), &streamFS{fsys: mapFS(files)}, Options{ScratchDir: scratch + "/missing"})
	if v.Accepted || !hasCode(v.Reasons, CodeReadError) {
		t.Fatalf("%v", v.Reasons)
	}
}

// lyingFS reports a size other than the stream's length.
type lyingFS struct {
	fs.FS
	delta int64
}

type lyingInfo struct {
	fs.FileInfo
	delta int64
}

func (l lyingInfo) Size() int64 { return l.FileInfo.Size() + l.delta }

type lyingFile struct {
	streamFile
	delta int64
}

func (l lyingFile) Stat() (fs.FileInfo, error) {
	st, err := l.f.Stat()
	return lyingInfo{st, l.delta}, err
}

func (l lyingFS) Open(name string) (fs.File, error) {
	f, err := l.FS.Open(name)
	if err != nil || name == "." {
		return f, err
	}
	return lyingFile{streamFile{f}, l.delta}, nil
}

func TestScanDirStreamLengthMismatch(t *testing.T) {
	small := writeST(nil, stT{"w", "U8", []int64{4}})
	big := writeST(nil, stT{"w", "U8", []int64{spoolInMemory + 10}})
	for _, file := range [][]byte{small, big} {
		for _, delta := range []int64{-1, 1} {
			v := ScanDirWith(context.Background(), lyingFS{mapFS(map[string][]byte{"m.safetensors": file}), delta}, Options{ScratchDir: t.TempDir()})
			if v.Accepted || !hasCode(v.Reasons, CodeReadError) {
				t.Fatalf("size %d delta %d: %v", len(file), delta, v.Reasons)
			}
		}
	}
}

var errInjected = errors.New("injected read failure")

// failingFS serves files whose reads fail from byte failAt on, with or
// without ReadAt.
type failingFS struct {
	fsys   fs.FS
	failAt int64
	stream bool
}

type failingFile struct {
	fs.File
	ra     io.ReaderAt
	failAt int64
	pos    int64
}

func (f *failingFile) Read(p []byte) (int, error) {
	if f.pos >= f.failAt {
		return 0, errInjected
	}
	p = p[:min(int64(len(p)), f.failAt-f.pos)]
	n, err := f.File.Read(p)
	f.pos += int64(n)
	return n, err
}

type failingFileAt struct{ *failingFile }

func (f failingFileAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.failAt {
		return 0, errInjected
	}
	return f.ra.ReadAt(p, off)
}

func (f failingFS) Open(name string) (fs.File, error) {
	file, err := f.fsys.Open(name)
	if err != nil || name == "." {
		return file, err
	}
	ff := &failingFile{File: file, failAt: f.failAt}
	if f.stream {
		return ff, nil
	}
	ff.ra = file.(io.ReaderAt)
	return failingFileAt{ff}, nil
}

func TestScanDirReadFailures(t *testing.T) {
	big := writeST(nil, stT{"w", "U8", []int64{5 * hashBufferSize}})
	small := writeST(nil, stT{"w", "U8", []int64{100}})
	for _, c := range []struct {
		file   []byte
		failAt int64
	}{{big, 3*hashBufferSize + 17}, {big, 10}, {small, 50}} {
		for _, stream := range []bool{false, true} {
			fsys := failingFS{fsys: mapFS(map[string][]byte{"m.safetensors": c.file}), failAt: c.failAt, stream: stream}
			v := ScanDirWith(context.Background(), fsys, Options{ScratchDir: t.TempDir()})
			if v.Accepted || !hasCode(v.Reasons, CodeReadError) || !strings.Contains(v.Reasons[0].Message, errInjected.Error()) {
				t.Fatalf("size %d fail at %d stream %v: %v", len(c.file), c.failAt, stream, v.Reasons)
			}
		}
	}
	// a large file read in full hashes to the same sum either way
	for _, stream := range []bool{false, true} {
		fsys := failingFS{fsys: mapFS(map[string][]byte{"m.safetensors": big}), failAt: int64(len(big)) + 1, stream: stream}
		v := ScanDirWith(context.Background(), fsys, Options{ScratchDir: t.TempDir(), Manifest: map[string]string{"m.safetensors": sha(big)}})
		if !v.Accepted {
			t.Fatalf("stream %v: %v", stream, v.Reasons)
		}
	}
}

func TestScanDirCancelledMidFile(t *testing.T) {
	big := writeST(nil, stT{"w", "U8", []int64{8 * hashBufferSize}})
	ctx, cancel := context.WithCancel(context.Background())
	// cancel as soon as the scanner has read past the first buffers
	fsys := cancelFS{mapFS(map[string][]byte{"m.safetensors": big}), cancel, 2 * hashBufferSize}
	v := ScanDirWith(ctx, fsys, Options{})
	if v.Accepted || !hasCode(v.Reasons, CodeReadError) {
		t.Fatalf("%v", v.Reasons)
	}
}

type cancelFS struct {
	fs.FS
	cancel func()
	after  int64
}

type cancelFile struct {
	fs.File
	ra     io.ReaderAt
	cancel func()
	after  int64
}

func (c cancelFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= c.after {
		c.cancel()
	}
	return c.ra.ReadAt(p, off)
}

func (c cancelFS) Open(name string) (fs.File, error) {
	f, err := c.FS.Open(name)
	if err != nil || name == "." {
		return f, err
	}
	return cancelFile{f, f.(io.ReaderAt), c.cancel, c.after}, nil
}
