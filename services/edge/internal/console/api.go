package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The console is a client of the edge's own admin and report APIs, called
// in process: what it shows and what it changes goes through the same
// handlers (validation, directory notes, budgets, status views) as
// `aiforge` and curl, so the console can do nothing the admin API cannot.

// recorder is a minimal http.ResponseWriter that keeps the answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	// The admin answers are small; a runaway one is cut, not buffered.
	if r.body.Len()+len(b) > maxAPIAnswer {
		return 0, errAnswerTooLarge
	}
	return r.body.Write(b)
}

// maxAPIAnswer bounds one in-process answer.
const maxAPIAnswer = 32 << 20

var errAnswerTooLarge = fmt.Errorf("answer larger than %d bytes", maxAPIAnswer)

// apiError is an API answer other than 2xx, with OpenAI's error message.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// call sends one admin-authenticated request to the API and decodes a 2xx
// JSON answer into out.
func (s *Service) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader = http.NoBody
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.d.AdminKey)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}}
	s.d.API.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status < 200 || rec.status > 299 {
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := strings.TrimSpace(rec.body.String())
		if json.Unmarshal(rec.body.Bytes(), &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return &apiError{Status: rec.status, Message: msg}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// list calls a GET that answers {"data": [...]}.
func list[T any](ctx context.Context, s *Service, path string) ([]T, error) {
	var page struct {
		Data []T `json:"data"`
	}
	err := s.call(ctx, http.MethodGet, path, nil, &page)
	return page.Data, err
}
