package contracts

import (
	"bytes"
	"io"
	"testing"
)

// FuzzSSEReader feeds arbitrary bytes to SSEReader: it must never panic,
// must terminate with io.EOF or io.ErrUnexpectedEOF (the source never fails
// otherwise), and every payload must be made of input bytes. In a plain
// `go test` only the seeds run.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"",
		"\n",
		"\r\n\r\n",
		"data: {\"a\":1}\n\n",
		"data: a\ndata: b\n\n",
		"data:x\r\n\r\ndata: [DONE]\r\n\r\n",
		": comment\n\nevent: e\nid: 1\ndata: y\n\n",
		"data: partial",
		"data: a\n",
		"data",
		"data:\n\n\n\n",
		"\rdata: x\r\r\n",
		"data: " + string(bytes.Repeat([]byte("z"), 70<<10)) + "\n\n",
		string(bytes.Repeat([]byte("q"), 70<<10)),
		"data: \xff\xfe\x00\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewSSEReader(bytes.NewReader(in))
		total := 0
		for i := 0; ; i++ {
			// Each payload consumes at least one input byte.
			if i > len(in)+1 {
				t.Fatalf("more than %d payloads from %d bytes", i, len(in))
			}
			p, err := r.Next()
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error %v", err)
				}
				if p != nil {
					t.Fatalf("payload %q returned with error %v", p, err)
				}
				break
			}
			total += len(p)
			if total > len(in) {
				t.Fatalf("payloads hold %d bytes, more than the %d input bytes", total, len(in))
			}
		}

		// Any single-line payload survives WriteEvent and a read back.
		if bytes.ContainsAny(in, "\r\n") {
			return
		}
		var b bytes.Buffer
		if err := WriteEvent(&b, in); err != nil {
			t.Fatal(err)
		}
		got, err := NewSSEReader(&b).Next()
		if err != nil || !bytes.Equal(got, in) {
			t.Fatalf("round trip of %q: got %q, %v", in, got, err)
		}
	})
}
