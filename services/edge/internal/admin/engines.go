package admin

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/registry"
)

// processKinds are the engines a worker can supervise.
var processKinds = []string{registry.ProcessLlamaServer, registry.ProcessOllama, registry.ProcessColi}

// prepareEngines checks what registry.ValidateModel leaves to the admin
// API on each engine of m, its worker class and supervised process, and
// gives a supervised engine with a fixed port and no base_url the one it
// will listen on.
func prepareEngines(m *registry.Model) *contracts.Error {
	if e := prepareEngine("engine", &m.Engine); e != nil {
		return e
	}
	for i := range m.Engines {
		if e := prepareEngine(fmt.Sprintf("engines[%d]", i), &m.Engines[i]); e != nil {
			return e
		}
	}
	return nil
}

func prepareEngine(where string, e *registry.Engine) *contracts.Error {
	bad := func(field, msg string) *contracts.Error {
		return contracts.ErrBadRequest(where+"."+field, contracts.CodeInvalidRequest, where+"."+field+" "+msg)
	}
	if e.Class != "" && !nameRE.MatchString(e.Class) {
		return bad("class", "must be 1-63 characters of A-Z, a-z, 0-9, '-' and '_' (a batch flavor's name)")
	}
	p := e.Process
	if p == nil {
		return nil
	}
	known := false
	for _, k := range processKinds {
		known = known || p.Kind == k
	}
	if !known {
		return bad("process.kind", fmt.Sprintf("%q is not one of %s", p.Kind, strings.Join(processKinds, ", ")))
	}
	if p.ModelPath == "" && p.Kind != registry.ProcessOllama {
		return bad("process.model_path", "is required for "+p.Kind+" (the GGUF file)")
	}
	if p.Port < 0 || p.Port > 65535 {
		return bad("process.port", "must be a TCP port (0: a free one)")
	}
	if p.ContextSize < 0 || p.Slots < 0 {
		return bad("process.context_size", "and slots must not be negative")
	}
	if p.IdleStop < 0 {
		return bad("process.idle_stop", "must not be negative (0: never scale to zero)")
	}
	switch mp := p.MoEPlacement; mp {
	case "", "auto", "cpu":
	default:
		if n, err := strconv.Atoi(mp); err != nil || n < 0 {
			return bad("process.moe_placement", fmt.Sprintf("%q is not auto, cpu or a number of layers whose experts stay on the CPU", mp))
		}
	}
	for k := range p.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return bad("process.env", fmt.Sprintf("has an invalid variable name %q", k))
		}
	}
	if e.BaseURL == "" && p.Port > 0 {
		e.BaseURL = fmt.Sprintf("http://127.0.0.1:%d/v1", p.Port)
	}
	return nil
}
