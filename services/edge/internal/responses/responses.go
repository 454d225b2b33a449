// Package responses serves POST /v1/responses: retrieval over the tenant's
// vector stores with the file_search tool, prompt assembly with numbered
// sources, and generation through the one inference path (admitted,
// limited, metered, traced, ended on key revocation and shutdown), answered
// in the Responses API's shape with file_citation annotations. Beyond
// OpenAI, citations and search results carry the pages their text came
// from.
package responses

import (
	"encoding/json"
	"errors"
	"strings"
)

type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    string          `json:"instructions"`
	Stream          bool            `json:"stream"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Temperature     *float64        `json:"temperature"`
	Include         []string        `json:"include"`
	Tools           []struct {
		Type           string          `json:"type"`
		VectorStoreIDs []string        `json:"vector_store_ids"`
		MaxNumResults  *int            `json:"max_num_results"`
		Filters        json.RawMessage `json:"filters"`
		RankingOptions *struct {
			ScoreThreshold *float64 `json:"score_threshold"`
		} `json:"ranking_options"`
	} `json:"tools"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// inputMessages reads the Responses API input: a string, or a list of
// messages whose content is a string or input_text parts.
func inputMessages(raw json.RawMessage) ([]chatMessage, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []chatMessage{{Role: "user", Content: s}}, nil
	}
	var items []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, errors.New("expected a string or a list of messages")
	}
	out := make([]chatMessage, 0, len(items))
	for _, it := range items {
		var text string
		if json.Unmarshal(it.Content, &text) != nil {
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(it.Content, &parts); err != nil {
				return nil, errors.New("message content must be a string or a list of input_text parts")
			}
			var b strings.Builder
			for _, p := range parts {
				b.WriteString(p.Text)
			}
			text = b.String()
		}
		role := it.Role
		if role == "" {
			role = "user"
		}
		out = append(out, chatMessage{Role: role, Content: text})
	}
	return out, nil
}

type citation struct {
	Type     string `json:"type"`
	Index    int    `json:"index"`
	FileID   string `json:"file_id"`
	Filename string `json:"filename"`
	Pages    []int  `json:"pages,omitempty"`
}
