package index

import (
	"errors"
	"fmt"
	"reflect"
)

// Filter types: comparisons and compounds (OpenAI vector store search filters).
const (
	FilterEq  = "eq"
	FilterNe  = "ne"
	FilterGt  = "gt"
	FilterGte = "gte"
	FilterLt  = "lt"
	FilterLte = "lte"
	FilterIn  = "in"
	FilterNin = "nin"
	FilterAnd = "and"
	FilterOr  = "or"
)

const (
	maxFilterDepth = 10
	maxFilterNodes = 256
)

// Filter is an OpenAI vector store search filter over chunk attributes.
//
// Comparisons (eq, ne, gt, gte, lt, lte, in, nin) compare the attribute Key with Value. Semantics, identical in
// every implementation:
//
//   - eq matches when the attribute exists, has the same type as Value and is equal; ne is its negation, so a
//     chunk without the attribute matches ne.
//   - gt, gte, lt, lte need a numeric Value and match numeric attributes only.
//   - in matches when the attribute equals any element of Value (a non-empty list of scalars); nin is its
//     negation (a chunk without the attribute matches nin).
//
// Compounds (and, or) combine Filters.
type Filter struct {
	Type    string
	Key     string
	Value   any // string, float64 (integers accepted), bool, or a list of those for in/nin
	Filters []Filter
}

// Validate reports whether f is a well-formed filter.
func (f Filter) Validate() error {
	_, err := f.normalize(0)
	return err
}

func isComparison(t string) bool {
	switch t {
	case FilterEq, FilterNe, FilterGt, FilterGte, FilterLt, FilterLte, FilterIn, FilterNin:
		return true
	}
	return false
}

// normalize validates f and returns a copy whose values are string, float64, bool or []any of those.
func (f Filter) normalize(depth int) (Filter, error) {
	nodes := 0
	return f.normalizeRec(depth, &nodes)
}

func (f Filter) normalizeRec(depth int, nodes *int) (Filter, error) {
	*nodes++
	if *nodes > maxFilterNodes {
		return Filter{}, Invalidf("filter has more than %d nodes", maxFilterNodes)
	}
	if depth > maxFilterDepth {
		return Filter{}, Invalidf("filter nested deeper than %d", maxFilterDepth)
	}
	switch {
	case isComparison(f.Type):
		var errs []error
		if err := validAttributeKey(f.Key); err != nil {
			errs = append(errs, fmt.Errorf("%s filter: %w", f.Type, err))
		}
		if len(f.Filters) > 0 {
			errs = append(errs, Invalidf("%s filter on %q must not have sub-filters", f.Type, f.Key))
		}
		out := Filter{Type: f.Type, Key: f.Key}
		switch f.Type {
		case FilterIn, FilterNin:
			list, err := normalizeList(f.Value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s filter on %q: %w", f.Type, f.Key, err))
			}
			out.Value = list
		case FilterGt, FilterGte, FilterLt, FilterLte:
			v, err := normalizeScalar(f.Value)
			if err == nil {
				if _, ok := v.(float64); !ok {
					err = Invalidf("value must be a number, got %T", f.Value)
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s filter on %q: %w", f.Type, f.Key, err))
			}
			out.Value = v
		default:
			v, err := normalizeScalar(f.Value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s filter on %q: %w", f.Type, f.Key, err))
			}
			out.Value = v
		}
		if err := errors.Join(errs...); err != nil {
			return Filter{}, err
		}
		return out, nil
	case f.Type == FilterAnd || f.Type == FilterOr:
		var errs []error
		if f.Key != "" || f.Value != nil {
			errs = append(errs, Invalidf("%s filter must not have a key or value", f.Type))
		}
		if len(f.Filters) == 0 {
			errs = append(errs, Invalidf("%s filter needs at least one sub-filter", f.Type))
		}
		out := Filter{Type: f.Type, Filters: make([]Filter, 0, len(f.Filters))}
		for i, sub := range f.Filters {
			n, err := sub.normalizeRec(depth+1, nodes)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", f.Type, i, err))
				continue
			}
			out.Filters = append(out.Filters, n)
		}
		if err := errors.Join(errs...); err != nil {
			return Filter{}, err
		}
		return out, nil
	case f.Type == "":
		return Filter{}, Invalidf("filter type is required")
	default:
		return Filter{}, Invalidf("unknown filter type %q", f.Type)
	}
}

func normalizeList(v any) ([]any, error) {
	if v == nil {
		return nil, Invalidf("value must be a non-empty list")
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, Invalidf("value must be a list, got %T", v)
	}
	if rv.Len() == 0 {
		return nil, Invalidf("value must be a non-empty list")
	}
	if rv.Len() > maxFilterNodes {
		return nil, Invalidf("list longer than %d", maxFilterNodes)
	}
	out := make([]any, 0, rv.Len())
	for i := range rv.Len() {
		x, err := normalizeScalar(rv.Index(i).Interface())
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// Matches evaluates a normalised filter (one from PreparedQuery) against normalised attributes.
func (f *Filter) Matches(attrs map[string]any) bool {
	switch f.Type {
	case FilterAnd:
		for i := range f.Filters {
			if !f.Filters[i].Matches(attrs) {
				return false
			}
		}
		return true
	case FilterOr:
		for i := range f.Filters {
			if f.Filters[i].Matches(attrs) {
				return true
			}
		}
		return false
	}
	a, ok := attrs[f.Key]
	switch f.Type {
	case FilterEq:
		return ok && a == f.Value
	case FilterNe:
		return !ok || a != f.Value
	case FilterIn, FilterNin:
		in := false
		if ok {
			for _, v := range f.Value.([]any) {
				if a == v {
					in = true
					break
				}
			}
		}
		return in == (f.Type == FilterIn)
	}
	x, isNum := a.(float64)
	if !ok || !isNum {
		return false
	}
	v := f.Value.(float64)
	switch f.Type {
	case FilterGt:
		return x > v
	case FilterGte:
		return x >= v
	case FilterLt:
		return x < v
	case FilterLte:
		return x <= v
	}
	return false
}
