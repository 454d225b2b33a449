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
		schemas[name] = fromNullable(s)
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
