package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

// TestResponsesWithFileSearch: /v1/responses with the file_search tool,
// plain and streamed, through the official SDK: the search call with its
// results, the answer, and file_citation annotations.
func TestResponsesWithFileSearch(t *testing.T) {
	// The answer ends by itself after 12 tokens, under max_output_tokens:
	// a finished answer, "completed".
	engine, base := sim(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 12})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	vs, fileID, _ := storeFile(t, client, "guide.md", "text/markdown", []byte(guide), openai.VectorStoreNewParams{}, 20*time.Second)

	params := responses.ResponseNewParams{
		Model:           "chat",
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("How do I connect my phone?")},
		MaxOutputTokens: openai.Int(32),
		Tools:           []responses.ToolUnionParam{{OfFileSearch: &responses.FileSearchToolParam{VectorStoreIDs: []string{vs.ID}}}},
		Include:         []responses.ResponseIncludable{responses.ResponseIncludableFileSearchCallResults},
	}
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != responses.ResponseStatusCompleted || resp.IncompleteDetails.Reason != "" || len(resp.Output) != 2 {
		t.Fatalf("response = %s", resp.RawJSON())
	}
	call := resp.Output[0].AsFileSearchCall()
	if call.Status != "completed" || len(call.Results) == 0 || !strings.Contains(call.Results[0].Text, "wireless") {
		t.Fatalf("file search call = %s", resp.Output[0].RawJSON())
	}
	msg := resp.Output[1].AsMessage()
	if msg.Status != responses.ResponseOutputMessageStatusCompleted {
		t.Fatalf("message = %s", msg.RawJSON())
	}
	text := msg.Content[0].Text
	if text == "" || resp.OutputText() != text || resp.Usage.OutputTokens != 12 {
		t.Fatalf("answer %q, usage %+v", text, resp.Usage)
	}
	ann := msg.Content[0].Annotations
	if len(ann) != 1 || ann[0].Type != "file_citation" || ann[0].FileID != fileID || ann[0].Filename != "guide.md" {
		t.Fatalf("annotations = %s", msg.RawJSON())
	}
	// The engine got the retrieved text as a numbered source.
	if body := string(engine.LastBody()); !strings.Contains(body, "[1] guide.md") || !strings.Contains(body, "wireless settings") {
		t.Fatalf("prompt sent to the engine: %s", body)
	}

	stream := client.Responses.NewStreaming(ctx, params)
	var deltas strings.Builder
	var completed *responses.Response
	kinds := map[string]bool{}
	for stream.Next() {
		ev := stream.Current()
		kinds[ev.Type] = true
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed":
			r := ev.Response
			completed = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"response.created", "response.file_search_call.completed", "response.output_text.delta", "response.output_text.done", "response.completed"} {
		if !kinds[k] {
			t.Fatalf("no %s event (got %v)", k, kinds)
		}
	}
	if completed == nil || completed.OutputText() != deltas.String() || deltas.String() != text || completed.Usage.OutputTokens != 12 {
		t.Fatalf("streamed %q, completed %+v", deltas.String(), completed)
	}
}
