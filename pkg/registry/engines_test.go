package registry_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sealed"
)

func twoEngines(name string) registry.Model {
	m := validModel(name)
	m.Engines = []registry.Engine{{ID: "b", BaseURL: "http://127.0.0.1:9/v1", Model: "up-b", Weight: 2}}
	return m
}

func TestEveryEngineKeyIsSealedRedactedAndOpened(t *testing.T) {
	priv, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	m := twoEngines("chat")
	m.Engine.APIKey = engineKey
	m.Engines[0].APIKey = engineKey + "-b"
	orig := m.Engines
	if err := m.SealEngineKey(priv.Public()); err != nil {
		t.Fatal(err)
	}
	if orig[0].APIKey != engineKey+"-b" {
		t.Fatal("SealEngineKey changed the caller's engines slice in place")
	}
	for i, e := range m.AllEngines() {
		if e.APIKey != "" || e.APIKeySealed == "" {
			t.Fatalf("engine %d not sealed: %+v", i, e)
		}
	}
	if m.HasClearEngineKey() {
		t.Fatal("HasClearEngineKey after sealing")
	}
	r := m.Redacted()
	for i, e := range r.AllEngines() {
		if e.APIKey != "redacted" || e.APIKeySealed != "" {
			t.Fatalf("Redacted engine %d = %+v", i, e)
		}
	}
	if m.Engines[0].APIKeySealed == "" {
		t.Fatal("Redacted changed the model's own engines")
	}
	o, err := m.OpenEngineKey(priv)
	if err != nil || o.Engine.APIKey != engineKey || o.Engines[0].APIKey != engineKey+"-b" {
		t.Fatalf("OpenEngineKey = %+v, %v", o.AllEngines(), err)
	}
	// A sealed key is bound to its own engine's BaseURL.
	moved := m
	moved.Engines = []registry.Engine{m.Engines[0]}
	moved.Engines[0].BaseURL = "http://elsewhere:1/v1"
	if _, err := moved.OpenEngineKey(priv); err == nil || strings.Contains(err.Error(), engineKey) {
		t.Fatalf("a key moved to another base url opened: %v", err)
	}
	// Swapping the sealed keys of two engines breaks both.
	swapped := m
	swapped.Engines = []registry.Engine{m.Engines[0]}
	swapped.Engine.APIKeySealed, swapped.Engines[0].APIKeySealed = m.Engines[0].APIKeySealed, m.Engine.APIKeySealed
	if _, err := swapped.OpenEngineKey(priv); err == nil {
		t.Fatal("swapped engine keys opened")
	}
}

func TestValidateRoutingFields(t *testing.T) {
	ok := twoEngines("chat")
	ok.Fallbacks = []string{"chat-b", "gpt-4o-mini@openai"}
	ok.ContextWindow = 4096
	ok.Routing = registry.RoutingLatency
	ok.Engines[0].Kind = registry.EngineProvider
	ok.Engines[0].RPM, ok.Engines[0].TPM = 60, 10000
	if err := registry.ValidateModel(ok); err != nil {
		t.Fatalf("valid model: %v", err)
	}
	for name, mut := range map[string]func(*registry.Model){
		"engine without id":   func(m *registry.Model) { m.Engines[0].ID = "" },
		"duplicate engine id": func(m *registry.Model) { m.Engine.ID = "b" },
		"engine without url":  func(m *registry.Model) { m.Engines[0].BaseURL = "" },
		"engine without name": func(m *registry.Model) { m.Engines[0].Model = "" },
		"negative weight":     func(m *registry.Model) { m.Engines[0].Weight = -1 },
		"negative rpm":        func(m *registry.Model) { m.Engine.RPM = -1 },
		"unknown kind":        func(m *registry.Model) { m.Engine.Kind = "magic" },
		"unknown routing":     func(m *registry.Model) { m.Routing = "random" },
		"self fallback":       func(m *registry.Model) { m.Fallbacks = []string{"chat"} },
		"duplicate fallback":  func(m *registry.Model) { m.Fallbacks = []string{"x", "x"} },
		"empty fallback":      func(m *registry.Model) { m.Fallbacks = []string{""} },
		"negative context":    func(m *registry.Model) { m.ContextWindow = -1 },
	} {
		m := twoEngines("chat")
		m.Engines = append([]registry.Engine(nil), m.Engines...)
		mut(&m)
		if err := registry.ValidateModel(m); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%s: ValidateModel = %v, want ErrInvalid", name, err)
		}
	}
}

func TestStoredMultiEngineModelRoundTrips(t *testing.T) {
	s, _ := open(t)
	m := twoEngines("chat")
	m.Fallbacks = []string{"other"}
	m.ContextWindow = 2048
	if err := s.PutModel(testCtx(t), m); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetModel(testCtx(t), "chat")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Engines) != 1 || got.Engines[0].ID != "b" || got.Engines[0].Weight != 2 || got.ContextWindow != 2048 || got.Fallbacks[0] != "other" {
		t.Fatalf("stored model = %+v", got)
	}
	m.Engines[0].APIKey = "clear"
	if err := s.PutModel(testCtx(t), m); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("PutModel with a clear key on a further engine = %v", err)
	}
}
