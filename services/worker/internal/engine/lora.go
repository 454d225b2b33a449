package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/registry"
)

// LoRA is the runtime LoRA API of one engine (vLLM's
// /v1/load_lora_adapter and /v1/unload_lora_adapter; a loaded adapter is
// listed by /v1/models with the path it was loaded from as its root).
type LoRA struct {
	HTTPClient *http.Client
	Engine     registry.Engine
}

// listed reports whether the engine lists name, and from which path.
func (l LoRA) listed(ctx context.Context, name string) (listed bool, root string, err error) {
	body, status, err := l.call(ctx, http.MethodGet, "/models", nil)
	if err != nil {
		return false, "", err
	}
	if status != http.StatusOK {
		return false, "", fmt.Errorf("GET %s/models answered %d", RedactURL(l.Engine.BaseURL), status)
	}
	var list struct {
		Data []struct {
			ID   string `json:"id"`
			Root string `json:"root"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return false, "", fmt.Errorf("GET %s/models did not answer an OpenAI model list: %w", RedactURL(l.Engine.BaseURL), err)
	}
	for _, m := range list.Data {
		if m.ID == name {
			return true, m.Root, nil
		}
	}
	return false, "", nil
}

// Ensure makes the engine serve adapter name from dir: nothing to do
// when it already does; an adapter of that name loaded from elsewhere (an
// older version) is unloaded first.
func (l LoRA) Ensure(ctx context.Context, name, dir string) error {
	listed, root, err := l.listed(ctx, name)
	if err != nil {
		return err
	}
	if listed && root == dir {
		return nil
	}
	if listed {
		if err := l.Unload(ctx, name); err != nil {
			return err
		}
	}
	req, _ := json.Marshal(map[string]string{"lora_name": name, "lora_path": dir})
	body, status, err := l.call(ctx, http.MethodPost, "/load_lora_adapter", req)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("engine at %s refused to load adapter %q (status %d): %s", RedactURL(l.Engine.BaseURL), name, status, engineMessage(body))
	}
	return nil
}

// Unload asks the engine to unload name.
func (l LoRA) Unload(ctx context.Context, name string) error {
	req, _ := json.Marshal(map[string]string{"lora_name": name})
	body, status, err := l.call(ctx, http.MethodPost, "/unload_lora_adapter", req)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("engine at %s refused to unload adapter %q (status %d): %s", RedactURL(l.Engine.BaseURL), name, status, engineMessage(body))
	}
	return nil
}

// call makes one request to the engine and returns its answer (at
// most 8 MiB). Errors name the engine by its redacted URL, never its key.
func (l LoRA) call(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	u := strings.TrimRight(l.Engine.BaseURL, "/") + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, 0, fmt.Errorf("engine request: %w", UnwrapURLError(err))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if l.Engine.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+l.Engine.APIKey)
	}
	resp, err := l.HTTPClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, RedactURL(u), UnwrapURLError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: reading the answer: %w", method, RedactURL(u), err)
	}
	return b, resp.StatusCode, nil
}

// engineMessage is the message of an OpenAI-shaped error body, or the
// body's start.
func engineMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil {
		if e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Message != "" {
			return e.Message
		}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}
