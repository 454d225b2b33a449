package contracts

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll drains r and returns every payload and the final error.
func readAll(t testing.TB, r *SSEReader) ([]string, error) {
	t.Helper()
	var out []string
	for i := 0; ; i++ {
		if i > 1<<20 {
			t.Fatal("SSEReader did not terminate")
		}
		p, err := r.Next()
		if err != nil {
			if p != nil {
				t.Fatalf("Next returned payload %q together with error %v", p, err)
			}
			return out, err
		}
		out = append(out, string(p))
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // well past the reader's buffer
	cases := []struct {
		name    string
		in      string
		want    []string
		wantErr error
	}{
		{"empty stream", "", nil, io.EOF},
		{"single event", "data: {\"a\":1}\n\n", []string{`{"a":1}`}, io.EOF},
		{"two events", "data: a\n\ndata: b\n\n", []string{"a", "b"}, io.EOF},
		{"no space after colon", "data:x\n\n", []string{"x"}, io.EOF},
		{"only one leading space removed", "data:  x\n\n", []string{" x"}, io.EOF},
		{"empty data", "data:\n\n", []string{""}, io.EOF},
		{"multi-line data joined with newline", "data: a\ndata: b\ndata: c\n\n", []string{"a\nb\nc"}, io.EOF},
		{"comments skipped", ": keep-alive\n\ndata: a\n: inside\n\n: trailing\n\n", []string{"a"}, io.EOF},
		{"event and id fields skipped", "event: message\nid: 7\nretry: 10\ndata: a\n\nevent: other\n\n", []string{"a"}, io.EOF},
		{"extra blank lines between events", "\n\n\ndata: a\n\n\n\n\ndata: b\n\n\n", []string{"a", "b"}, io.EOF},
		{"CRLF line endings", "data: a\r\n\r\ndata: b\r\ndata: c\r\n\r\n", []string{"a", "b\nc"}, io.EOF},
		{"CRLF comment", ": ping\r\n\r\ndata: z\r\n\r\n", []string{"z"}, io.EOF},
		{"done marker", "data: {\"x\":1}\n\ndata: [DONE]\n\n", []string{`{"x":1}`, "[DONE]"}, io.EOF},
		{"line longer than the buffer", "data: " + long + "\n\ndata: after\n\n", []string{long, "after"}, io.EOF},
		{"long multi-line", "data: " + long + "\ndata: " + long + "\n\n", []string{long + "\n" + long}, io.EOF},
		{"EOF after data line without blank line", "data: a\n\ndata: b\n", []string{"a"}, io.ErrUnexpectedEOF},
		{"EOF after a data-less field is clean", "data: a\n\nevent: x\n", []string{"a"}, io.EOF},
		{"EOF inside a comment line", "data: a\n\n: partial", []string{"a"}, io.ErrUnexpectedEOF},
		{"EOF after comment line is clean", "data: a\n\n: ping\n", []string{"a"}, io.EOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, mode := range []string{"whole", "one byte at a time"} {
				var src io.Reader = strings.NewReader(c.in)
				if mode != "whole" {
					src = iotest.OneByteReader(src)
				}
				got, err := readAll(t, NewSSEReader(src))
				if !equalStrings(got, c.want) {
					t.Fatalf("%s: payloads = %q, want %q", mode, clip(got), clip(c.want))
				}
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("%s: final error = %v, want %v", mode, err, c.wantErr)
				}
			}
		})
	}
}

// clip shortens long payloads in failure messages.
func clip(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		out[i] = s
	}
	return out
}

func TestSSEReaderEOFStaysEOF(t *testing.T) {
	r := NewSSEReader(strings.NewReader("data: a\n\n"))
	if p, err := r.Next(); err != nil || string(p) != "a" {
		t.Fatalf("Next = %q, %v", p, err)
	}
	for range 3 {
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("after the end: %v, want io.EOF", err)
		}
	}
}

func TestSSEReaderPassesReadErrors(t *testing.T) {
	boom := errors.New("boom")
	r := NewSSEReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom)))
	if p, err := r.Next(); err != nil || string(p) != "a" {
		t.Fatalf("Next = %q, %v", p, err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
}

// An engine connection cut in the middle of a data line must not yield the
// truncated payload as if it were a complete event: the worker would forward
// a broken JSON chunk to the client.
func TestSSEReaderEOFInsideDataLine(t *testing.T) {
	for _, in := range []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"hel",
		"data: a\n\ndata: {\"trunc",
		"data: a\ndata: b",
	} {
		got, err := readAll(t, NewSSEReader(strings.NewReader(in)))
		if err != io.ErrUnexpectedEOF {
			t.Errorf("%q: payloads %q, final error %v; want io.ErrUnexpectedEOF and no truncated payload", in, got, err)
		}
	}
}

func TestWriteEvent(t *testing.T) {
	var b bytes.Buffer
	if err := WriteEvent(&b, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := WriteEvent(&b, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "data: {\"a\":1}\n\ndata: \n\n"; got != want {
		t.Fatalf("WriteEvent wrote %q, want %q", got, want)
	}
}

func TestWriteDone(t *testing.T) {
	var b bytes.Buffer
	if err := WriteDone(&b); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "data: [DONE]\n\n"; got != want {
		t.Fatalf("WriteDone wrote %q, want %q", got, want)
	}
	if string(DoneMarker) != "[DONE]" {
		t.Fatalf("DoneMarker = %q", DoneMarker)
	}
}

func TestWriteErrorEvent(t *testing.T) {
	var b bytes.Buffer
	e := ErrKeyRevoked()
	if err := WriteErrorEvent(&b, e); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "data: "+string(e.Body())+"\n\n"; got != want {
		t.Fatalf("WriteErrorEvent wrote %q, want %q", got, want)
	}
	// And a reader sees it as one parseable error payload.
	p, err := NewSSEReader(&b).Next()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := ParseError(401, p)
	if !ok || got.Code != CodeKeyRevoked {
		t.Fatalf("ParseError(%s) = %#v, %v", p, got, ok)
	}
}

type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	f.n--
	return len(p), nil
}

func TestWriteEventPropagatesWriterErrors(t *testing.T) {
	boom := errors.New("closed")
	for n := range 3 { // fail on the prefix, the payload, the suffix
		if err := WriteEvent(&failAfter{n: n, err: boom}, []byte("x")); !errors.Is(err, boom) {
			t.Fatalf("fail after %d writes: err = %v", n, err)
		}
	}
	if err := WriteDone(&failAfter{err: boom}); !errors.Is(err, boom) {
		t.Fatalf("WriteDone: %v", err)
	}
	if err := WriteErrorEvent(&failAfter{err: boom}, ErrInternal("x")); !errors.Is(err, boom) {
		t.Fatalf("WriteErrorEvent: %v", err)
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	payloads := []string{`{"id":"1","choices":[{"delta":{"content":"hi"}}]}`, ` leading space`, "", strings.Repeat("y", 100<<10)}
	var b bytes.Buffer
	for _, p := range payloads {
		if err := WriteEvent(&b, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	_ = WriteDone(&b)
	got, err := readAll(t, NewSSEReader(&b))
	if err != io.EOF {
		t.Fatalf("final error %v", err)
	}
	want := append(payloads, "[DONE]")
	if !equalStrings(got, want) {
		t.Fatalf("round trip: got %q, want %q", clip(got), clip(want))
	}
}

// A payload that itself contains a newline (pretty-printed JSON, which
// SSEReader produces from multi-line data fields) must survive a
// WriteEvent/SSEReader round trip.
func TestWriteEventMultiLinePayloadRoundTrip(t *testing.T) {
	p := "{\n  \"a\": 1\n}"
	var b bytes.Buffer
	if err := WriteEvent(&b, []byte(p)); err != nil {
		t.Fatal(err)
	}
	got, err := NewSSEReader(&b).Next()
	if err != nil || string(got) != p {
		t.Fatalf("round trip of %q: got %q, %v", p, got, err)
	}
}
