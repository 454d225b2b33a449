package objstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/objstore"
)

func TestValidateKey(t *testing.T) {
	t.Parallel()
	valid := []string{
		"a", "a/b/c", "docs/report.pdf", ".gitattributes", "models/x/.cache/y", "..a", "a..", "...", "a/..b",
		"with space", "ünï/文件", `back\slash`, "%2e%2e/x", "~/x", strings.Repeat("k", objstore.MaxKeyLen),
	}
	for _, k := range valid {
		if err := objstore.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	invalid := []string{
		"", "/", "/a", "a/", "a//b", ".", "..", "./a", "a/.", "../a", "a/../b", "a/..",
		"a\x00", "a\tb", "a\nb", "\x1b[31m", "a\x7f", "a\u0085", "\xc3\x28", strings.Repeat("k", objstore.MaxKeyLen+1),
	}
	for _, k := range invalid {
		err := objstore.ValidateKey(k)
		if !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
			continue
		}
		if len(err.Error()) > 300 {
			t.Errorf("ValidateKey(%q): error of %d bytes; keep messages short", k[:10], len(err.Error()))
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "a", "a/", "a/b", "a/b/", "a/.", "a/..", "..", ".", "docs/re"} {
		if err := objstore.ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"/", "/a", "../", "./", "a//", "a/../", "a/./b", "a\x00", "\xff"} {
		if err := objstore.ValidatePrefix(p); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalidKey", p, err)
		}
	}
}

func TestTenantPrefix(t *testing.T) {
	t.Parallel()
	if got := objstore.TenantPrefix("acme"); got != "tenants/acme/" {
		t.Errorf("TenantPrefix(acme) = %q", got)
	}
	tenants := []string{"acme", "acme/sub", "acme/..", "acme%2Fsub", "acme sub", "ACME", "a", "ab", "a.b", "..", "../acme"}
	prefixes := map[string]string{}
	for _, tn := range tenants {
		p := objstore.TenantPrefix(tn)
		if strings.Count(p, "/") != 2 {
			t.Errorf("TenantPrefix(%q) = %q: not a single segment", tn, p)
		}
		if other, ok := prefixes[p]; ok {
			t.Errorf("tenants %q and %q share prefix %q", tn, other, p)
		}
		prefixes[p] = tn
	}
	for p1, t1 := range prefixes {
		for p2, t2 := range prefixes {
			if p1 != p2 && strings.HasPrefix(p2, p1) {
				t.Errorf("tenant %q's prefix %q contains tenant %q's %q", t1, p1, t2, p2)
			}
		}
	}
}

func TestWithPrefixRejectsBadPrefixes(t *testing.T) {
	t.Parallel()
	base := newLocal(t)
	for _, p := range []string{"", "/", "/abs", "../x", "a//b", "a/../b", "x\x00"} {
		s := objstore.WithPrefix(base, p)
		if _, err := s.Put(t.Context(), "k", strings.NewReader("x"), 1, ""); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("WithPrefix(%q).Put = %v, want ErrInvalidKey", p, err)
		}
		for _, err := range s.List(t.Context(), "") {
			if !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("WithPrefix(%q).List = %v, want ErrInvalidKey", p, err)
			}
		}
	}
	if _, err := objstore.WithPrefix(nil, "x/").Stat(t.Context(), "k"); err == nil {
		t.Error("WithPrefix(nil store) works")
	}

	// A prefix without the trailing slash gets one, and wrappers nest.
	inner := objstore.WithPrefix(base, "tenants/acme")
	nested := objstore.WithPrefix(inner, "docs")
	info, err := nested.Put(t.Context(), "a.txt", strings.NewReader("a"), 1, "text/plain")
	if err != nil || info.Key != "a.txt" {
		t.Fatalf("nested Put = %+v, %v", info, err)
	}
	if _, err := base.Stat(t.Context(), "tenants/acme/docs/a.txt"); err != nil {
		t.Errorf("base does not hold the nested key: %v", err)
	}
	var keys []string
	for info, err := range inner.List(t.Context(), "") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, info.Key)
	}
	if len(keys) != 1 || keys[0] != "docs/a.txt" {
		t.Errorf("inner.List = %q", keys)
	}
}
