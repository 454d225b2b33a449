package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/aiforge/aiforge/pkg/registry"
)

// MaxRouterFileBytes bounds a router file read by `aiforge routers set
// --file` (the registry's own bounds allow about 64 classes of 256
// examples of 4 KiB).
const MaxRouterFileBytes = 80 << 20

// RouterEdits are the command-line changes to a router, applied over a
// router file (or over nothing).
type RouterEdits struct {
	// Classes are "NAME=model:MODEL" or "NAME=tool:URL", in order: each sets
	// the class's target, creating the class (at the end) when it is new.
	Classes []string
	// Examples are `CLASS=utterance one|utterance two`: the examples of a
	// class given here replace the file's (every --examples of one class
	// adds to the replacement).
	Examples []string
	// Default, Threshold and EmbeddingModel replace the file's when set.
	Default        *string
	Threshold      *float64
	EmbeddingModel *string
}

// ParseRouterFile reads a router in the admin API's JSON shape; unknown
// fields are errors, as the API would refuse them.
func ParseRouterFile(data []byte) (registry.Router, error) {
	var r registry.Router
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return registry.Router{}, fmt.Errorf("router file: %w", err)
	}
	if dec.More() {
		return registry.Router{}, fmt.Errorf("router file: more than one JSON value")
	}
	return r, nil
}

// ParseClassTarget reads NAME=model:MODEL or NAME=tool:URL.
func ParseClassTarget(spec string) (name string, model string, tool *registry.Tool, err error) {
	name, target, ok := strings.Cut(spec, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return "", "", nil, fmt.Errorf("--class %q: want NAME=model:MODEL or NAME=tool:URL", spec)
	}
	kind, v, ok := strings.Cut(strings.TrimSpace(target), ":")
	if !ok || v == "" {
		return "", "", nil, fmt.Errorf("--class %q: want NAME=model:MODEL or NAME=tool:URL", spec)
	}
	switch kind {
	case "model":
		return name, v, nil, nil
	case "tool":
		return name, "", &registry.Tool{URL: v}, nil
	default:
		return "", "", nil, fmt.Errorf("--class %q: the target is model:MODEL or tool:URL, not %q", spec, kind+":")
	}
}

// ParseExamples reads CLASS=utterance one|utterance two; empty
// utterances are dropped.
func ParseExamples(spec string) (class string, examples []string, err error) {
	class, list, ok := strings.Cut(spec, "=")
	class = strings.TrimSpace(class)
	if !ok || class == "" {
		return "", nil, fmt.Errorf("--examples %q: want CLASS=\"utterance one|utterance two\"", spec)
	}
	for _, e := range strings.Split(list, "|") {
		if e = strings.TrimSpace(e); e != "" {
			examples = append(examples, e)
		}
	}
	if len(examples) == 0 {
		return "", nil, fmt.Errorf("--examples %q: no utterance", spec)
	}
	return class, examples, nil
}

// Apply returns base (a router file's, or the zero router) with the edits,
// named name. The result is checked by the API, not here.
func (e RouterEdits) Apply(name string, base registry.Router) (registry.Router, error) {
	r := base
	if r.Name != "" && r.Name != name {
		return registry.Router{}, fmt.Errorf("the router file names %q, the command %q", r.Name, name)
	}
	r.Name = name
	r.Classes = slices.Clone(r.Classes)
	index := func(class string) int {
		return slices.IndexFunc(r.Classes, func(c registry.RouteClass) bool { return c.Name == class })
	}
	for _, spec := range e.Classes {
		cname, model, tool, err := ParseClassTarget(spec)
		if err != nil {
			return registry.Router{}, err
		}
		i := index(cname)
		if i < 0 {
			r.Classes = append(r.Classes, registry.RouteClass{Name: cname})
			i = len(r.Classes) - 1
		}
		r.Classes[i].Model, r.Classes[i].Tool = model, tool
	}
	replaced := map[string]bool{}
	for _, spec := range e.Examples {
		cname, ex, err := ParseExamples(spec)
		if err != nil {
			return registry.Router{}, err
		}
		i := index(cname)
		if i < 0 {
			return registry.Router{}, fmt.Errorf("--examples %q: no class %q (give it with --class or in --file)", spec, cname)
		}
		if !replaced[cname] {
			r.Classes[i].Examples, replaced[cname] = nil, true
		}
		r.Classes[i].Examples = append(r.Classes[i].Examples, ex...)
	}
	if e.Default != nil {
		r.Default = *e.Default
	}
	if e.Threshold != nil {
		r.Threshold = *e.Threshold
	}
	if e.EmbeddingModel != nil {
		r.EmbeddingModel = *e.EmbeddingModel
	}
	return r, nil
}

// PutRouter creates or replaces a router.
func (c *Client) PutRouter(ctx context.Context, r registry.Router) (registry.Router, error) {
	var out registry.Router
	err := c.Do(ctx, "PUT", "/admin/v1/routers/"+escapePath(r.Name), r, &out)
	return out, err
}

// GetRouter returns one router.
func (c *Client) GetRouter(ctx context.Context, name string) (registry.Router, error) {
	var out registry.Router
	err := c.Do(ctx, "GET", "/admin/v1/routers/"+escapePath(name), nil, &out)
	return out, err
}

// ListRouters returns every router, sorted by name.
func (c *Client) ListRouters(ctx context.Context) ([]registry.Router, error) {
	var out struct {
		Data []registry.Router `json:"data"`
	}
	err := c.Do(ctx, "GET", "/admin/v1/routers", nil, &out)
	return out.Data, err
}

// DeleteRouter removes a router.
func (c *Client) DeleteRouter(ctx context.Context, name string) error {
	return c.Do(ctx, "DELETE", "/admin/v1/routers/"+escapePath(name), nil, nil)
}

// ClearCache removes the semantic cache's answers of model, of one tenant
// or (tenant "") of every tenant; it returns how many.
func (c *Client) ClearCache(ctx context.Context, model, tenant string) (int, error) {
	q := url.Values{"model": {model}}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	var out struct {
		Purged int `json:"purged"`
	}
	err := c.Do(ctx, "DELETE", "/admin/v1/cache?"+q.Encode(), nil, &out)
	return out.Purged, err
}

// RouterTarget is a class's target as shown: model:M or tool:URL.
func RouterTarget(c registry.RouteClass) string {
	if c.Tool != nil {
		return "tool:" + c.Tool.URL
	}
	return "model:" + c.Model
}

// RouterMatching says how a router compares prompts with its examples.
func RouterMatching(r registry.Router) string {
	if r.EmbeddingModel != "" {
		return "embeddings (" + r.EmbeddingModel + ")"
	}
	return "lexical"
}
