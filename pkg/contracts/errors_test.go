package contracts

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// decodeBody decodes an error body into generic JSON so that the exact keys
// and null values can be checked.
func decodeBody(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatalf("body %q is not JSON: %v", b, err)
	}
	if len(top) != 1 {
		t.Fatalf("body %s: want exactly one top-level key \"error\", got %d", b, len(top))
	}
	inner, ok := top["error"].(map[string]any)
	if !ok {
		t.Fatalf("body %s: \"error\" is not an object", b)
	}
	return inner
}

func keysOf(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestErrorBodyShape(t *testing.T) {
	want := []string{"code", "message", "param", "type"}

	t.Run("param and code set", func(t *testing.T) {
		e := &Error{Status: 400, Message: "bad model", Type: TypeInvalidRequest, Param: "model", Code: CodeInvalidType}
		inner := decodeBody(t, e.Body())
		if got := keysOf(inner); !slices.Equal(got, want) {
			t.Fatalf("keys = %v, want %v", got, want)
		}
		if inner["message"] != "bad model" || inner["type"] != TypeInvalidRequest ||
			inner["param"] != "model" || inner["code"] != CodeInvalidType {
			t.Fatalf("unexpected values: %v", inner)
		}
	})

	t.Run("empty param and code are null", func(t *testing.T) {
		e := &Error{Status: 500, Message: "boom", Type: TypeServer}
		b := e.Body()
		inner := decodeBody(t, b)
		if got := keysOf(inner); !slices.Equal(got, want) {
			t.Fatalf("keys = %v, want %v", got, want)
		}
		for _, k := range []string{"param", "code"} {
			v, present := inner[k]
			if !present || v != nil {
				t.Fatalf("%s = %#v (present %v), want JSON null", k, v, present)
			}
		}
		if !strings.Contains(string(b), `"param":null`) || !strings.Contains(string(b), `"code":null`) {
			t.Fatalf("body %s does not spell null for param/code", b)
		}
	})

	t.Run("status is not part of the body", func(t *testing.T) {
		b := ErrInvalidAPIKey().Body()
		if strings.Contains(string(b), "401") || strings.Contains(string(b), "Status") {
			t.Fatalf("body leaks the HTTP status: %s", b)
		}
	})

	t.Run("message with quotes and html survives", func(t *testing.T) {
		msg := `model "<x>" & 'y'` + "\n\u00e9"
		e := &Error{Status: 400, Message: msg, Type: TypeInvalidRequest}
		inner := decodeBody(t, e.Body())
		if inner["message"] != msg {
			t.Fatalf("message = %q, want %q", inner["message"], msg)
		}
		// Written as is, not as \u003c escapes, and on one line.
		if b := e.Body(); !strings.Contains(string(b), `<x>`) || !strings.Contains(string(b), `&`) || strings.HasSuffix(string(b), "\n") {
			t.Fatalf("body %s escapes HTML or ends in a newline", b)
		}
	})
}

func TestErrorString(t *testing.T) {
	e := &Error{Status: 403, Code: CodeModelNotAllowed, Param: "model", Message: "no"}
	if got := e.Error(); !strings.Contains(got, "403") || !strings.Contains(got, CodeModelNotAllowed) || !strings.Contains(got, "model") {
		t.Fatalf("Error() = %q", got)
	}
	e = &Error{Status: 500, Code: CodeInternal, Message: "x"}
	if got := e.Error(); !strings.Contains(got, "500") || !strings.Contains(got, CodeInternal) {
		t.Fatalf("Error() = %q", got)
	}
}

func TestParseErrorRoundTrip(t *testing.T) {
	catalog := []*Error{
		ErrInvalidAPIKey(),
		ErrKeyRevoked(),
		ErrModelNotAllowed("llama"),
		ErrModelNotFound("meta-llama/Llama-3.1-8B:q4"),
		ErrBadRequest("messages", CodeMissingParam, "Missing required parameter: 'messages'."),
		ErrBadRequest("", "", "defaulted code"),
		ErrBodyTooLarge(1 << 20),
		ErrNoWorker("m"),
		ErrEngine("engine broke"),
		ErrEngineTimeout("slow"),
		ErrWorkerLost(),
		ErrShuttingDown(),
		ErrNotFound("nothing"),
		ErrMethodNotAllowed("PATCH"),
		ErrConflict("dup"),
		ErrInternal("oops"),
		ErrOverloaded("m"),
		{Status: 418, Message: "teapot", Type: TypeInvalidRequest}, // no param, no code
	}
	for _, want := range catalog {
		got, ok := ParseError(want.Status, want.Body())
		if !ok {
			t.Fatalf("ParseError(%s) refused its own body", want.Body())
		}
		if *got != *want {
			t.Fatalf("round trip:\n got  %#v\n want %#v", *got, *want)
		}
	}
	if e := ErrBadRequest("", "", "x"); e.Code != CodeInvalidRequest || e.Status != http.StatusBadRequest {
		t.Fatalf("ErrBadRequest default code: %#v", e)
	}
}

func TestParseErrorRejectsNonErrors(t *testing.T) {
	for _, body := range []string{
		``,
		`not json`,
		`null`,
		`[]`,
		`"error"`,
		`{}`,
		`{"error":null}`,
		`{"error":"a string"}`,
		`{"error":{}}`,
		`{"error":{"message":""}}`,
		`{"error":{"type":"server_error","code":"x"}}`,
		`{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`,
		`{"error":{"message":"truncated"`,
	} {
		if e, ok := ParseError(400, []byte(body)); ok || e != nil {
			t.Errorf("ParseError(%q) = %#v, %v; want nil, false", body, e, ok)
		}
	}
}

func TestParseErrorFields(t *testing.T) {
	cases := []struct {
		name, body string
		want       Error
	}{
		{"numeric code", `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":400}}`,
			Error{Status: 400, Message: "m", Type: TypeInvalidRequest, Code: "400"}},
		{"negative numeric code", `{"error":{"message":"m","type":"t","code":-1}}`,
			Error{Status: 400, Message: "m", Type: "t", Code: "-1"}},
		{"fractional code dropped", `{"error":{"message":"m","type":"t","code":1.5}}`,
			Error{Status: 400, Message: "m", Type: "t"}},
		{"object code dropped", `{"error":{"message":"m","type":"t","code":{"a":1}}}`,
			Error{Status: 400, Message: "m", Type: "t"}},
		{"null code", `{"error":{"message":"m","type":"t","code":null}}`,
			Error{Status: 400, Message: "m", Type: "t"}},
		{"absent code", `{"error":{"message":"m","type":"t"}}`,
			Error{Status: 400, Message: "m", Type: "t"}},
		{"missing type defaults to server_error", `{"error":{"message":"m"}}`,
			Error{Status: 400, Message: "m", Type: TypeServer}},
		{"param kept", `{"error":{"message":"m","type":"t","param":"temperature","code":"c"}}`,
			Error{Status: 400, Message: "m", Type: "t", Param: "temperature", Code: "c"}},
		{"extra fields ignored", `{"error":{"message":"m","type":"t","code":"c","extra":[1,2]},"object":"error"}`,
			Error{Status: 400, Message: "m", Type: "t", Code: "c"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ParseError(400, []byte(c.body))
			if !ok {
				t.Fatalf("ParseError refused %s", c.body)
			}
			if *got != c.want {
				t.Fatalf("got %#v, want %#v", *got, c.want)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	e := ErrModelNotAllowed("x")
	Write(rec, e)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("status = %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Fatal("missing nosniff")
	}
	if rec.Body.String() != string(e.Body()) {
		t.Fatalf("body = %s, want %s", rec.Body.String(), e.Body())
	}
}

// TestWriteRetryAfter: an error's RetryAfter is the header, rounded up to
// whole seconds; a 503 without one gets the default, a handler's own
// header is kept, and other statuses get none.
func TestWriteRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		e      *Error
		preset string
		want   string
	}{
		{"503 default", ErrServiceUnavailable("usage", "did not answer"), "", "1"},
		{"503 own", &Error{Status: 503, Type: TypeServer, Code: CodeServiceUnavailable, Message: "m", RetryAfter: 1500 * time.Millisecond}, "", "2"},
		{"503 handler's header", ErrShuttingDown(), "7", "7"},
		{"RetryAfter over the handler's", &Error{Status: 503, Message: "m", RetryAfter: 3 * time.Second}, "7", "3"},
		{"429 handler's header", ErrOverloaded("m"), "4", "4"},
		{"500 none", ErrInternal("x"), "", ""},
		{"429 none", ErrOverloaded("m"), "", ""},
		{"model_warming: the rest of the start", ErrModelWarming("m", 4200*time.Millisecond), "", "5"},
		{"model_warming: at least a second", ErrModelWarming("m", 0), "", "1"},
	} {
		rec := httptest.NewRecorder()
		if tc.preset != "" {
			rec.Header().Set("Retry-After", tc.preset)
		}
		Write(rec, tc.e)
		if got := rec.Header().Get("Retry-After"); got != tc.want || rec.Code != tc.e.Status {
			t.Errorf("%s: %d Retry-After %q, want %d %q", tc.name, rec.Code, got, tc.e.Status, tc.want)
		}
	}
}

func TestCatalogStatusesAndTypes(t *testing.T) {
	cases := []struct {
		e      *Error
		status int
		typ    string
		code   string
	}{
		{ErrInvalidAPIKey(), 401, TypeInvalidRequest, CodeInvalidAPIKey},
		{ErrKeyRevoked(), 401, TypeInvalidRequest, CodeKeyRevoked},
		{ErrModelNotAllowed("m"), 403, TypePermission, CodeModelNotAllowed},
		{ErrModelNotFound("m"), 404, TypeInvalidRequest, CodeModelNotFound},
		{ErrBodyTooLarge(1), 413, TypeInvalidRequest, CodeBodyTooLarge},
		{ErrNoWorker("m"), 503, TypeServer, CodeNoWorker},
		{ErrModelWarming("m", time.Second), 503, TypeServer, CodeModelWarming},
		{ErrEngine("x"), 502, TypeServer, CodeEngineError},
		{ErrEngineTimeout("x"), 504, TypeServer, CodeEngineTimeout},
		{ErrWorkerLost(), 502, TypeServer, CodeWorkerLost},
		{ErrShuttingDown(), 503, TypeServer, CodeShuttingDown},
		{ErrNotFound("x"), 404, TypeInvalidRequest, CodeNotFound},
		{ErrMethodNotAllowed("PUT"), 405, TypeInvalidRequest, CodeMethodNotAllowed},
		{ErrConflict("x"), 409, TypeInvalidRequest, CodeConflict},
		{ErrInternal("x"), 500, TypeServer, CodeInternal},
		{ErrOverloaded("m"), 429, TypeRateLimit, CodeOverloaded},
		{ErrStorageUnavailable(), 503, TypeServer, CodeStorageUnavailable},
		{ErrServiceUnavailable("usage", "is not running"), 503, TypeServer, CodeServiceUnavailable},
	}
	for _, c := range cases {
		if c.e.Status != c.status || c.e.Type != c.typ || c.e.Code != c.code || c.e.Message == "" {
			t.Errorf("%#v: want %d %s %s with a message", *c.e, c.status, c.typ, c.code)
		}
	}
	var target *Error
	if !errors.As(error(ErrInternal("x")), &target) {
		t.Fatal("*Error does not satisfy error / errors.As")
	}
}
