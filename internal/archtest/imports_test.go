// Package archtest checks the workspace's dependency rules: pkg/ never
// imports a service, and services never import each other, so services
// meet only on the bus.
package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const root = "github.com/aiforge/aiforge/"

// service returns the service a package belongs to ("edge" for
// .../services/edge/internal/inference), or "".
func service(path string) string {
	rest, ok := strings.CutPrefix(path, root+"services/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

func TestDependencyRules(t *testing.T) {
	dirs, err := exec.Command("go", "list", "-f", "{{.Dir}}", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	var patterns []string
	for _, d := range strings.Fields(string(dirs)) {
		patterns = append(patterns, filepath.Join(d, "..."))
	}
	args := append([]string{"list", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`}, patterns...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		pkg, imports := f[0], f[1:]
		inPkg := strings.HasPrefix(pkg, root+"pkg/")
		own := service(pkg)
		if inPkg {
			checked["pkg"] = true
		}
		if own != "" {
			checked[own] = true
		}
		for _, imp := range imports {
			other := service(imp)
			switch {
			case other == "":
			case inPkg:
				t.Errorf("%s imports the service package %s: pkg/ never imports services", pkg, imp)
			case own != "" && other != own:
				t.Errorf("%s imports %s: services never import each other (they meet on the bus; share types through pkg/)", pkg, imp)
			}
		}
	}
	// The check is only worth something if it saw the packages it guards.
	for _, want := range []string{"pkg", "edge", "worker", "usage", "ingest", "embedder", "retriever", "guardian"} {
		if !checked[want] {
			t.Errorf("no package of %s was listed; the rule was not checked there", want)
		}
	}
}
