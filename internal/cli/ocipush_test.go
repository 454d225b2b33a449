package cli

import "testing"

func TestParsePushTarget(t *testing.T) {
	for in, want := range map[string]struct {
		name string
		v    int
	}{"acme/tiny": {"acme/tiny", 0}, "acme/tiny@3": {"acme/tiny", 3}} {
		n, v, err := ParsePushTarget(in)
		if err != nil || n != want.name || v != want.v {
			t.Errorf("%s: %s %d %v", in, n, v, err)
		}
	}
	for _, bad := range []string{"acme/tiny@", "acme/tiny@0", "acme/tiny@x"} {
		if _, _, err := ParsePushTarget(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
