// Package httpapi holds the HTTP helpers every API of the edge shares:
// JSON answers and bodies, bearer and admin authentication, OpenAI's list
// pages and its answers to unknown paths and methods.
package httpapi

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		contracts.Write(w, contracts.ErrInternal("could not encode the response"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Bearer is the token of the Authorization header.
func Bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return "", false
	}
	return strings.TrimSpace(h[7:]), true
}

// ConstantEqual compares secrets in constant time.
func ConstantEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// IsAdmin reports whether r presents the admin key.
func IsAdmin(r *http.Request, adminKey string) bool {
	got, ok := Bearer(r)
	return ok && ConstantEqual(got, adminKey)
}

// Admin lets only requests with the admin key through to h.
func Admin(adminKey string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !IsAdmin(r, adminKey) {
			contracts.Write(w, &contracts.Error{Status: http.StatusUnauthorized, Type: contracts.TypeInvalidRequest,
				Code: contracts.CodeInvalidAPIKey, Message: "The admin API needs 'Authorization: Bearer <admin key>'."})
			return
		}
		h(w, r)
	}
}

// Keys finds API keys by id (the directory).
type Keys interface {
	Key(id string) *registry.Key
}

// KeyOf returns the API key presented by r, or nil.
func KeyOf(keys Keys, r *http.Request) *registry.Key {
	secret, ok := Bearer(r)
	if !ok {
		return nil
	}
	id, ok := registry.KeyIDOf(secret)
	if !ok {
		return nil
	}
	if k := keys.Key(id); k != nil && k.Verify(secret) {
		return k
	}
	return nil
}

// Authenticate returns the key of the request or writes a 401.
func Authenticate(keys Keys, w http.ResponseWriter, r *http.Request) *registry.Key {
	if k := KeyOf(keys, r); k != nil {
		return k
	}
	contracts.Write(w, contracts.ErrInvalidAPIKey())
	return nil
}

// TenantAPI authenticates a tenant key for the APIs that keep tenant data
// in the object store; without one (storage false) they answer 503.
func TenantAPI(keys Keys, storage bool, h func(http.ResponseWriter, *http.Request, *registry.Key)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		k := Authenticate(keys, w, r)
		if k == nil {
			return
		}
		if !storage {
			contracts.Write(w, contracts.ErrStorageUnavailable())
			return
		}
		h(w, r, k)
	}
}

// TrimJSONErr bounds a decoding error for an answer.
func TrimJSONErr(err error) string {
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// Decode reads a JSON body of up to 1 MiB, tolerating unknown fields.
func Decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			contracts.Write(w, contracts.ErrBadRequest(te.Field, contracts.CodeInvalidType, "Invalid type for '"+te.Field+"'."))
			return false
		}
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not valid JSON: "+TrimJSONErr(err)))
		return false
	}
	return true
}

// DecodeStrict reads a small JSON object strictly: unknown fields are
// refused so that a typo does not silently do nothing (the admin API).
func DecodeStrict(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			TooLarge(w, r, 1<<20)
		case errors.As(err, &te):
			contracts.Write(w, contracts.ErrBadRequest(te.Field, contracts.CodeInvalidType, "Invalid type for '"+te.Field+"'."))
		case errors.Is(err, io.EOF):
			contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is empty; a JSON object is expected."))
		default:
			contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not valid: "+TrimJSONErr(err)))
		}
		return false
	}
	return true
}

// UpperFirst capitalises the first letter of an error message.
func UpperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// SortableID starts with the creation time in microseconds, so ids created
// in the same second still sort in creation order.
func SortableID(prefix string) string {
	return prefix + fmt.Sprintf("%013x", time.Now().UnixMicro()) + events.NewID()[:11]
}

// NotFound answers OpenAI's 404 for an object that does not exist.
func NotFound(w http.ResponseWriter, what, id string) {
	contracts.Write(w, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Code: contracts.CodeNotFound,
		Message: fmt.Sprintf("No such %s: %s", what, id)})
}

// DrainLimit bounds what TooLarge reads of a body over the limit.
const DrainLimit = 64 << 20

// TooLarge answers 413 request_too_large for a body over limit, then reads
// and discards what is left of it (up to DrainLimit more bytes, and within
// the body's read deadline) before the connection is closed. A client that
// writes its whole body before it reads the answer, as most SDKs do, then
// gets the 413; closing with the body unread would reset the connection,
// the client would see a broken pipe and retry the same body.
func TooLarge(w http.ResponseWriter, r *http.Request, limit int64) *contracts.Error {
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // read the body after the answer is out
	w.Header().Set("Connection", "close")
	e := contracts.ErrBodyTooLarge(limit)
	contracts.Write(w, e)
	_ = rc.Flush()
	if r.ContentLength < 0 || r.ContentLength-limit <= DrainLimit {
		// A body declared larger than that is not read: it would be cut
		// off anyway.
		_, _ = io.CopyN(io.Discard, r.Body, DrainLimit)
	}
	return e
}

// BodyError answers the failure to read a request body: 413 past the
// limit (see TooLarge), 408 when the client sent it too slowly (the edge's
// body read deadline), else 400. It returns the error it answered.
func BodyError(w http.ResponseWriter, r *http.Request, err error) *contracts.Error {
	var mbe *http.MaxBytesError
	var ne net.Error
	var e *contracts.Error
	switch {
	case errors.As(err, &mbe):
		return TooLarge(w, r, mbe.Limit)
	case errors.As(err, &ne) && ne.Timeout():
		w.Header().Set("Connection", "close")
		e = &contracts.Error{Status: http.StatusRequestTimeout, Type: contracts.TypeInvalidRequest, Code: contracts.CodeRequestTimeout,
			Message: "The request body did not arrive in time."}
	default:
		e = contracts.ErrBadRequest("", contracts.CodeInvalidRequest, "Could not read the request body.")
	}
	contracts.Write(w, e)
	return e
}

// Bounded returns s cut to at most n bytes (on a rune boundary), with "..."
// when cut: for echoing client input in an answer.
func Bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
