// Package responses serves POST /v1/responses: retrieval over the tenant's
// vector stores with the file_search tool, prompt assembly with numbered
// sources, code runs in agent sandboxes with the code_interpreter tool
// (codeinterp.go), and generation through the one inference path (admitted,
// limited, metered, traced, ended on key revocation and shutdown), answered
// in the Responses API's shape with file_citation annotations. Beyond
// OpenAI, citations and search results carry the pages their text came
// from.
package responses

import (
	"encoding/json"

	"github.com/aiforge/aiforge/pkg/contracts"
)

type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    string          `json:"instructions"`
	Stream          bool            `json:"stream"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Temperature     *float64        `json:"temperature"`
	TopP            *float64        `json:"top_p"`
	Include         []string        `json:"include"`
	// Store keeps the response for GET /v1/responses/{id} and
	// previous_response_id (default true, as OpenAI).
	Store              *bool      `json:"store"`
	PreviousResponseID *string    `json:"previous_response_id"`
	Prompt             *promptRef `json:"prompt"`
	Tools              []struct {
		Type           string          `json:"type"`
		VectorStoreIDs []string        `json:"vector_store_ids"`
		MaxNumResults  *int            `json:"max_num_results"`
		Filters        json.RawMessage `json:"filters"`
		RankingOptions *struct {
			// Ranker is "auto", "default-2024-11-15", "none" or a rerank
			// model's name (vectorstores.Ranker).
			Ranker         string   `json:"ranker"`
			ScoreThreshold *float64 `json:"score_threshold"`
		} `json:"ranking_options"`
		// Container is code_interpreter's: an id or {"type": "auto"}.
		Container json.RawMessage `json:"container"`
	} `json:"tools"`
}

// chatMessage is a chat completions message (pkg/contracts, shared with
// the batch service's /v1/responses lines).
type chatMessage = contracts.ChatMessage

// inputMessages reads the Responses API input: a string, or a list of
// messages whose content is a string or input_text parts.
func inputMessages(raw json.RawMessage) ([]chatMessage, error) { return contracts.ResponsesInput(raw) }

type citation struct {
	Type     string `json:"type"`
	Index    int    `json:"index"`
	FileID   string `json:"file_id"`
	Filename string `json:"filename"`
	Pages    []int  `json:"pages,omitempty"`
}
