package scan

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

var (
	picklePayload = []byte("\x80\x04\x95\x1d\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94\x93\x94\x8c\x02ls\x94\x85\x94R\x94.")
	pickleProto0  = []byte("cos\nsystem\n(S'ls'\ntR.")
	hdf5File      = []byte("\x89HDF\r\n\x1a\n\x00\x00\x00\x00")
)

func mapFS(files map[string][]byte) fstest.MapFS {
	m := fstest.MapFS{}
	for k, v := range files {
		m[k] = &fstest.MapFile{Data: v, Mode: 0o644}
	}
	return m
}

func scanFiles(files map[string][]byte, manifest map[string]string) Verdict {
	return ScanDir(context.Background(), mapFS(files), manifest)
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestSniff(t *testing.T) {
	st := writeST(nil, stT{"a", "U8", []int64{1}})
	cases := []struct {
		name string
		head []byte
		want string
	}{
		{"model.safetensors", st, "safetensors"},
		{"model.bin", st, "safetensors"},
		{"model.safetensors", picklePayload, "pickle"},
		{"x", []byte{0x80, 0x02, ']', 'q'}, "pickle"},
		{"data.txt", pickleProto0, "pickle"},
		{"x.txt", []byte("(dp0\nS'a'\np1\nI1\ns."), "pickle"},
		{"model.safetensors", []byte("PK\x03\x04rest"), "zip"},
		{"model.safetensors", hdf5File, "keras"},
		{"model.safetensors", []byte("GGUF\x03\x00\x00\x00"), "gguf"},
		{"config.json", []byte(" {\"a\":1}"), "json"},
		{"README.md", []byte("# hello\nworld."), "text"},
		{"modeling_x.py", []byte("import os\n"), "python"},
		{"weights.bin", []byte("just text"), "pickle"},
		{"blob", []byte{0x00, 0x01, 0x02}, "unknown"},
		{"empty", nil, "empty"},
		{"tok.txt", []byte("caf\xc3"), "text"}, // rune cut by head limit
		{"logo.png", pngFile, "image"},
		{"a.jpg", jpegFile, "image"},
		{"a.gif", gifFile, "image"},
		{"a.webp", webpFile, "image"},
		{"pytorch_model.bin", gifFile, "pickle"},
		{"model.safetensors", pngFile, "safetensors"},
		{"tokenizer.model", writeSP("<unk>", "a"), "sentencepiece"},
		{"tokenizer.bin", writeSP("<unk>", "a"), "pickle"},
		{"spm", writeSP("<unk>", "a"), "unknown"},
		{"m.gguf", []byte("hello"), "gguf"},
		{"model.safetensors", []byte("hello"), "safetensors"},
		{"weights", []byte("cos\nsystem\nq\x01h\x01."), "pickle"},
		{"empty.safetensors", nil, "safetensors"},
		{"empty.bin", nil, "empty"},
		{"__init__.py", nil, "python"},
	}
	for _, c := range cases {
		if got := Sniff(c.name, c.head); got != c.want {
			t.Errorf("Sniff(%q, %q) = %q, want %q", c.name, c.head, got, c.want)
		}
	}
}

func TestScanDirAcceptsValidUpload(t *testing.T) {
	st := writeST(map[string]string{"format": "pt"}, stT{"w", "F16", []int64{2, 3}}, stT{"b", "F32", []int64{3}})
	files := map[string][]byte{
		"model.safetensors": st,
		"config.json":       []byte(`{"architectures":["X"],"hidden_size":3}`),
		"README.md":         []byte("---\nlicense: apache-2.0\ntags:\n - x\n---\n# Model\n"),
		"tokenizer.json":    []byte(`{"version":"1.0"}`),
		"sub/merges.txt":    []byte("a b\nc d\n"),
		".gitattributes":    []byte("*.safetensors filter=lfs\n"),
	}
	v := scanFiles(files, map[string]string{"model.safetensors": sha(st), "./config.json": sha(files["config.json"])})
	if !v.Accepted {
		t.Fatalf("rejected: %v", v.Reasons)
	}
	if v.Params != 9 || v.License != "apache-2.0" || len(v.Files) != 6 {
		t.Fatalf("verdict %+v", v)
	}
	for _, f := range v.Files {
		if f.Path == "model.safetensors" {
			if f.SHA256 != sha(st) || f.Format != "safetensors" || f.DTypes["F16"] != 6 || f.Size != int64(len(st)) {
				t.Fatalf("report %+v", f)
			}
		}
	}
}

func TestScanDirRefusals(t *testing.T) {
	st := writeST(nil, stT{"w", "U8", []int64{4}})
	cases := []struct {
		name  string
		files map[string][]byte
		code  string
	}{
		{"pickle renamed safetensors", map[string][]byte{"model.safetensors": picklePayload}, CodePickle},
		{"pickle bin", map[string][]byte{"pytorch_model.bin": picklePayload}, CodePickle},
		{"proto0 pickle", map[string][]byte{"model.txt": pickleProto0}, CodePickle},
		{"proto0 pickle after text head", map[string][]byte{"notes.txt": append(make([]byte, 0, 5000), append([]byte(string(make([]rune, 0))+"hello\n"), pickleProto0...)...)}, CodePickle},
		{"zip", map[string][]byte{"model.pt": zipWith(t, "archive/data.pkl")}, CodeZip},
		{"zip traversal", map[string][]byte{"model.pt": zipWith(t, "../evil", "ok")}, CodeZipTraversal},
		{"keras", map[string][]byte{"model.h5": hdf5File}, CodeKeras},
		{"python", map[string][]byte{"modeling_x.py": []byte("import os\nos.system('x')\n")}, CodePython},
		{"unknown binary", map[string][]byte{"blob.dat": {0x0a, 0x00, 0x01}}, CodeUnknownFormat},
		{"malformed sentencepiece", map[string][]byte{"tokenizer.model": {0x0a, 0x00, 0x01}}, CodeSentencePiece},
		{"invalid json", map[string][]byte{"config.json": []byte(`{"a":1,}`)}, CodeJSONInvalid},
		{"bad safetensors", map[string][]byte{"model.safetensors": rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 3)}, CodeSTOffsets},
		{"bad gguf", map[string][]byte{"m.gguf": []byte("GGUF\x07\x00\x00\x00")}, CodeGGUF},
		{"binary tail in text", map[string][]byte{"a.txt": append([]byte("hello"), 0x00)}, CodeUnknownFormat},
		{"empty upload", map[string][]byte{}, CodeEmptyUpload},
		{"ok plus pickle", map[string][]byte{"model.safetensors": st, "optimizer.pt": picklePayload}, CodePickle},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := scanFiles(c.files, nil)
			if v.Accepted || !hasCode(v.Reasons, c.code) {
				t.Fatalf("want %s, got accepted=%v %v", c.code, v.Accepted, v.Reasons)
			}
		})
	}
}

func TestScanDirContentWins(t *testing.T) {
	st := writeST(nil, stT{"w", "U8", []int64{4}})
	v := scanFiles(map[string][]byte{"model.bin": st}, nil)
	if !v.Accepted || v.Files[0].Format != "safetensors" || v.Params != 4 {
		t.Fatalf("%+v", v)
	}
}

func TestScanDirManifest(t *testing.T) {
	st := writeST(nil, stT{"w", "U8", []int64{4}})
	v := scanFiles(map[string][]byte{"model.safetensors": st}, map[string]string{"model.safetensors": sha([]byte("other"))})
	if v.Accepted || !hasCode(v.Reasons, CodeHashMismatch) {
		t.Fatalf("%v", v.Reasons)
	}
	v = scanFiles(map[string][]byte{"model.safetensors": st}, map[string]string{"missing.safetensors": sha(st)})
	if v.Accepted || !hasCode(v.Reasons, CodeHashMismatch) {
		t.Fatalf("%v", v.Reasons)
	}
}

func TestScanDirShards(t *testing.T) {
	s1 := writeST(nil, stT{"a", "F32", []int64{2}}, stT{"b", "F32", []int64{2}})
	s2 := writeST(nil, stT{"c", "F32", []int64{3}})
	ok := map[string][]byte{
		"model-00001-of-00002.safetensors": s1,
		"model-00002-of-00002.safetensors": s2,
		"model.safetensors.index.json": []byte(`{"metadata":{"total_size":28},"weight_map":{
			"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}`),
	}
	if v := scanFiles(ok, nil); !v.Accepted || v.Params != 7 {
		t.Fatalf("sharded ok rejected: %+v", v)
	}
	cases := []struct {
		name  string
		index string
		extra map[string][]byte
		code  string
	}{
		{"outside", `{"weight_map":{"a":"../other/model.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}`, nil, CodeShardIndex},
		{"absolute", `{"weight_map":{"a":"/etc/passwd"}}`, nil, CodeShardIndex},
		{"missing file", `{"weight_map":{"a":"model-00003-of-00002.safetensors"}}`, nil, CodeShardIndex},
		{"not in shard", `{"weight_map":{"a":"model-00002-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}`, nil, CodeShardIndex},
		{"no weight_map", `{"metadata":{}}`, nil, CodeShardIndex},
		{"duplicate in index", `{"weight_map":{"a":"model-00001-of-00002.safetensors","a":"model-00002-of-00002.safetensors"}}`, nil, CodeShardDuplicate},
		{"duplicate across shards", `{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors","x":"model-00003-of-00003.safetensors"}}`,
			map[string][]byte{"model-00003-of-00003.safetensors": writeST(nil, stT{"a", "F32", []int64{2}}, stT{"x", "U8", []int64{1}})}, CodeShardDuplicate},
		{"points at non-safetensors", `{"weight_map":{"a":"config.json"}}`, map[string][]byte{"config.json": []byte(`{}`)}, CodeShardIndex},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := map[string][]byte{}
			for k, v := range ok {
				files[k] = v
			}
			for k, v := range c.extra {
				files[k] = v
			}
			files["model.safetensors.index.json"] = []byte(c.index)
			v := scanFiles(files, nil)
			if v.Accepted || !hasCode(v.Reasons, c.code) {
				t.Fatalf("want %s, got %v", c.code, v.Reasons)
			}
		})
	}
}

func TestLicense(t *testing.T) {
	st := writeST(nil, stT{"w", "U8", []int64{1}})
	g := validGGUF() // general.license = apache-2.0
	cases := []struct {
		name  string
		files map[string][]byte
		want  string
	}{
		{"readme mit", map[string][]byte{"README.md": []byte("---\nlicense: mit\n---\n")}, "mit"},
		{"readme quoted", map[string][]byte{"README.md": []byte("---\r\nlanguage: en\r\nlicense: \"Apache-2.0\" # comment\r\n---\r\n")}, "apache-2.0"},
		{"readme other", map[string][]byte{"README.md": []byte("---\nlicense: other\nlicense_name: custom\nlicense_link: LICENSE\n---\n")}, LicenseNeedsReview},
		{"readme unknown", map[string][]byte{"README.md": []byte("---\nlicense: totally-free\n---\n")}, LicenseNeedsReview},
		{"readme list", map[string][]byte{"README.md": []byte("---\nlicense:\n  - mit\n---\n")}, "mit"},
		{"readme no front matter", map[string][]byte{"README.md": []byte("license: mit\n")}, LicenseNeedsReview},
		{"readme wins over config", map[string][]byte{"README.md": []byte("---\nlicense: mit\n---\n"), "config.json": []byte(`{"license":"apache-2.0"}`)}, "mit"},
		{"config", map[string][]byte{"config.json": []byte(`{"license":"Apache-2.0"}`)}, "apache-2.0"},
		{"gguf", map[string][]byte{"m.gguf": g}, "apache-2.0"},
		{"none", map[string][]byte{}, LicenseNeedsReview},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := map[string][]byte{"model.safetensors": st}
			for k, v := range c.files {
				files[k] = v
			}
			v := scanFiles(files, nil)
			if !v.Accepted {
				t.Fatalf("rejected %v", v.Reasons)
			}
			if v.License != c.want {
				t.Fatalf("license %q want %q", v.License, c.want)
			}
		})
	}
	// What a reviewer of "other" reads comes along.
	v := scanFiles(map[string][]byte{"model.safetensors": st,
		"README.md": []byte("---\nlicense: other\nlicense_name: llama3\nlicense_link: https://llama.meta.com/llama3/license\n---\n")}, nil)
	if v.License != LicenseNeedsReview || v.LicenseName != "llama3" || v.LicenseLink != "https://llama.meta.com/llama3/license" {
		t.Fatalf("licence %q name %q link %q", v.License, v.LicenseName, v.LicenseLink)
	}
}

func TestScanDirOSAndCancel(t *testing.T) {
	dir := t.TempDir()
	st := writeST(nil, stT{"w", "U8", []int64{4}})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), st, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Skipf("the temp filesystem refuses symlinks (%v); this check needs one", err)
	}
	v := ScanDir(context.Background(), os.DirFS(dir), nil)
	if v.Accepted || !hasCode(v.Reasons, CodeReadError) {
		t.Fatalf("symlink accepted: %v", v.Reasons)
	}
	os.Remove(filepath.Join(dir, "link"))
	if v := ScanDir(context.Background(), os.DirFS(dir), nil); !v.Accepted {
		t.Fatalf("%v", v.Reasons)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if v := ScanDir(ctx, os.DirFS(dir), nil); v.Accepted {
		t.Fatal("cancelled scan accepted")
	}
}
