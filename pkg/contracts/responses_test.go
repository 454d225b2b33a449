package contracts_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/aiforge/aiforge/pkg/contracts"
)

func TestResponsesToChat(t *testing.T) {
	chat, model, err := contracts.ResponsesToChat([]byte(`{"model":"m","instructions":"be brief","max_output_tokens":7,"temperature":0.5,
		"input":[{"role":"user","content":[{"type":"input_text","text":"hello "},{"type":"input_text","text":"there"}]},{"role":"assistant","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if model != "m" {
		t.Fatalf("model %q", model)
	}
	var got struct {
		Model       string  `json:"model"`
		MaxTokens   int64   `json:"max_tokens"`
		Temperature float64 `json:"temperature"`
		Stream      *bool   `json:"stream"`
		Messages    []struct {
			Role, Content string
		} `json:"messages"`
	}
	if err := json.Unmarshal(chat, &got); err != nil {
		t.Fatal(err)
	}
	if got.Model != "m" || got.MaxTokens != 7 || got.Temperature != 0.5 || got.Stream != nil {
		t.Fatalf("translated %s", chat)
	}
	want := []string{"system:be brief", "user:hello there", "assistant:hi"}
	if len(got.Messages) != len(want) {
		t.Fatalf("messages %+v", got.Messages)
	}
	for i, m := range got.Messages {
		if m.Role+":"+m.Content != want[i] {
			t.Fatalf("message %d = %s:%s, want %s", i, m.Role, m.Content, want[i])
		}
	}

	chat, _, err = contracts.ResponsesToChat([]byte(`{"model":"m","input":"just a string"}`))
	if err != nil || string(chat) != `{"messages":[{"role":"user","content":"just a string"}],"model":"m"}` {
		t.Fatalf("string input: %s %v", chat, err)
	}
}

func TestResponsesToChatRefuses(t *testing.T) {
	for _, tc := range []struct {
		body, param string
		fileSearch  bool
	}{
		{`{"model":"m","input":"q","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`, "tools", true},
		{`{"model":"m","input":"q","tools":[{"type":"web_search"}]}`, "tools", false},
		{`{"input":"q"}`, "model", false},
		{`{"model":"m"}`, "input", false},
		{`{"model":"m","input":42}`, "input", false},
		{`[1]`, "body", false},
	} {
		_, _, err := contracts.ResponsesToChat([]byte(tc.body))
		var re *contracts.ResponsesError
		if !errors.As(err, &re) || re.Param != tc.param {
			t.Errorf("%s: err %v, want param %s", tc.body, err, tc.param)
			continue
		}
		if errors.Is(err, contracts.ErrResponsesFileSearch) != tc.fileSearch {
			t.Errorf("%s: file search %v", tc.body, errors.Is(err, contracts.ErrResponsesFileSearch))
		}
	}
}

func TestChatToResponse(t *testing.T) {
	body, err := contracts.ChatToResponse("resp_abc", 1700000000, "m", []byte(`{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"hi there"},"finish_reason":"stop"}],
		"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		ID        string `json:"id"`
		Object    string `json:"object"`
		CreatedAt int64  `json:"created_at"`
		Status    string `json:"status"`
		Model     string `json:"model"`
		Output    []struct {
			Type, ID, Role string
			Content        []struct{ Type, Text string }
		} `json:"output"`
		Usage struct {
			InputTokens        int64 `json:"input_tokens"`
			OutputTokens       int64 `json:"output_tokens"`
			TotalTokens        int64 `json:"total_tokens"`
			InputTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if r.ID != "resp_abc" || r.Object != "response" || r.CreatedAt != 1700000000 || r.Status != "completed" || r.Model != "m" {
		t.Fatalf("response %s", body)
	}
	if len(r.Output) != 1 || r.Output[0].Type != "message" || r.Output[0].ID != "msg_abc" || r.Output[0].Role != "assistant" ||
		len(r.Output[0].Content) != 1 || r.Output[0].Content[0].Type != "output_text" || r.Output[0].Content[0].Text != "hi there" {
		t.Fatalf("output %s", body)
	}
	if r.Usage.InputTokens != 5 || r.Usage.OutputTokens != 2 || r.Usage.TotalTokens != 7 || r.Usage.InputTokensDetails.CachedTokens != 1 {
		t.Fatalf("usage %s", body)
	}

	body, err = contracts.ChatToResponse("resp_x", 1, "m", []byte(`{"choices":[{"message":{"content":"cut"},"finish_reason":"length"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var inc struct {
		Status            string            `json:"status"`
		IncompleteDetails map[string]string `json:"incomplete_details"`
	}
	if err := json.Unmarshal(body, &inc); err != nil || inc.Status != "incomplete" || inc.IncompleteDetails["reason"] != "max_output_tokens" {
		t.Fatalf("length answer: %s %v", body, err)
	}
	body, err = contracts.ChatToResponse("resp_x", 1, "m", []byte(`{"choices":[{"message":{"content":"cut"},"finish_reason":"content_filter"}]}`))
	inc.IncompleteDetails = nil
	if err != nil || json.Unmarshal(body, &inc) != nil || inc.Status != "incomplete" || inc.IncompleteDetails["reason"] != "content_filter" {
		t.Fatalf("content_filter answer: %s %v", body, err)
	}
	for finish, want := range map[string]string{"length": "max_output_tokens", "content_filter": "content_filter", "stop": "", "tool_calls": "", "": ""} {
		if got := contracts.IncompleteReason(finish); got != want {
			t.Errorf("IncompleteReason(%q) = %q, want %q", finish, got, want)
		}
	}
	if _, err := contracts.ChatToResponse("resp_x", 1, "m", []byte(`not json`)); err == nil {
		t.Fatal("a non-JSON answer was translated")
	}
}
