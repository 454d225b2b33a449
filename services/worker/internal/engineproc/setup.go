package engineproc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aiforge/aiforge/pkg/registry"
)

// setup prepares a started engine to serve: Ollama creates the model
// (once per supervisor: its models directory keeps it across restarts) and
// loads it, so that a start (a wake from zero among them) is over when the
// weights are in memory, not at the first request.
func (s *Supervisor) setup(ctx context.Context, c Command, p *process) error {
	if c.Kind != registry.ProcessOllama {
		return nil
	}
	s.mu.Lock()
	done := s.created
	s.mu.Unlock()
	if !done {
		if err := s.createOllamaModel(ctx, c, p); err != nil {
			return err
		}
	}
	return s.loadOllamaModel(ctx, c, p)
}

// loadOllamaModel asks Ollama to load the model (a generate request without
// a prompt loads it and answers at once).
func (s *Supervisor) loadOllamaModel(ctx context.Context, c Command, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SetupTimeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"model": s.cfg.Spec.Upstream, "keep_alive": -1})
	u := strings.TrimSuffix(c.Health, "/api/version") + "/api/generate"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	type result struct {
		status int
		msg    []byte
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := s.http.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		done <- result{status: resp.StatusCode, msg: msg}
	}()
	var r result
	select {
	case r = <-done:
	case <-p.exited:
		cancel()
		<-done
		return s.exitError(p, "while loading the model")
	}
	switch {
	case r.err != nil:
		return fmt.Errorf("ollama load %s: %w", s.cfg.Spec.Upstream, r.err)
	case r.status != http.StatusOK:
		return fmt.Errorf("ollama load %s: status %d: %s", s.cfg.Spec.Upstream, r.status, bytes.TrimSpace(r.msg))
	}
	return nil
}

// createOllamaModel runs `ollama create` for the model.
func (s *Supervisor) createOllamaModel(ctx context.Context, c Command, p *process) error {
	spec := s.cfg.Spec
	modelfile, dir, err := ollamaModelfile(spec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SetupTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Path, "create", spec.Upstream, "-f", modelfile)
	cmd.Dir = dir
	cmd.Env = c.Env
	out := &tail{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = s.cfg.StopGrace
	errc := make(chan error, 1)
	go func() { errc <- cmd.Run() }()
	select {
	case err = <-errc:
	case <-p.exited:
		cancel()
		<-errc
		return s.exitError(p, "while creating the model")
	}
	if err != nil {
		return fmt.Errorf("ollama create %s: %w%s", spec.Upstream, err, out.suffix())
	}
	s.mu.Lock()
	s.created = true
	s.mu.Unlock()
	s.log.Info("ollama model created", "model", spec.Upstream)
	return nil
}

// ollamaModelfile returns the Modelfile to create the model from, and the
// directory to run `ollama create` in: ModelPath itself when it is a
// Modelfile, else one written beside the engine's files with FROM the
// GGUF (and its context size).
func ollamaModelfile(spec Spec) (string, string, error) {
	path := spec.Process.ModelPath
	f, err := os.Open(path)
	if err != nil {
		return "", "", fmt.Errorf("engine model: %w", err)
	}
	magic := make([]byte, 4)
	_, rerr := io.ReadFull(f, magic)
	_ = f.Close()
	if rerr == nil && !bytes.Equal(magic, []byte("GGUF")) {
		abs, err := filepath.Abs(path)
		if err != nil {
			return "", "", err
		}
		return abs, filepath.Dir(abs), nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", "", err
	}
	if strings.ContainsAny(abs, "\n\r") {
		return "", "", fmt.Errorf("engine model path %q has a line break", path)
	}
	var b strings.Builder
	b.WriteString("FROM " + abs + "\n")
	if n := spec.Process.ContextSize; n > 0 {
		b.WriteString("PARAMETER num_ctx " + strconv.Itoa(n) + "\n")
	}
	mf := filepath.Join(spec.Dir, "Modelfile")
	if err := os.WriteFile(mf, []byte(b.String()), 0o600); err != nil {
		return "", "", fmt.Errorf("engine Modelfile: %w", err)
	}
	return mf, spec.Dir, nil
}
