package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/registry"
)

func TestParseClassTarget(t *testing.T) {
	for _, tc := range []struct {
		spec, name, model, tool, err string
	}{
		{spec: "code=model:qwen2.5:7b", name: "code", model: "qwen2.5:7b"},
		{spec: "ops=tool:https://tools.local:9000/answer", name: "ops", tool: "https://tools.local:9000/answer"},
		{spec: "ops", err: "NAME=model:MODEL"},
		{spec: "=model:x", err: "NAME=model:MODEL"},
		{spec: "ops=model:", err: "NAME=model:MODEL"},
		{spec: "ops=http://x", err: `not "http:"`},
	} {
		name, model, tool, err := cli.ParseClassTarget(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		gotTool := ""
		if tool != nil {
			gotTool = tool.URL
		}
		if err != nil || name != tc.name || model != tc.model || gotTool != tc.tool {
			t.Errorf("%q: %q %q %q %v", tc.spec, name, model, gotTool, err)
		}
	}
}

func TestRouterEditsApply(t *testing.T) {
	base, err := cli.ParseRouterFile([]byte(`{"name":"auto","default":"a","threshold":0.2,
		"classes":[{"name":"a","model":"m1","examples":["one","two"]},{"name":"b","tool":{"url":"http://t/x"},"examples":["three"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	def, th := "b", 0.4
	r, err := cli.RouterEdits{
		Classes:  []string{"b=model:m2", "c=tool:http://t/c"},
		Examples: []string{"b=four| five ||", "b=six", "c=seven"},
		Default:  &def, Threshold: &th,
	}.Apply("auto", base)
	if err != nil {
		t.Fatal(err)
	}
	want := registry.Router{Name: "auto", Default: "b", Threshold: 0.4, Classes: []registry.RouteClass{
		{Name: "a", Model: "m1", Examples: []string{"one", "two"}},
		{Name: "b", Model: "m2", Examples: []string{"four", "five", "six"}},
		{Name: "c", Tool: &registry.Tool{URL: "http://t/c"}, Examples: []string{"seven"}},
	}}
	if err := registry.ValidateRouter(r); err != nil {
		t.Fatal(err)
	}
	if got, w := routerString(r), routerString(want); got != w {
		t.Fatalf("got  %s\nwant %s", got, w)
	}
	// The base is not changed.
	if base.Classes[1].Model != "" || len(base.Classes[1].Examples) != 1 || len(base.Classes) != 2 {
		t.Fatalf("base changed: %+v", base)
	}
	if _, err := (cli.RouterEdits{}).Apply("other", base); err == nil {
		t.Fatal("a file naming another router was accepted")
	}
	if _, err := (cli.RouterEdits{Examples: []string{"z=hi"}}).Apply("auto", base); err == nil || !strings.Contains(err.Error(), `no class "z"`) {
		t.Fatalf("examples of an unknown class: %v", err)
	}
	if _, err := (cli.RouterEdits{Examples: []string{"a=|  |"}}).Apply("auto", base); err == nil || !strings.Contains(err.Error(), "no utterance") {
		t.Fatalf("empty examples: %v", err)
	}
	if _, err := cli.ParseRouterFile([]byte(`{"name":"auto","clases":[]}`)); err == nil {
		t.Fatal("an unknown field was accepted")
	}
}

func routerString(r registry.Router) string {
	b, _ := json.Marshal(r)
	return string(b)
}
