package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// The OpenAI component schemas aiforge's bodies are validated against:
// testdata/openai/components.yaml, taken from OpenAI's published OpenAPI
// document (README.md beside it says where from and how). The document is
// OpenAPI 3.1, whose schema objects are JSON Schema 2020-12; the one 3.0
// leftover it still uses, `nullable: true`, is turned into the 2020-12
// form (`type: [T, "null"]`, or `anyOf: [S, {type: "null"}]` beside a $ref
// or a composition) as the document is loaded. Components aiforge never
// emits, which the extracted ones reference only as alternatives
// (testdata/openai/not-extracted.txt), are `false`: any value there fails.

const specURL = "https://aiforge.invalid/openai-components.json"

type openaiSpec struct {
	compiler *jsonschema.Compiler
	names    map[string]bool
	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema
}

var (
	specOnce sync.Once
	specVal  *openaiSpec
	specErr  error
)

// loadSpec loads the fixture once per test binary.
func loadSpec(t testing.TB) *openaiSpec {
	t.Helper()
	specOnce.Do(func() { specVal, specErr = readSpec("testdata/openai") })
	if specErr != nil {
		t.Fatalf("openai spec fixture: %v", specErr)
	}
	return specVal
}

func readSpec(dir string) (*openaiSpec, error) {
	raw, err := os.ReadFile(dir + "/components.yaml")
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	comps, _ := doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	if len(schemas) == 0 {
		return nil, fmt.Errorf("no components.schemas")
	}
	names := map[string]bool{}
	for name, s := range schemas {
		names[name] = true
		schemas[name] = uniqueRequired(fromNullable(s))
	}
	if err := applyErrata(schemas); err != nil {
		return nil, err
	}
	stubs, err := readStubs(dir + "/not-extracted.txt")
	if err != nil {
		return nil, err
	}
	for _, name := range stubs {
		if names[name] {
			return nil, fmt.Errorf("%s is both extracted and listed as not extracted", name)
		}
		schemas[name] = false
	}
	// Every $ref resolves inside the fixture.
	var missing []string
	walkRefs(schemas, func(ref string) {
		name, ok := strings.CutPrefix(ref, "#/components/schemas/")
		if !ok {
			missing = append(missing, ref)
			return
		}
		if _, ok := schemas[name]; !ok {
			missing = append(missing, name)
		}
	})
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("unresolved $refs (extract them or list them in not-extracted.txt): %s", strings.Join(dedupe(missing), ", "))
	}
	// Through JSON, so numbers are what the validator expects.
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	jdoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(specURL, jdoc); err != nil {
		return nil, err
	}
	return &openaiSpec{compiler: c, names: names, compiled: map[string]*jsonschema.Schema{}}, nil
}

func readStubs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}

// fromNullable rewrites OpenAPI 3.0's `nullable: true` in the 2020-12 form.
func fromNullable(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			t[k] = fromNullable(c)
		}
		n, ok := t["nullable"].(bool)
		if !ok {
			return t
		}
		delete(t, "nullable")
		if !n {
			return t
		}
		if typ, ok := t["type"].(string); ok {
			t["type"] = []any{typ, "null"}
			if enum, ok := t["enum"].([]any); ok {
				t["enum"] = append(enum, nil)
			}
			return t
		}
		return map[string]any{"anyOf": []any{t, map[string]any{"type": "null"}}}
	case []any:
		for i, c := range t {
			t[i] = fromNullable(c)
		}
	}
	return v
}

// uniqueRequired drops repeated names from `required` lists: the published
// ContainerResource lists id, name, created_at and status twice, which
// 2020-12's metaschema rejects (the items must be unique) and which means
// the same as listing each once.
func uniqueRequired(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			t[k] = uniqueRequired(c)
		}
		if req, ok := t["required"].([]any); ok {
			seen := map[any]bool{}
			out := req[:0:0]
			for _, r := range req {
				if !seen[r] {
					seen[r] = true
					out = append(out, r)
				}
			}
			t["required"] = out
		}
	case []any:
		for i, c := range t {
			t[i] = uniqueRequired(c)
		}
	}
	return v
}

// An erratum corrects a published component that contradicts the API it
// describes, with the evidence. Each checks that the published text is
// still as quoted and fails loading otherwise, so a refreshed document
// that fixes the defect fails until the erratum is removed.
type erratum struct {
	component, why string
	fix            func(c map[string]any) error
}

var errata = []erratum{
	{"UsageTimeBucket",
		"the published bucket holds `result`; the API sends `results` (every usage and costs example in OpenAI's API reference, and the reference's own field list `data: Array[Data{ end_time, object, results, start_time}]`)",
		func(c map[string]any) error {
			if err := renameProperty(c, "result", "results"); err != nil {
				return err
			}
			return renameRequired(c, "result", "results")
		}},
	{"UsageCodeInterpreterSessionsResult",
		"`required` names `sessions`, a property the component does not define; its property, and its own example, are `num_sessions`",
		func(c map[string]any) error { return renameRequired(c, "sessions", "num_sessions") }},
	{"UsageResponse",
		"`next_page` is a required string, but the last page has no next page: the API sends null (async-openai's hand-written UsageResponse reads it as Option<String>)",
		func(c map[string]any) error {
			props, _ := c["properties"].(map[string]any)
			np, _ := props["next_page"].(map[string]any)
			if np == nil || np["type"] != "string" {
				return fmt.Errorf("next_page is no longer a plain string")
			}
			np["type"] = []any{"string", "null"}
			return nil
		}},
}

func applyErrata(schemas map[string]any) error {
	for _, e := range errata {
		c, ok := schemas[e.component].(map[string]any)
		if !ok {
			return fmt.Errorf("erratum for %s: component not extracted", e.component)
		}
		if err := e.fix(c); err != nil {
			return fmt.Errorf("erratum for %s no longer applies (%v): remove it if the document fixed %s", e.component, err, e.why)
		}
	}
	return nil
}

func renameProperty(c map[string]any, from, to string) error {
	props, _ := c["properties"].(map[string]any)
	p, ok := props[from]
	if !ok {
		return fmt.Errorf("no property %q", from)
	}
	if _, dup := props[to]; dup {
		return fmt.Errorf("property %q already there", to)
	}
	delete(props, from)
	props[to] = p
	return nil
}

func renameRequired(c map[string]any, from, to string) error {
	req, _ := c["required"].([]any)
	for i, r := range req {
		if r == from {
			req[i] = to
			return nil
		}
	}
	return fmt.Errorf("%q is not required", from)
}

func walkRefs(v any, f func(string)) {
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			if s, ok := c.(string); ok && k == "$ref" {
				f(s)
				continue
			}
			walkRefs(c, f)
		}
	case []any:
		for _, c := range t {
			walkRefs(c, f)
		}
	}
}

func dedupe(s []string) []string {
	var out []string
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

func (s *openaiSpec) schema(component string) (*jsonschema.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.compiled[component]; ok {
		return sch, nil
	}
	if !s.names[component] {
		return nil, fmt.Errorf("component %s is not in the fixture", component)
	}
	sch, err := s.compiler.Compile(specURL + "#/components/schemas/" + component)
	if err != nil {
		return nil, err
	}
	s.compiled[component] = sch
	return sch, nil
}

// validate checks a JSON body against a component schema.
func (s *openaiSpec) validate(component string, body []byte) error {
	sch, err := s.schema(component)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(inst)
}

// mustValidate fails the test when body does not match the component.
func (s *openaiSpec) mustValidate(t testing.TB, component string, body []byte) {
	t.Helper()
	if err := s.validate(component, body); err != nil {
		t.Errorf("%s does not validate: %v\nbody: %s", component, err, clip(body))
	}
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}
