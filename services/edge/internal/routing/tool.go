package routing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/tokens"
)

// ToolCall is a request routed to a tool class.
type ToolCall struct {
	Decision  Decision
	Tenant    string
	KeyID     string
	RequestID string
	Body      []byte
	Stream    bool
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
	Start        time.Time
}

// ServeTool answers c with its class's tool: the chat request is POSTed to
// the tool's URL, which answers {"content": "..."} or a whole chat
// completion, within ToolTimeout and ToolMaxBody; the client gets a chat
// completion, streamed when it asked, and a usage event (the router as the
// model, estimated tokens) is published. A failing tool is a 502
// (tool_failed, tool_timeout). It returns the error it answered with.
func (s *Service) ServeTool(w http.ResponseWriter, r *http.Request, c ToolCall) *contracts.Error {
	comp, apiErr := s.callTool(r.Context(), c)
	if apiErr != nil {
		contracts.Write(w, apiErr)
		return apiErr
	}
	prompt := tokens.EstimatePrompt(events.EndpointChatCompletions, c.Body)
	completion := int64((len(comp.Content) + 3) / 4)
	comp.Usage = &Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	Write(w, comp, c.Stream, c.IncludeUsage)
	v1 := events.UsageRecordedV1{
		RequestID: c.RequestID, Tenant: c.Tenant, KeyID: c.KeyID, Model: c.Decision.Router, Endpoint: events.EndpointChatCompletions,
		Stream: c.Stream, PromptTokens: prompt, CompletionTokens: completion, Estimated: true, Status: events.UsageStatusOK,
		LatencyMS: float64(time.Since(c.Start).Microseconds()) / 1000, Reporter: s.d.InstanceID,
		StartedAt: c.Start.UTC(), FinishedAt: time.Now().UTC(),
	}
	ev := events.UsageRecordedV4{UsageRecordedV3: events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: v1}},
		Router: c.Decision.Router, RouteClass: c.Decision.Class}
	PublishUsage(s.d.JS, s.d.Logger, ev, s.d.InstanceID)
	return nil
}

func (s *Service) callTool(ctx context.Context, c ToolCall) (Completion, *contracts.Error) {
	class := c.Decision.Class
	ctx, cancel := context.WithTimeout(ctx, s.d.ToolTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Decision.Tool.URL, bytes.NewReader(c.Body))
	if err != nil {
		return Completion{}, contracts.ErrTool(contracts.CodeToolFailed, class, "its URL is not valid")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := s.d.HTTP.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Completion{}, contracts.ErrTool(contracts.CodeToolTimeout, class, fmt.Sprintf("no answer within %s", s.d.ToolTimeout))
		}
		s.d.Logger.Warn("route tool unreachable", "router", c.Decision.Router, "class", class, "err", err)
		return Completion{}, contracts.ErrTool(contracts.CodeToolFailed, class, "it could not be reached")
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.d.ToolMaxBody+1))
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return Completion{}, contracts.ErrTool(contracts.CodeToolTimeout, class, fmt.Sprintf("no answer within %s", s.d.ToolTimeout))
	case err != nil:
		return Completion{}, contracts.ErrTool(contracts.CodeToolFailed, class, "its answer could not be read")
	case int64(len(body)) > s.d.ToolMaxBody:
		return Completion{}, contracts.ErrTool(contracts.CodeToolFailed, class, fmt.Sprintf("its answer is larger than %d bytes", s.d.ToolMaxBody))
	case resp.StatusCode != http.StatusOK:
		return Completion{}, contracts.ErrTool(contracts.CodeToolFailed, class, fmt.Sprintf("it answered HTTP %d", resp.StatusCode))
	}
	if comp, ok := ParseCompletion(body); ok {
		if comp.ID == "" {
			comp.ID = "chatcmpl-" + c.RequestID
		}
		if comp.Created == 0 {
			comp.Created = c.Start.Unix()
		}
		comp.Model = c.Decision.Router
		return comp, nil
	}
	var plain struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(body, &plain) != nil || plain.Content == nil {
		return Completion{}, contracts.ErrTool(contracts.CodeToolFailed, class, `its answer is neither {"content": "..."} nor a chat completion`)
	}
	return Completion{ID: "chatcmpl-" + c.RequestID, Created: c.Start.Unix(), Model: c.Decision.Router, Role: "assistant",
		Content: *plain.Content, FinishReason: "stop"}, nil
}

// usagePublishWithin bounds the retries of a usage event the edge
// publishes: longer than a JetStream leader election.
const usagePublishWithin = 30 * time.Second

// PublishUsage publishes a usage event the edge itself records (a tool's
// answer, a cache hit) under its request id, retried in the background
// through a stream's leader election (events.PublishRetry).
func PublishUsage(js jetstream.JetStream, log *slog.Logger, ev events.UsageRecordedV4, source string) {
	if js == nil {
		return
	}
	env := events.Envelope{ID: ev.RequestID, Source: source, Tenant: ev.Tenant}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), usagePublishWithin)
		defer cancel()
		if _, attempts, err := events.PublishRetry(ctx, js, ev, env); err != nil {
			log.Error("could not record usage", "request_id", ev.RequestID, "attempts", attempts, "err", err)
		}
	}()
}
