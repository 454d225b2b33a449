package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

// TestOpenAISDK runs the official OpenAI Go SDK, unchanged, against
// aiforge up.
func TestOpenAISDK(t *testing.T) {
	engine, base := sim(t, enginesim.Config{Models: []string{"upstream-chat"}, EmbeddingDims: 16})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	s.register("chat-small", base, "upstream-chat")
	s.waitServed(key, "chat-small")

	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 || page.Data[0].ID != "chat-small" {
			t.Fatalf("models = %+v", page.Data)
		}
		m, err := client.Models.Get(ctx, "chat-small")
		if err != nil || m.ID != "chat-small" {
			t.Fatalf("get model: %v %+v", err, m)
		}
	})

	t.Run("chat", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "chat-small",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")},
			MaxTokens: openai.Int(5),
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Model != "chat-small" || len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" {
			t.Fatalf("unexpected response: %+v", resp)
		}
		if resp.Usage.CompletionTokens != 5 || resp.Usage.PromptTokens == 0 {
			t.Fatalf("usage = %+v", resp.Usage)
		}
	})

	streamChat := func(t *testing.T, includeUsage bool) (string, []openai.ChatCompletionChunk) {
		params := openai.ChatCompletionNewParams{
			Model:     "chat-small",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me a story")},
			MaxTokens: openai.Int(8),
		}
		if includeUsage {
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var text strings.Builder
		var chunks []openai.ChatCompletionChunk
		for stream.Next() {
			c := stream.Current()
			chunks = append(chunks, c)
			for _, ch := range c.Choices {
				text.WriteString(ch.Delta.Content)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		return text.String(), chunks
	}

	t.Run("chat streamed with include_usage", func(t *testing.T) {
		text, chunks := streamChat(t, true)
		if text == "" {
			t.Fatal("no text streamed")
		}
		last := chunks[len(chunks)-1]
		if len(last.Choices) != 0 || last.Usage.CompletionTokens != 8 {
			t.Fatalf("last chunk should carry usage with no choices: %+v", last)
		}
		for _, c := range chunks[:len(chunks)-1] {
			if c.Usage.TotalTokens != 0 {
				t.Fatalf("usage before the final chunk: %+v", c)
			}
		}
	})

	t.Run("chat streamed without include_usage", func(t *testing.T) {
		text, chunks := streamChat(t, false)
		if text == "" {
			t.Fatal("no text streamed")
		}
		for _, c := range chunks {
			if len(c.Choices) == 0 || c.JSON.Usage.Valid() && c.Usage.TotalTokens != 0 {
				t.Fatalf("a usage chunk arrived though the client did not ask: %s", c.RawJSON())
			}
		}
		// Same prompt, same engine: the streamed text equals the plain answer.
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "chat-small",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me a story")},
			MaxTokens: openai.Int(8),
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Message.Content != text {
			t.Fatalf("streamed %q, plain %q", text, resp.Choices[0].Message.Content)
		}
	})

	t.Run("completions", func(t *testing.T) {
		resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:     "chat-small",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens: openai.Int(4),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Choices[0].Text == "" || resp.Usage.CompletionTokens != 4 {
			t.Fatalf("unexpected completion: %+v", resp)
		}
	})

	t.Run("embeddings float and base64", func(t *testing.T) {
		in := openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"alpha", "beta"}}
		f, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "chat-small", Input: in, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat})
		if err != nil {
			t.Fatal(err)
		}
		b, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "chat-small", Input: in, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64})
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Data) != 2 || len(b.Data) != 2 || len(f.Data[0].Embedding) != 16 {
			t.Fatalf("embeddings: float %d, base64 %d", len(f.Data), len(b.Data))
		}
		for i := range f.Data {
			if len(b.Data[i].Embedding) != len(f.Data[i].Embedding) {
				t.Fatalf("dims differ: %d vs %d", len(b.Data[i].Embedding), len(f.Data[i].Embedding))
			}
			for j := range f.Data[i].Embedding {
				if float32(f.Data[i].Embedding[j]) != float32(b.Data[i].Embedding[j]) {
					t.Fatalf("embedding %d[%d]: float %v, base64 %v", i, j, f.Data[i].Embedding[j], b.Data[i].Embedding[j])
				}
			}
		}
	})

	t.Run("bad key is a parsed OpenAI error", func(t *testing.T) {
		bad := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey("sk-af-0000000000000000-nope"), option.WithMaxRetries(0))
		_, err := bad.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "chat-small", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("want *openai.Error, got %T %v", err, err)
		}
		if apiErr.StatusCode != http.StatusUnauthorized || apiErr.Code != "invalid_api_key" {
			t.Fatalf("got %d %q", apiErr.StatusCode, apiErr.Code)
		}
		if strings.Contains(apiErr.Message, "nope") {
			t.Fatal("the presented key is echoed in the error")
		}
	})

	t.Run("unknown model is a parsed OpenAI error", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "no-such-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("want *openai.Error, got %T %v", err, err)
		}
		if apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" || apiErr.Param != "model" {
			t.Fatalf("got %d %q %q", apiErr.StatusCode, apiErr.Code, apiErr.Param)
		}
	})
	_ = engine
}
