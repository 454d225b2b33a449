package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
)

// Bounds of a router.
const (
	MaxRouteClasses   = 64
	MaxClassExamples  = 256
	MaxExampleBytes   = 4096
	MaxRouteClassName = 64
)

// RouterKey is the KV key of a router in events.BucketRouters.
func RouterKey(name string) string { return "r." + strings.ToLower(kvEnc.EncodeToString([]byte(name))) }

// ValidateRouter checks a router: a model name, classes with unique names,
// each with exactly one of a model or a tool (an http(s) URL) and at least
// one example, a default that names a class, a threshold in [0, 1].
func ValidateRouter(r Router) error {
	var errs []error
	if r.Name == "" || len(r.Name) > 256 || strings.ContainsAny(r.Name, " \t\r\n") {
		errs = append(errs, errors.New("name must be 1-256 characters without whitespace"))
	}
	if len(r.Classes) == 0 || len(r.Classes) > MaxRouteClasses {
		errs = append(errs, fmt.Errorf("classes: between 1 and %d", MaxRouteClasses))
	}
	seen := map[string]bool{}
	for i, c := range r.Classes {
		where := fmt.Sprintf("classes[%d]", i)
		switch {
		case c.Name == "" || len(c.Name) > MaxRouteClassName || strings.ContainsAny(c.Name, " \t\r\n,"):
			errs = append(errs, fmt.Errorf("%s.name must be 1-%d characters without whitespace or commas", where, MaxRouteClassName))
		case seen[c.Name]:
			errs = append(errs, fmt.Errorf("%s.name %q is not unique", where, c.Name))
		}
		seen[c.Name] = true
		if (c.Model == "") == (c.Tool == nil) {
			errs = append(errs, fmt.Errorf("%s: exactly one of model or tool", where))
		}
		if c.Model == r.Name && c.Model != "" {
			errs = append(errs, fmt.Errorf("%s.model: a router cannot route to itself", where))
		}
		if c.Tool != nil && !strings.HasPrefix(c.Tool.URL, "http://") && !strings.HasPrefix(c.Tool.URL, "https://") {
			errs = append(errs, fmt.Errorf("%s.tool.url must be an http(s) URL", where))
		}
		if len(c.Examples) == 0 || len(c.Examples) > MaxClassExamples {
			errs = append(errs, fmt.Errorf("%s.examples: between 1 and %d", where, MaxClassExamples))
		}
		for j, e := range c.Examples {
			if strings.TrimSpace(e) == "" || len(e) > MaxExampleBytes {
				errs = append(errs, fmt.Errorf("%s.examples[%d] must be non-empty and at most %d bytes", where, j, MaxExampleBytes))
			}
		}
	}
	if !seen[r.Default] || r.Default == "" {
		errs = append(errs, fmt.Errorf("default %q must name one of the classes", r.Default))
	}
	if !(r.Threshold >= 0 && r.Threshold <= 1) {
		errs = append(errs, errors.New("threshold must be between 0 and 1"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Class is the class of r named name.
func (r Router) Class(name string) (RouteClass, bool) {
	i := slices.IndexFunc(r.Classes, func(c RouteClass) bool { return c.Name == name })
	if i < 0 {
		return RouteClass{}, false
	}
	return r.Classes[i], true
}

// ClassNames lists r's classes in order.
func (r Router) ClassNames() []string {
	out := make([]string, len(r.Classes))
	for i, c := range r.Classes {
		out[i] = c.Name
	}
	return out
}

// ValidateCachePolicy checks a model's cache policy.
func ValidateCachePolicy(p CachePolicy) error {
	var errs []error
	if p.TTL < 0 {
		errs = append(errs, errors.New("cache.ttl must not be negative"))
	}
	if !(p.Similarity >= 0 && p.Similarity <= 1) {
		errs = append(errs, errors.New("cache.similarity must be between 0 and 1"))
	}
	if !(p.MaxTemperature >= 0 && p.MaxTemperature <= 2) {
		errs = append(errs, errors.New("cache.max_temperature must be between 0 and 2"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// routers binds the routers bucket. It is opened on use, not by Open:
// identities that never read routers hold no grant on it.
func (s *Store) routers(ctx context.Context) (jetstream.KeyValue, error) {
	b, err := s.js.KeyValue(ctx, events.BucketRouters)
	if err != nil {
		return nil, fmt.Errorf("registry: bucket %s: %w", events.BucketRouters, err)
	}
	return b, nil
}

// PutRouter creates or replaces a router.
func (s *Store) PutRouter(ctx context.Context, r Router) error {
	if err := ValidateRouter(r); err != nil {
		return err
	}
	b, err := s.routers(ctx)
	if err != nil {
		return err
	}
	return put(ctx, b, RouterKey(r.Name), r, false)
}

// GetRouter returns a router; ErrNotFound when there is none.
func (s *Store) GetRouter(ctx context.Context, name string) (Router, error) {
	b, err := s.routers(ctx)
	if err != nil {
		return Router{}, err
	}
	return get[Router](ctx, b, RouterKey(name))
}

// ListRouters returns every router, sorted by name.
func (s *Store) ListRouters(ctx context.Context) ([]Router, error) {
	b, err := s.routers(ctx)
	if err != nil {
		return nil, err
	}
	rs, err := list[Router](ctx, b)
	slices.SortFunc(rs, func(a, b Router) int { return strings.Compare(a.Name, b.Name) })
	return rs, err
}

// DeleteRouter removes a router.
func (s *Store) DeleteRouter(ctx context.Context, name string) error {
	b, err := s.routers(ctx)
	if err != nil {
		return err
	}
	return del(ctx, b, RouterKey(name))
}

// WatchRouters is WatchKeys for routers.
func (s *Store) WatchRouters(ctx context.Context, fn func(c Change[Router], initialDone bool)) error {
	b, err := s.routers(ctx)
	if err != nil {
		return err
	}
	return watch(ctx, b, fn)
}
