package edge

import (
	"net/http"
	"testing"
)

func TestParsePlainError(t *testing.T) {
	for in, want := range map[string]int{
		"HTTP/1.1 431 Request Header Fields Too Large" + plainErrorHeaders + "431 Request Header Fields Too Large":                     431,
		"HTTP/1.1 400 Bad Request: missing required Host header" + plainErrorHeaders + "400 Bad Request: missing required Host header": 400,
		"HTTP/1.1 501 Not Implemented" + plainErrorHeaders + "Unsupported transfer encoding":                                           501,
		// A handler's answer: other headers, a body over lines.
		"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nDate: x\r\n\r\n{}": 0,
		"HTTP/1.1 200 OK" + plainErrorHeaders + "ok":                                      0,
		"HTTP/1.1 400 Bad Request" + plainErrorHeaders + "two\r\nlines":                   0,
		"data: {}\n\n": 0,
	} {
		e, ok := parsePlainError([]byte(in))
		switch {
		case want == 0 && ok:
			t.Errorf("%q rewritten to %v", in, e)
		case want != 0 && (!ok || e.Status != want):
			t.Errorf("%q: %v %v, want status %d", in, e, ok, want)
		case want == http.StatusBadRequest && e.Message != "The HTTP request is malformed: missing required Host header.":
			t.Errorf("message %q", e.Message)
		}
	}
}
