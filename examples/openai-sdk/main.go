// Command openai-sdk calls aiforge with the official OpenAI Go SDK,
// unchanged: only the base URL and the key differ from calling OpenAI.
//
//	AIFORGE_API_KEY=sk-af-... go run ./examples/openai-sdk chat-small
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: openai-sdk MODEL")
		os.Exit(2)
	}
	base := os.Getenv("AIFORGE_URL")
	if base == "" {
		base = "http://127.0.0.1:8080"
	}
	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey(os.Getenv("AIFORGE_API_KEY")))
	ctx := context.Background()

	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         os.Args[1],
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Write a haiku about sovereign AI.")},
		MaxTokens:     openai.Int(12),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	for stream.Next() {
		chunk := stream.Current()
		for _, c := range chunk.Choices {
			fmt.Print(c.Delta.Content)
		}
		if chunk.Usage.TotalTokens > 0 {
			fmt.Printf("\n[usage: %d prompt + %d completion tokens]\n", chunk.Usage.PromptTokens, chunk.Usage.CompletionTokens)
		}
	}
	if err := stream.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
