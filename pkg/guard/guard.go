// Package guard is admission's classifier contract: what a prompt is
// scored for (injection and override, jailbreak and role-play, system
// prompt extraction, data exfiltration, destructive commands), the
// segments a request is cut into (every message of every role, tool
// outputs, documents fed into the prompt: indirect injection), and the
// verdict. The built-in classifier (fast, CPU, multilingual, normalising
// what attackers hide text with) and a pluggable external one (a model
// such as Llama Prompt Guard 2 behind an HTTP endpoint) implement
// Classifier; PII detection and masking live here too.
//
// Nothing here logs or keeps prompt text: a Verdict carries categories,
// scores and the index of the segment that scored highest, never text.
package guard

import "context"

// Categories a prompt is scored for.
const (
	CategoryInjection    = "injection"
	CategoryJailbreak    = "jailbreak"
	CategoryExtraction   = "system_prompt_extraction"
	CategoryExfiltration = "data_exfiltration"
	CategoryDestructive  = "destructive_command"
)

// Categories lists every category, in a stable order.
var Categories = []string{CategoryInjection, CategoryJailbreak, CategoryExtraction, CategoryExfiltration, CategoryDestructive}

// Sources of a segment: where its text came from.
const (
	// SourceMessage is a chat message's or a prompt's own text.
	SourceMessage = "message"
	// SourceTool is a tool call's output fed back to the model.
	SourceTool = "tool"
	// SourceDocument is retrieved text (file_search chunks) put into the
	// prompt: indirect injection.
	SourceDocument = "document"
)

// Segment is one piece of a request's text.
type Segment struct {
	// Role is the message's role (system, user, assistant, tool), "" for
	// a completion prompt or a document.
	Role   string
	Source string
	Text   string
}

// Verdict is a classifier's judgement of a request.
type Verdict struct {
	// Malicious is true when some category's score is at or above the
	// classifier's threshold.
	Malicious bool
	// Category is the highest-scoring category ("" when every score is 0)
	// and Score its score, in [0, 1].
	Category string
	Score    float64
	// Scores holds every category's score.
	Scores map[string]float64
	// Segment is the index of the segment that scored highest (-1 when
	// none scored).
	Segment int
	// Classifier names who judged: "builtin", "external" or "combined".
	Classifier string
}

// Classifier scores a request's segments.
type Classifier interface {
	Classify(ctx context.Context, segs []Segment) (Verdict, error)
}
