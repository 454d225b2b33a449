package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/aiforge/aiforge/pkg/contracts"
)

// ListParams reads limit (1..maxLimit, default def) and order (asc or
// desc, default desc), or answers 400.
func ListParams(w http.ResponseWriter, r *http.Request, def, maxLimit int) (int, string, bool) {
	q := r.URL.Query()
	limit := def
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			contracts.Write(w, contracts.ErrBadRequest("limit", contracts.CodeInvalidRequest, fmt.Sprintf("Invalid 'limit': expected an integer from 1 to %d.", maxLimit)))
			return 0, "", false
		}
		limit = n
	}
	order := q.Get("order")
	if order == "" {
		order = "desc"
	}
	if order != "asc" && order != "desc" {
		contracts.Write(w, contracts.ErrBadRequest("order", contracts.CodeInvalidRequest, "Invalid 'order': expected asc or desc."))
		return 0, "", false
	}
	return limit, order, true
}

// SortByCreated orders items by creation time, then id.
func SortByCreated[T any](items []T, order string, key func(T) (int64, string)) {
	slices.SortFunc(items, func(a, b T) int {
		ta, ia := key(a)
		tb, ib := key(b)
		c := int(ta - tb)
		if c == 0 {
			c = strings.Compare(ia, ib)
		}
		if order == "desc" {
			return -c
		}
		return c
	})
}

// PageAfter returns up to limit items after the one with id after, and
// whether more follow.
func PageAfter[T any](items []T, after string, id func(T) string, limit int) ([]T, bool) {
	start := 0
	if after != "" {
		for i, it := range items {
			if id(it) == after {
				start = i + 1
				break
			}
		}
	}
	items = items[start:]
	if len(items) > limit {
		return items[:limit], true
	}
	return items, false
}

// ListPage is OpenAI's cursor page for the lists whose schema requires
// first_id and last_id as strings (files, vector stores, vector store
// files, containers): an empty page has them empty, never null.
func ListPage[T any](items []T, more bool, id func(T) string) map[string]any {
	out := ListPageOptionalCursors(items, more, id)
	if len(items) == 0 {
		out["first_id"], out["last_id"] = "", ""
	}
	return out
}

// ListPageOptionalCursors is OpenAI's cursor page for the lists whose
// schema has first_id and last_id optional and not nullable (batches): an
// empty page leaves them out.
func ListPageOptionalCursors[T any](items []T, more bool, id func(T) string) map[string]any {
	out := map[string]any{"object": "list", "data": items, "has_more": more}
	if items == nil {
		out["data"] = []T{}
	}
	if len(items) > 0 {
		out["first_id"] = id(items[0])
		out["last_id"] = id(items[len(items)-1])
	}
	return out
}

// OpenAIShaped serves mux, answering unknown paths and wrong methods in
// OpenAI's error shape too.
func OpenAIShaped(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // sets the path values
			return
		}
		rec := &statusProbe{}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			contracts.Write(w, contracts.ErrMethodNotAllowed(r.Method))
			return
		}
		contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("Unknown request URL: %s %s.", Bounded(r.Method, 32), Bounded(r.URL.Path, 256))))
	})
}

// statusProbe captures the status the mux would answer for an unmatched
// request, without writing anything.
type statusProbe struct {
	status int
	h      http.Header
}

func (p *statusProbe) Header() http.Header {
	if p.h == nil {
		p.h = http.Header{}
	}
	return p.h
}
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int)        { p.status = code }
