// Package cli holds the client side of aiforge's commands: an admin API
// client and its table printing.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client calls the admin API.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
}

// APIError is an error answer of the API, in OpenAI's shape.
type APIError struct {
	Status  int
	Code    string
	Message string
	Param   string
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("HTTP %d", e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Param != "" {
		msg += " (param " + e.Param + ")"
	}
	return msg + ": " + e.Message
}

// Do sends a JSON request and decodes a JSON answer into out (if not nil).
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	return c.DoHeader(ctx, method, path, nil, in, out)
}

// DoHeader is Do with extra request headers.
func (c *Client) DoHeader(ctx context.Context, method, path string, hdr http.Header, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach aiforge at %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return parseAPIError(resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
	}
	return nil
}

// Stream copies the body of a successful answer to w as it arrives.
func (c *Client) Stream(ctx context.Context, method, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, nil)
	if err != nil {
		return err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach aiforge at %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return parseAPIError(resp.StatusCode, data)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}
