package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	api "github.com/aiforge/aiforge/pkg/sandbox"
	"github.com/aiforge/aiforge/services/sandbox/runtime"
)

// maxRequestBytes bounds a request body: the largest is an exec (its
// code) with room for the JSON around it.
const maxRequestBytes = api.MaxCodeBytes*6 + 64<<10

// CodeServerError is the code of an unexpected failure (the details are
// logged, not answered).
const CodeServerError = "server_error"

// streamPrefix is where a streamed exec's chunks may go: the edge's
// sandbox reply namespace, which is all the sandbox identity may publish
// to besides replies.
var streamPrefix = events.SandboxReplies(busauth.InboxPrefix(busauth.Edge)) + "."

// caller is who a request is from, read from the headers the edge sets.
type caller struct {
	tenant, keyID string
}

func callerOf(m *nats.Msg) (caller, error) {
	c := caller{tenant: m.Header.Get(bridge.HdrTenant), keyID: m.Header.Get(bridge.HdrKeyID)}
	if c.tenant == "" {
		return c, &api.ErrorBody{Status: http.StatusBadRequest, Code: api.CodeInvalidRequest,
			Message: "the request carries no tenant (" + bridge.HdrTenant + " header)"}
	}
	if !registry.ValidTenantID(c.tenant) {
		return c, &api.ErrorBody{Status: http.StatusBadRequest, Code: api.CodeInvalidRequest, Message: "the tenant is not a valid token"}
	}
	if len(c.keyID) > 256 {
		return c, &api.ErrorBody{Status: http.StatusBadRequest, Code: api.CodeInvalidRequest, Message: "the key id is too long"}
	}
	return c, nil
}

// decode reads a request body into v: an empty body is the zero request,
// a body over maxRequestBytes or not JSON of v is refused.
func decode(m *nats.Msg, v any) error {
	if len(m.Data) > maxRequestBytes {
		return &api.ErrorBody{Status: http.StatusRequestEntityTooLarge, Code: api.CodeInvalidRequest,
			Message: fmt.Sprintf("the request body is over %d bytes", maxRequestBytes)}
	}
	if len(m.Data) == 0 {
		return nil
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return &api.ErrorBody{Status: http.StatusBadRequest, Code: api.CodeInvalidRequest, Message: "the request body is not valid JSON: " + err.Error()}
	}
	return nil
}

// reply answers m with status 200 and v as JSON.
func reply(m *nats.Msg, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return respond(m, http.StatusOK, body)
}

func respond(m *nats.Msg, status int, body []byte) error {
	if m.Reply == "" {
		return nil
	}
	r := nats.NewMsg(m.Reply)
	r.Header.Set(api.HdrStatus, strconv.Itoa(status))
	r.Data = body
	return m.RespondMsg(r)
}

// errorBody turns any error into the body answered: an *ErrorBody as
// is, a *FieldError 400 with its param, a runtime error by its code,
// anything else 500 server_error (its text is logged, not answered).
func errorBody(err error) (eb *api.ErrorBody, internal bool) {
	var e *api.ErrorBody
	if errors.As(err, &e) {
		return e, false
	}
	var fe *api.FieldError
	if errors.As(err, &fe) {
		return &api.ErrorBody{Status: http.StatusBadRequest, Code: fe.Code, Message: fe.Message, Param: fe.Param}, false
	}
	var re *runtime.Error
	if errors.As(err, &re) {
		return &api.ErrorBody{Status: statusOf(re.Code), Code: re.Code, Message: re.Message}, false
	}
	if errors.Is(err, runtime.ErrUnavailable) {
		return &api.ErrorBody{Status: http.StatusServiceUnavailable, Code: api.CodeSandboxUnavailable,
			Message: "the sandbox runtime is unavailable on this replica"}, false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &api.ErrorBody{Status: http.StatusServiceUnavailable, Code: api.CodeSandboxUnavailable,
			Message: "the sandbox service stopped or timed out before the call finished"}, true
	}
	return &api.ErrorBody{Status: http.StatusInternalServerError, Code: CodeServerError, Message: "internal error of the sandbox service"}, true
}

// statusOf is the HTTP status of a pkg/sandbox code.
func statusOf(code string) int {
	switch code {
	case api.CodeContainerNotFound, api.CodeFileNotFound:
		return http.StatusNotFound
	case api.CodeContainerExpired, api.CodeInvalidPath, api.CodeInvalidRequest, api.CodeDomainNotAllowed:
		return http.StatusBadRequest
	case api.CodeFileTooLarge:
		return http.StatusRequestEntityTooLarge
	case api.CodeSandboxBusy:
		return http.StatusConflict
	case api.CodeSandboxCapacity:
		return http.StatusTooManyRequests
	case api.CodeSandboxUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func errorJSON(eb *api.ErrorBody) []byte {
	b, _ := json.Marshal(eb)
	return b
}

func notFound(id string) *api.ErrorBody {
	return &api.ErrorBody{Status: http.StatusNotFound, Code: api.CodeContainerNotFound, Message: fmt.Sprintf("No container found with id '%s'.", id)}
}

func fileNotFound(id string) *api.ErrorBody {
	return &api.ErrorBody{Status: http.StatusNotFound, Code: api.CodeFileNotFound, Message: fmt.Sprintf("No file found with id '%s' in the container.", id)}
}

// expired is OpenAI's answer for a call on an expired container: 400
// "Container is expired.".
func expired(id string) *api.ErrorBody {
	return &api.ErrorBody{Status: http.StatusBadRequest, Code: api.CodeContainerExpired, Message: fmt.Sprintf("Container %s is expired.", id)}
}

func busy(what string) *api.ErrorBody {
	return &api.ErrorBody{Status: http.StatusConflict, Code: api.CodeSandboxBusy, Message: what}
}

func invalid(param, format string, a ...any) *api.ErrorBody {
	return &api.ErrorBody{Status: http.StatusBadRequest, Code: api.CodeInvalidRequest, Param: param, Message: fmt.Sprintf(format, a...)}
}

// newID is prefix and 24 random bytes in hex (OpenAI's ids are as long).
func newID(prefix string) string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// validStream reports whether a streamed exec's subject is one the
// service publishes to: under the edge's sandbox reply namespace, a
// literal subject of at most 256 bytes.
func validStream(subject string) bool {
	if !strings.HasPrefix(subject, streamPrefix) || len(subject) > 256 || len(subject) == len(streamPrefix) {
		return false
	}
	for _, tok := range strings.Split(subject, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	return !strings.ContainsAny(subject, " \t\r\n")
}

// normalizeList fills a list request's defaults and checks it.
func normalizeList(r *api.ListRequest) error {
	if r.Limit == 0 {
		r.Limit = 20
	}
	if r.Limit < 1 || r.Limit > 100 {
		return invalid("limit", "limit must be between 1 and 100")
	}
	switch r.Order {
	case "":
		r.Order = "desc"
	case "asc", "desc":
	default:
		return invalid("order", "order must be asc or desc")
	}
	if len(r.After) > 128 {
		return invalid("after", "after is not an id")
	}
	if len(r.Name) > api.MaxNameLen {
		return invalid("name", "name is over %d bytes", api.MaxNameLen)
	}
	return nil
}

// paginate orders items by created_at then id (the order asked) and
// returns the page after r.After; items must be ascending already.
func paginate[T any](items []T, id func(T) string, r api.ListRequest) (api.List[T], error) {
	if r.Order == "desc" {
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
		}
	}
	start := 0
	if r.After != "" {
		start = -1
		for i, it := range items {
			if id(it) == r.After {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return api.List[T]{}, invalid("after", "after names no object of this list: %s", r.After)
		}
	}
	page := items[start:]
	more := len(page) > r.Limit
	if more {
		page = page[:r.Limit]
	}
	l := api.List[T]{Object: api.ObjectList, Data: page, HasMore: more}
	if l.Data == nil {
		l.Data = []T{}
	}
	if len(page) > 0 {
		l.FirstID, l.LastID = id(page[0]), id(page[len(page)-1])
	}
	return l, nil
}
