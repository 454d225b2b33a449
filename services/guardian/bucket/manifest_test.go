package bucket

import (
	"strconv"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/events"
)

var lim = Limits{MaxManifestBytes: 4096, MaxFiles: 3, MaxFileBytes: 1000, MaxVersionBytes: 1500}

const h = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestParseManifest(t *testing.T) {
	m, rs := parseManifest(strings.NewReader(`{"kind":"model","name":"tiny","files":[{"path":"a/model.safetensors","size":10,"sha256":"`+h+`"}]}`), lim)
	if len(rs) != 0 || m.Name != "tiny" || len(m.Files) != 1 {
		t.Fatalf("good manifest: %+v %+v", m, rs)
	}
	file := func(path string, size int) string {
		return `{"path":"` + path + `","size":` + strconv.Itoa(size) + `,"sha256":"` + h + `"}`
	}
	for _, c := range []struct{ body, code, file string }{
		{`not json`, CodeManifestInvalid, ManifestName},
		{`{"kind":"model","files":[` + file("a", 1) + `],"extra":1}`, CodeManifestInvalid, ManifestName},
		{`{"kind":"checkpoint","files":[` + file("a", 1) + `]}`, CodeManifestInvalid, ManifestName},
		{`{"kind":"adapter","files":[` + file("a", 1) + `]}`, CodeManifestInvalid, ManifestName},
		{`{"kind":"model","base_model":"x","files":[` + file("a", 1) + `]}`, CodeManifestInvalid, ManifestName},
		{`{"kind":"model","name":"a/b","files":[` + file("a", 1) + `]}`, CodeManifestInvalid, ManifestName},
		{`{"kind":"model","files":[]}`, CodeManifestInvalid, ManifestName},
		{`{"kind":"model","files":[` + file("../x", 1) + `]}`, CodeUnsafePath, "../x"},
		{`{"kind":"model","files":[` + file("/etc/passwd", 1) + `]}`, CodeUnsafePath, "/etc/passwd"},
		{`{"kind":"model","files":[` + file(`a\\b`, 1) + `]}`, CodeUnsafePath, `a\b`},
		{`{"kind":"model","files":[` + file("a//b", 1) + `]}`, CodeUnsafePath, "a//b"},
		{`{"kind":"model","files":[` + file(ManifestName, 1) + `]}`, CodeManifestInvalid, ManifestName},
		{`{"kind":"model","files":[` + file("a", 1) + `,` + file("a", 1) + `]}`, CodeManifestInvalid, "a"},
		{`{"kind":"model","files":[{"path":"a","size":1,"sha256":"zz"}]}`, CodeManifestInvalid, "a"},
		{`{"kind":"model","files":[` + file("a", -1) + `]}`, CodeManifestInvalid, "a"},
		{`{"kind":"model","files":[` + file("a", 1001) + `]}`, CodeTooLarge, "a"},
		{`{"kind":"model","files":[` + file("a", 800) + `,` + file("b", 800) + `]}`, CodeTooLarge, ""},
		{`{"kind":"model","files":[` + file("a", 1) + `,` + file("b", 1) + `,` + file("c", 1) + `,` + file("d", 1) + `]}`, CodeTooManyFiles, ManifestName},
		{`{"kind":"model","files":[` + file("a", 1) + `]}` + strings.Repeat(" ", 4096), CodeManifestInvalid, ManifestName},
	} {
		_, rs := parseManifest(strings.NewReader(c.body), lim)
		found := false
		for _, r := range rs {
			found = found || r.Code == c.code && r.File == c.file && r.Message != ""
		}
		if !found {
			t.Errorf("%.60s: reasons %+v, want %s on %q", c.body, rs, c.code, c.file)
		}
	}
}

// TestCompare: the folder's listing against the manifest.
func TestCompare(t *testing.T) {
	m := Manifest{Kind: "model"}
	m.Files = append(m.Files, mf("a", 3), mf("b", 4))
	l := &listing{files: map[string]int64{"a": 3, "b": 5, "c": 1}, unsafe: []string{"../x"}, count: 4}
	got := map[string]string{}
	for _, r := range compare(m, l, 10) {
		got[r.File] = r.Code
	}
	want := map[string]string{"b": CodeSizeMismatch, "c": CodeUnexpectedFile, "../x": CodeUnsafePath}
	if len(got) != len(want) {
		t.Fatalf("compare = %v, want %v", got, want)
	}
	for f, c := range want {
		if got[f] != c {
			t.Errorf("%s: %s, want %s", f, got[f], c)
		}
	}
	l = &listing{files: map[string]int64{"a": 3}, count: 1}
	if rs := compare(m, l, 10); len(rs) != 1 || rs[0].Code != CodeFileMissing || rs[0].File != "b" {
		t.Errorf("missing: %+v", rs)
	}
	if rs := compare(m, &listing{files: map[string]int64{}, count: 11}, 10); len(rs) != 1 || rs[0].Code != CodeTooManyFiles {
		t.Errorf("too many: %+v", rs)
	}
}

func mf(p string, size int64) events.ModelFile {
	return events.ModelFile{Path: p, Size: size, SHA256: h}
}
