package ociref

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	dig := "sha256:" + strings.Repeat("ab", 32)
	good := map[string]Ref{
		"oci://ghcr.io/acme/lora:v1":            {Registry: "ghcr.io", Repository: "acme/lora", Tag: "v1"},
		"oci://127.0.0.1:5000/a/b/c:latest":     {Registry: "127.0.0.1:5000", Repository: "a/b/c", Tag: "latest"},
		"oci://localhost:5000/m@" + dig:         {Registry: "localhost:5000", Repository: "m", Digest: dig},
		"oci://reg.example/my_model-x.y:1.0_rc": {Registry: "reg.example", Repository: "my_model-x.y", Tag: "1.0_rc"},
	}
	for s, want := range good {
		got, err := Parse(s)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", s, got, err, want)
		}
		if err == nil && got.String() != s {
			t.Errorf("String() = %q, want %q", got.String(), s)
		}
		if err == nil && Join(got.Repo(), got.Reference()) != s {
			t.Errorf("Join = %q", Join(got.Repo(), got.Reference()))
		}
	}
	bad := []string{
		"ghcr.io/acme/lora:v1", "oci://ghcr.io/acme/lora", "oci://ghcr.io:v1", "oci://GHCR.io/a:v1",
		"oci://ghcr.io/Acme/lora:v1", "oci://ghcr.io/a/../b:v1", "oci://ghcr.io/a//b:v1", "oci://ghcr.io/a:v1@" + dig,
		"oci://ghcr.io/a@sha256:abc", "oci://ghcr.io/a@sha512:" + strings.Repeat("a", 128), "oci://ghcr.io/a:-v1",
		"oci://user:pw@ghcr.io/a:v1", "oci://ghcr.io/a:v1?x=1", "oci://ghcr.io/a:" + strings.Repeat("t", 129),
		"oci:///a:v1", "oci://ghcr.io/a b:v1",
	}
	for _, s := range bad {
		if r, err := Parse(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %+v, %v; want ErrInvalid", s, r, err)
		}
	}
}
