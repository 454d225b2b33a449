package oci

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/aiforge/aiforge/pkg/ociref"
	"github.com/aiforge/aiforge/pkg/ocitest"
)

func extract(t *testing.T, x *Extractor, files map[string][]byte) (map[string]string, error) {
	t.Helper()
	got := map[string]string{}
	err := x.Extract(bytes.NewReader(ocitest.Tar(t, true, files)), true, func(p string, r io.Reader, size int64) error {
		b, err := io.ReadAll(r)
		if int64(len(b)) != size {
			t.Fatalf("%s: read %d of %d", p, len(b), size)
		}
		got[p] = string(b)
		return err
	})
	return got, err
}

func TestExtractorBounds(t *testing.T) {
	got, err := extract(t, &Extractor{Root: "lora"}, map[string][]byte{"lora/a.json": []byte("{}"), "./b/c.txt": []byte("c")})
	if err != nil || got["a.json"] != "{}" || got["b/c.txt"] != "c" || len(got) != 2 {
		t.Fatalf("extracted %v, %v", got, err)
	}
	for name, c := range map[string]struct {
		x     *Extractor
		files map[string][]byte
		want  error
	}{
		"entries": {&Extractor{Limits: Limits{MaxEntries: 2}}, map[string][]byte{"a": nil, "b": nil, "c": nil}, ErrLimit},
		"bytes":   {&Extractor{Limits: Limits{MaxTotalBytes: 10}}, map[string][]byte{"a": make([]byte, 6), "b": make([]byte, 6)}, ErrLimit},
		"symlink": {&Extractor{}, map[string][]byte{"a->/etc/passwd": nil}, ErrUnsafePath},
		"dotdot":  {&Extractor{}, map[string][]byte{"a/../../x": nil}, ErrUnsafePath},
		"abs":     {&Extractor{}, map[string][]byte{"/etc/x": nil}, ErrUnsafePath},
		"rooted":  {&Extractor{Root: "lora"}, map[string][]byte{"lora/a": nil, "a": nil}, ErrUnsafePath},
	} {
		if _, err := extract(t, c.x, c.files); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func TestPlanFilesRefusesBadTitles(t *testing.T) {
	layer := func(title string) ocispec.Descriptor {
		return ocispec.Descriptor{MediaType: "x", Annotations: map[string]string{AnnotationTitle: title}}
	}
	for name, layers := range map[string][]ocispec.Descriptor{
		"duplicate": {layer("a"), layer("a")},
		"dotdot":    {layer("../a")},
		"absolute":  {layer("/a")},
		"untitled":  {{MediaType: "x"}},
	} {
		_, err := PlanFiles(Manifest{Manifest: ocispec.Manifest{Layers: layers}})
		if !errors.Is(err, ErrUnsafePath) && !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestResolveBounds(t *testing.T) {
	reg := ocitest.New(t)
	files := map[string][]byte{"a": []byte("a"), "b": []byte("bb"), "c": []byte("ccc")}
	pushed := reg.PushFiles(t, "acme/m", "v1", ociref.ArtifactTypeModel, files, nil)
	ref, _ := ociref.Parse(reg.Ref("acme/m", "v1"))
	ctx := context.Background()
	for name, lim := range map[string]Limits{
		"layers": {MaxLayers: 2}, "bytes": {MaxTotalBytes: 5}, "manifest": {MaxManifestBytes: 100},
	} {
		c, err := New(Config{InsecureRegistries: []string{reg.Host}, Limits: lim})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Resolve(ctx, ref); !errors.Is(err, ErrLimit) {
			t.Errorf("%s: %v, want ErrLimit", name, err)
		}
	}
	c, _ := New(Config{InsecureRegistries: []string{reg.Host}})
	m, err := c.Resolve(ctx, ref)
	if err != nil || m.Digest != pushed.Digest {
		t.Fatalf("resolve: %+v %v", m, err)
	}
	wrong, _ := ociref.Parse("oci://" + reg.Host + "/acme/m@sha256:" + ocitest.SHA256([]byte("other")))
	if _, err := c.Resolve(ctx, wrong); err == nil {
		t.Fatal("resolved a digest the registry does not have")
	}
	// Without the insecure listing the client insists on HTTPS.
	tls, _ := New(Config{})
	if _, err := tls.Resolve(ctx, ref); err == nil {
		t.Fatal("spoke plain HTTP to a registry not listed insecure")
	}
}

func TestCheckRedirect(t *testing.T) {
	req := func(u string) *http.Request {
		r, err := http.NewRequest("GET", u, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", "Basic c2VjcmV0")
		return r
	}
	reg := []*http.Request{req("https://reg.example/v2/a/blobs/sha256:x")}
	for _, u := range []string{"http://169.254.169.254/latest/meta-data", "https://169.254.169.254/x", "https://metadata.google.internal/x",
		"http://storage.example/blob", "file:///etc/passwd", "https://[fe80::1]/x"} {
		if err := checkRedirect(req(u), reg); !errors.Is(err, ErrRedirectRefused) {
			t.Errorf("%s: %v", u, err)
		}
	}
	other := req("https://storage.example/blob?sig=1")
	if err := checkRedirect(other, reg); err != nil || other.Header.Get("Authorization") != "" {
		t.Fatalf("blob storage: %v, Authorization %q", err, other.Header.Get("Authorization"))
	}
	same := req("https://reg.example/v2/other")
	if err := checkRedirect(same, reg); err != nil || same.Header.Get("Authorization") == "" {
		t.Fatalf("same registry: %v", err)
	}
	if err := refuseLinkLocal("tcp", "169.254.169.254:80", nil); !errors.Is(err, ErrRedirectRefused) {
		t.Fatalf("dial to the metadata address: %v", err)
	}
}
