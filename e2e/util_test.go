package e2e

import (
	"encoding/json"
	"github.com/aiforge/aiforge/pkg/registry"
	"io"
	"strings"
)

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }

func registryEngine(baseURL, model string) registry.Engine {
	return registry.Engine{BaseURL: baseURL, Model: model}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
