package supervisor

import (
	"testing"

	"github.com/aiforge/aiforge/pkg/registry"
)

// Bindings decoded twice hold different process pointers: equal by value,
// they are the same binding.
func TestSameEngines(t *testing.T) {
	mk := func(args ...string) []registry.Engine {
		return []registry.Engine{{Model: "m", Process: &registry.EngineProcess{Kind: registry.ProcessOllama, ModelPath: "/m", Args: args}}}
	}
	if !sameEngines(mk("a"), mk("a")) {
		t.Fatal("equal bindings differ")
	}
	if sameEngines(mk("a"), mk("b")) {
		t.Fatal("different process args are the same binding")
	}
	if sameEngines(mk(), []registry.Engine{{Model: "m"}}) {
		t.Fatal("a binding with a process is the same as one without")
	}
}
