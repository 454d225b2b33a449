package embedding

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func TestDecode(t *testing.T) {
	want := []float32{0.5, -1.25, 3}
	b := make([]byte, 12)
	for i, f := range want {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	for _, raw := range []string{`"` + base64.StdEncoding.EncodeToString(b) + `"`, `[0.5,-1.25,3]`} {
		got, err := Decode([]byte(raw))
		if err != nil || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("Decode(%s) = %v, %v", raw, got, err)
		}
	}
	for _, bad := range []string{`"AAA="`, `"!!"`, `{}`} {
		if _, err := Decode([]byte(bad)); !errors.Is(err, ErrRejected) {
			t.Fatalf("Decode(%s) err = %v", bad, err)
		}
	}
}
