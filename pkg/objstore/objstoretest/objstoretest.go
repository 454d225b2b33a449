// Package objstoretest holds the contract every objstore.Store must pass, and
// a helper that runs a real S3 server (versitygw) for tests.
package objstoretest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/objstore"
)

// Run runs the Store contract. newStore must return an empty store private to
// the calling (sub)test; subtests run in parallel, so it is called
// concurrently.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, s objstore.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"LargeUnknownSize", testLargeUnknownSize},
		{"LargeKnownSize", testLargeKnownSize},
		{"Empty", testEmpty},
		{"Overwrite", testOverwrite},
		{"Delete", testDelete},
		{"NotFound", testNotFound},
		{"List", testList},
		{"ListPaginated", testListPaginated},
		{"InvalidKeys", testInvalidKeys},
		{"ContentType", testContentType},
		{"WithPrefix", testWithPrefix},
		{"ConcurrentPuts", testConcurrentPuts},
		{"ConcurrentOverwrite", testConcurrentOverwrite},
		{"FailedPut", testFailedPut},
		{"SizeMismatch", testSizeMismatch},
		{"Cancelled", testCancelled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newStore(t))
		})
	}
}

const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// Data returns n deterministic pseudo-random bytes.
func Data(seed uint64, n int) []byte {
	b := make([]byte, n)
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// opaque hides Len, Seek, WriterTo and ReaderAt, as a network body would.
type opaque struct{ r io.Reader }

func (o opaque) Read(p []byte) (int, error) { return o.r.Read(p) }

var errBoom = errors.New("objstoretest: reader failed on purpose")

// failingReader yields n bytes of data, then errBoom.
type failingReader struct {
	data []byte
	n    int
	off  int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.off >= f.n {
		return 0, errBoom
	}
	k := copy(p, f.data[f.off:f.n])
	f.off += k
	return k, nil
}

func put(t *testing.T, s objstore.Store, key string, data []byte, size int64, ct string) objstore.Info {
	t.Helper()
	var r io.Reader = bytes.NewReader(data)
	if size < 0 {
		r = opaque{r}
	}
	info, err := s.Put(t.Context(), key, r, size, ct)
	if err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
	return info
}

func stat(t *testing.T, s objstore.Store, key string) objstore.Info {
	t.Helper()
	info, err := s.Stat(t.Context(), key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	return info
}

func listKeys(t *testing.T, s objstore.Store, prefix string) []string {
	t.Helper()
	keys := []string{}
	for info, err := range s.List(t.Context(), prefix) {
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		keys = append(keys, info.Key)
	}
	return keys
}

// checkInfo compares the fields that must agree between Put, Get and Stat.
func checkInfo(t *testing.T, what string, got objstore.Info, key string, data []byte, ct string) {
	t.Helper()
	if got.Key != key || got.Size != int64(len(data)) || got.SHA256 != sum(data) || got.ContentType != ct {
		t.Errorf("%s: got {Key:%q Size:%d SHA256:%s ContentType:%q}, want {Key:%q Size:%d SHA256:%s ContentType:%q}",
			what, got.Key, got.Size, got.SHA256, got.ContentType, key, len(data), sum(data), ct)
	}
	if got.Modified.IsZero() || time.Since(got.Modified) > time.Hour || time.Until(got.Modified) > time.Minute {
		t.Errorf("%s: Modified %v is not about now", what, got.Modified)
	}
}

func checkObject(t *testing.T, s objstore.Store, key string, data []byte, ct string) {
	t.Helper()
	rc, info, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	// Compare while streaming: no second copy of a large body.
	cmp := &compareWriter{want: data, diff: -1}
	_, err = io.CopyBuffer(cmp, rc, make([]byte, 256<<10))
	_ = rc.Close()
	if err != nil {
		t.Fatalf("Get(%q): read body: %v", key, err)
	}
	if cmp.diff >= 0 || cmp.n != len(data) {
		t.Fatalf("Get(%q): body of %d bytes differs from the %d bytes put (first difference at byte %d)", key, cmp.n, len(data), cmp.diff)
	}
	checkInfo(t, "Get("+key+")", info, key, data, ct)
	checkInfo(t, "Stat("+key+")", stat(t, s, key), key, data, ct)
}

// compareWriter checks what is written against want.
type compareWriter struct {
	want []byte
	n    int
	diff int
}

func (c *compareWriter) Write(p []byte) (int, error) {
	if c.diff < 0 {
		rest := c.want[min(c.n, len(c.want)):]
		k := min(len(p), len(rest))
		if !bytes.Equal(p[:k], rest[:k]) || k < len(p) {
			for i := range len(p) {
				if i >= len(rest) || p[i] != rest[i] {
					c.diff = c.n + i
					break
				}
			}
		}
	}
	c.n += len(p)
	return len(p), nil
}

func wantNotFound(t *testing.T, s objstore.Store, key string) {
	t.Helper()
	if _, err := s.Stat(t.Context(), key); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat(%q) = %v, want ErrNotFound", key, err)
	}
	rc, _, err := s.Get(t.Context(), key)
	if err == nil {
		_ = rc.Close()
	}
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get(%q) = %v, want ErrNotFound", key, err)
	}
}

func wantKeys(t *testing.T, s objstore.Store, prefix string, want []string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := listKeys(t, s, prefix); !slices.Equal(got, want) {
		t.Errorf("List(%q) = %q, want %q", prefix, got, want)
	}
}

func testRoundTrip(t *testing.T, s objstore.Store) {
	data := []byte("hello, sovereign world\n")
	ct := "text/plain; charset=utf-8"
	info := put(t, s, "docs/hello.txt", data, int64(len(data)), ct)
	checkInfo(t, "Put", info, "docs/hello.txt", data, ct)
	checkObject(t, s, "docs/hello.txt", data, ct)

	// A binary body of unknown size, under a deep key.
	bin := Data(1, 300<<10)
	checkInfo(t, "Put", put(t, s, "a/b/c/d/e/blob.bin", bin, -1, "application/octet-stream"), "a/b/c/d/e/blob.bin", bin, "application/octet-stream")
	checkObject(t, s, "a/b/c/d/e/blob.bin", bin, "application/octet-stream")

	// Keys with spaces, unicode and the longest allowed key.
	for _, key := range []string{"docs/with space & symbols+(1).txt", "docs/ünïcödé/文件.md", longKey(objstore.MaxKeyLen)} {
		put(t, s, key, []byte(key), int64(len(key)), "text/markdown")
		checkObject(t, s, key, []byte(key), "text/markdown")
	}
}

// longKey returns a valid key of exactly n bytes made of segments short
// enough for any filesystem.
func longKey(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		seg := min(100, n-b.Len())
		b.WriteString(strings.Repeat("k", seg))
	}
	return b.String()
}

func testLargeUnknownSize(t *testing.T, s objstore.Store) {
	data := Data(2, 20<<20)
	ct := "application/vnd.safetensors"
	info := put(t, s, "models/big/model.safetensors", data, -1, ct)
	checkInfo(t, "Put", info, "models/big/model.safetensors", data, ct)
	checkObject(t, s, "models/big/model.safetensors", data, ct)
}

func testLargeKnownSize(t *testing.T, s objstore.Store) {
	data := Data(3, 7<<20+12345)
	info := put(t, s, "models/mid.gguf", data, int64(len(data)), "")
	checkInfo(t, "Put", info, "models/mid.gguf", data, objstore.DefaultContentType)
	checkObject(t, s, "models/mid.gguf", data, objstore.DefaultContentType)
}

func testEmpty(t *testing.T, s objstore.Store) {
	for _, size := range []int64{0, -1} {
		key := fmt.Sprintf("empty/size%d", size)
		info := put(t, s, key, nil, size, "text/plain")
		if info.SHA256 != emptySHA256 || info.Size != 0 {
			t.Errorf("Put(%q) = %+v, want size 0 and sha256 %s", key, info, emptySHA256)
		}
		checkObject(t, s, key, []byte{}, "text/plain")
	}
	wantKeys(t, s, "empty/", []string{"empty/size-1", "empty/size0"})
}

func testOverwrite(t *testing.T, s objstore.Store) {
	v1 := Data(4, 4096)
	v2 := []byte(`{"version":2}`)
	put(t, s, "batch/input.jsonl", v1, int64(len(v1)), "application/x-ndjson")
	info := put(t, s, "batch/input.jsonl", v2, -1, "application/json")
	checkInfo(t, "Put (overwrite)", info, "batch/input.jsonl", v2, "application/json")
	checkObject(t, s, "batch/input.jsonl", v2, "application/json")
	// Back to a larger body: nothing of v2 may linger.
	put(t, s, "batch/input.jsonl", v1, int64(len(v1)), "application/x-ndjson")
	checkObject(t, s, "batch/input.jsonl", v1, "application/x-ndjson")
	wantKeys(t, s, "", []string{"batch/input.jsonl"})
}

func testDelete(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	put(t, s, "tmp/a/b/c.txt", []byte("c"), 1, "text/plain")
	put(t, s, "tmp/keep.txt", []byte("k"), 1, "text/plain")
	for range 2 { // idempotent
		if err := s.Delete(ctx, "tmp/a/b/c.txt"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	wantNotFound(t, s, "tmp/a/b/c.txt")
	if err := s.Delete(ctx, "never/existed"); err != nil {
		t.Errorf("Delete(missing) = %v, want nil", err)
	}
	wantKeys(t, s, "", []string{"tmp/keep.txt"})
	checkObject(t, s, "tmp/keep.txt", []byte("k"), "text/plain")
	// The deleted key's former parents hold nothing: a key there now works.
	put(t, s, "tmp/a", []byte("a"), 1, "text/plain")
	checkObject(t, s, "tmp/a", []byte("a"), "text/plain")
}

func testNotFound(t *testing.T, s objstore.Store) {
	wantNotFound(t, s, "nope")
	wantNotFound(t, s, "no/such/dir/key")
	put(t, s, "dir/file", []byte("x"), 1, "text/plain")
	wantNotFound(t, s, "dir")            // a prefix is not an object
	wantNotFound(t, s, "dir/file/below") // nor is anything below an object
	wantNotFound(t, s, "dir/fil")
}

func testList(t *testing.T, s objstore.Store) {
	keys := []string{
		"docs/Z.txt", "docs/a-b.txt", "docs/a.txt", "docs/a/b.txt", "docs/report.pdf",
		"docs/reports/2024.pdf", "docs/z", "docs/é.txt", "other/x", "top",
	}
	shuffled := slices.Clone(keys)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for i, k := range shuffled {
		put(t, s, k, bytes.Repeat([]byte{'x'}, i), int64(i), "text/plain")
	}
	wantKeys(t, s, "", keys)
	wantKeys(t, s, "docs/", keys[:8])
	wantKeys(t, s, "docs", keys[:8])
	wantKeys(t, s, "docs/a", []string{"docs/a-b.txt", "docs/a.txt", "docs/a/b.txt"})
	wantKeys(t, s, "docs/a/", []string{"docs/a/b.txt"})
	wantKeys(t, s, "docs/report", []string{"docs/report.pdf", "docs/reports/2024.pdf"})
	wantKeys(t, s, "docs/reports/", []string{"docs/reports/2024.pdf"})
	wantKeys(t, s, "top", []string{"top"})
	wantKeys(t, s, "nothing/", nil)
	wantKeys(t, s, "top/", nil)
	wantKeys(t, s, "docs/z/", nil)

	// Sizes and times come with the listing.
	sizes := map[string]int64{}
	for i, k := range shuffled {
		sizes[k] = int64(i)
	}
	for info, err := range s.List(t.Context(), "") {
		if err != nil {
			t.Fatal(err)
		}
		if info.Size != sizes[info.Key] || info.Modified.IsZero() {
			t.Errorf("List: %q has size %d, modified %v; want size %d and a time", info.Key, info.Size, info.Modified, sizes[info.Key])
		}
	}

	// Stopping early is fine.
	n := 0
	for _, err := range s.List(t.Context(), "") {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 2 {
			break
		}
	}
}

func testListPaginated(t *testing.T, s objstore.Store) {
	const n = 1005 // more than one S3 page of 1000
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("many/%05d", i)
	}
	work := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range work {
				if _, err := s.Put(t.Context(), k, strings.NewReader(k), int64(len(k)), "text/plain"); err != nil {
					t.Errorf("Put(%q): %v", k, err)
				}
			}
		})
	}
	for _, i := range rand.New(rand.NewPCG(3, 4)).Perm(n) {
		work <- want[i]
	}
	close(work)
	wg.Wait()
	put(t, s, "manz", []byte("z"), 1, "text/plain")
	if t.Failed() {
		t.FailNow()
	}
	wantKeys(t, s, "many/", want)
	wantKeys(t, s, "", append(slices.Clone(want), "manz"))
	wantKeys(t, s, "many/0100", want[1000:1005])
	wantKeys(t, s, "many/0099", want[990:1000])
}

func testInvalidKeys(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	bad := []string{
		"", "/abs", "a/", "a//b", "//", ".", "..", "../x", "a/../b", "a/..", "./a", "a/./b",
		"a\x00b", "a\nb", "a\rb", "a\x7fb", "a\u0085b", "bad\xffutf8", longKey(objstore.MaxKeyLen + 1),
	}
	for _, key := range bad {
		if _, err := s.Put(ctx, key, strings.NewReader("x"), 1, "text/plain"); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
		if rc, _, err := s.Get(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			if err == nil {
				_ = rc.Close()
			}
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Stat(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := objstore.ValidateKey(key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	for _, prefix := range []string{"/", "/abs", "../", "a/../", "a//", "x\x00", "./"} {
		var err error
		for _, e := range s.List(ctx, prefix) {
			if err = e; err != nil {
				break
			}
		}
		if !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("List(%q) error = %v, want ErrInvalidKey", prefix, err)
		}
	}
	wantKeys(t, s, "", nil)
}

func testContentType(t *testing.T, s objstore.Store) {
	info := put(t, s, "ct/default", []byte("x"), 1, "")
	if info.ContentType != objstore.DefaultContentType {
		t.Errorf("empty content type recorded as %q, want %q", info.ContentType, objstore.DefaultContentType)
	}
	checkObject(t, s, "ct/default", []byte("x"), objstore.DefaultContentType)
	if _, err := s.Put(t.Context(), "ct/evil", strings.NewReader("x"), 1, "text/plain\r\nX-Injected: 1"); err == nil {
		t.Error("Put with a header-injecting content type succeeded")
	}
	wantNotFound(t, s, "ct/evil")
}

func testWithPrefix(t *testing.T, base objstore.Store) {
	ctx := t.Context()
	acme := objstore.WithPrefix(base, objstore.TenantPrefix("acme"))
	globex := objstore.WithPrefix(base, objstore.TenantPrefix("globex"))

	info := put(t, acme, "doc.txt", []byte("acme doc"), -1, "text/plain")
	checkInfo(t, "acme Put", info, "doc.txt", []byte("acme doc"), "text/plain")
	put(t, acme, "sub/x", []byte("acme x"), 6, "text/plain")
	put(t, globex, "doc.txt", []byte("globex doc"), 10, "text/plain")

	checkObject(t, acme, "doc.txt", []byte("acme doc"), "text/plain")
	checkObject(t, globex, "doc.txt", []byte("globex doc"), "text/plain")
	wantNotFound(t, globex, "sub/x")
	wantKeys(t, acme, "", []string{"doc.txt", "sub/x"})
	wantKeys(t, acme, "sub/", []string{"sub/x"})
	wantKeys(t, globex, "", []string{"doc.txt"})
	wantKeys(t, base, "", []string{"tenants/acme/doc.txt", "tenants/acme/sub/x", "tenants/globex/doc.txt"})

	// No key or prefix climbs out.
	for _, key := range []string{"../globex/doc.txt", "../../tenants/globex/doc.txt", "/tenants/globex/doc.txt", "..", "sub/../../globex/doc.txt"} {
		if _, err := acme.Put(ctx, key, strings.NewReader("pwn"), 3, "text/plain"); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("acme.Put(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, err := acme.Stat(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("acme.Stat(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := acme.Delete(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("acme.Delete(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	for _, prefix := range []string{"../", "../globex/", "/"} {
		for _, err := range acme.List(ctx, prefix) {
			if !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("acme.List(%q) error = %v, want ErrInvalidKey", prefix, err)
			}
			break
		}
	}
	checkObject(t, globex, "doc.txt", []byte("globex doc"), "text/plain")

	// A tenant named like a path gets one escaped segment of its own.
	for _, tenant := range []string{"acme/sub", "acme/../globex"} {
		evil := objstore.WithPrefix(base, objstore.TenantPrefix(tenant))
		wantKeys(t, evil, "", nil)
		wantNotFound(t, evil, "x")
		put(t, evil, "mine", []byte(tenant), -1, "text/plain")
		checkObject(t, evil, "mine", []byte(tenant), "text/plain")
	}
	wantKeys(t, acme, "", []string{"doc.txt", "sub/x"})
	wantKeys(t, globex, "", []string{"doc.txt"})
	for _, tenant := range []string{"", ".", ".."} {
		bad := objstore.WithPrefix(base, objstore.TenantPrefix(tenant))
		if _, err := bad.Put(ctx, "x", strings.NewReader("x"), 1, "text/plain"); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("tenant %q: Put = %v, want ErrInvalidKey", tenant, err)
		}
	}

	// Deleting in one tenant leaves the other alone.
	if err := acme.Delete(ctx, "doc.txt"); err != nil {
		t.Fatal(err)
	}
	wantNotFound(t, acme, "doc.txt")
	checkObject(t, globex, "doc.txt", []byte("globex doc"), "text/plain")
}

func testConcurrentPuts(t *testing.T, s objstore.Store) {
	const n = 32
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		bodies[i] = Data(uint64(100+i), 1000+i*997)
		wg.Go(func() {
			size := int64(len(bodies[i]))
			if i%2 == 1 {
				size = -1
			}
			var r io.Reader = opaque{bytes.NewReader(bodies[i])}
			if _, err := s.Put(t.Context(), fmt.Sprintf("conc/%02d/obj", i), r, size, "application/octet-stream"); err != nil {
				t.Errorf("Put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	want := make([]string, n)
	for i := range n {
		want[i] = fmt.Sprintf("conc/%02d/obj", i)
		checkObject(t, s, want[i], bodies[i], "application/octet-stream")
	}
	wantKeys(t, s, "conc/", want)
}

// testConcurrentOverwrite races writers (and readers) on one key: the
// survivor must be one whole body whose info matches it.
func testConcurrentOverwrite(t *testing.T, s objstore.Store) {
	const n = 8
	bodies := map[string][]byte{}
	var wg sync.WaitGroup
	for i := range n {
		body := Data(uint64(200+i), 50_000+i*1000)
		bodies[sum(body)] = body
		wg.Go(func() {
			if _, err := s.Put(t.Context(), "race/key", bytes.NewReader(body), int64(len(body)), fmt.Sprintf("application/x-v%d", i)); err != nil {
				t.Errorf("Put %d: %v", i, err)
			}
		})
		wg.Go(func() {
			rc, info, err := s.Get(t.Context(), "race/key")
			if errors.Is(err, objstore.ErrNotFound) {
				return
			}
			if err != nil {
				t.Errorf("Get during writes: %v", err)
				return
			}
			defer func() { _ = rc.Close() }()
			h := sha256.New()
			if _, err := io.Copy(h, rc); err != nil {
				t.Errorf("Get during writes: read: %v", err)
				return
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != info.SHA256 {
				t.Errorf("Get during writes: body sha256 %s, info says %s", got, info.SHA256)
			}
		})
	}
	wg.Wait()
	info := stat(t, s, "race/key")
	body, ok := bodies[info.SHA256]
	if !ok {
		t.Fatalf("survivor's sha256 %s matches no body written", info.SHA256)
	}
	var i int
	if _, err := fmt.Sscanf(info.ContentType, "application/x-v%d", &i); err != nil || sum(Data(uint64(200+i), 50_000+i*1000)) != info.SHA256 {
		t.Errorf("content type %q belongs to another body than sha256 %s", info.ContentType, info.SHA256)
	}
	checkObject(t, s, "race/key", body, info.ContentType)
}

func testFailedPut(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	big := Data(5, 8<<20)
	cases := []struct {
		name   string
		failAt int
		size   int64
	}{
		{"small-unknown-size", 1000, -1},
		{"large-unknown-size", 7 << 20, -1},
		{"large-known-size", 6 << 20, int64(len(big))},
	}
	for _, c := range cases {
		key := "fail/" + c.name
		_, err := s.Put(ctx, key, &failingReader{data: big, n: c.failAt}, c.size, "text/plain")
		if !errors.Is(err, errBoom) {
			t.Errorf("%s: Put = %v, want an error wrapping the reader's", c.name, err)
		}
		wantNotFound(t, s, key)
	}
	wantKeys(t, s, "", nil)

	// A failed overwrite keeps the old object whole.
	old := Data(6, 6<<20)
	put(t, s, "fail/keep", old, int64(len(old)), "application/x-old")
	for _, c := range cases {
		if _, err := s.Put(ctx, "fail/keep", &failingReader{data: big, n: c.failAt}, c.size, "text/plain"); !errors.Is(err, errBoom) {
			t.Errorf("%s overwrite: Put = %v, want an error wrapping the reader's", c.name, err)
		}
		checkObject(t, s, "fail/keep", old, "application/x-old")
	}
	wantKeys(t, s, "", []string{"fail/keep"})
}

func testSizeMismatch(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	data := Data(7, 6<<20)
	cases := []struct {
		name string
		body []byte
		size int64
	}{
		{"short-small", data[:50], 100},
		{"long-small", data[:100], 50},
		{"short-large", data[:5<<20], 6 << 20},
		{"long-large", data, 5<<20 + 1},
		{"long-empty", data[:1], 0},
	}
	for _, c := range cases {
		key := "size/" + c.name
		if _, err := s.Put(ctx, key, opaque{bytes.NewReader(c.body)}, c.size, "text/plain"); err == nil {
			t.Errorf("%s: Put of %d bytes declared as %d succeeded", c.name, len(c.body), c.size)
		}
		wantNotFound(t, s, key)
	}
	wantKeys(t, s, "", nil)
}

// cancelReader cancels its context after n bytes and keeps yielding data.
type cancelReader struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	if c.n -= k; c.n <= 0 {
		c.cancel()
	}
	return k, err
}

func testCancelled(t *testing.T, s objstore.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Put(ctx, "cancel/before", strings.NewReader("x"), 1, "text/plain"); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a cancelled context = %v, want context.Canceled", err)
	}
	wantNotFound(t, s, "cancel/before")

	data := Data(8, 8<<20)
	for _, size := range []int64{-1, int64(len(data))} {
		ctx, cancel := context.WithCancel(t.Context())
		key := fmt.Sprintf("cancel/during%d", size)
		_, err := s.Put(ctx, key, &cancelReader{r: bytes.NewReader(data), n: 6 << 20, cancel: cancel}, size, "text/plain")
		cancel()
		if err == nil {
			t.Errorf("Put (size %d) cancelled midway succeeded", size)
		}
		wantNotFound(t, s, key)
	}
	wantKeys(t, s, "", nil)
}
