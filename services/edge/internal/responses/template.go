package responses

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"regexp"
	"sort"
	"strings"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// Prompt templates: instructions and input messages with {{variable}}
// placeholders, substituted from the request's prompt.variables in one
// pass (a value is never expanded again).

// Bounds of prompt references in requests.
const (
	// MaxPromptVariables bounds prompt.variables.
	MaxPromptVariables = 64
	// MaxVariableBytes bounds one variable's value.
	MaxVariableBytes = 256 << 10
)

var placeholderRe = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_.-]{0,63})\s*\}\}`)

// templateVariables lists the variables texts use, sorted, once each.
func templateVariables(texts ...string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, t := range texts {
		for _, m := range placeholderRe.FindAllStringSubmatch(t, -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				out = append(out, m[1])
			}
		}
	}
	sort.Strings(out)
	return out
}

// substitute replaces every placeholder of text with its variable; budget
// is what the result may still add in bytes (it is decreased), so that a
// small template with a large value used many times cannot grow without
// bound.
func substitute(text string, vars map[string]string, budget *int64, promptID, version string) (string, *contracts.Error) {
	var missing string
	var b strings.Builder
	last := 0
	for _, loc := range placeholderRe.FindAllStringSubmatchIndex(text, -1) {
		name := text[loc[2]:loc[3]]
		v, ok := vars[name]
		if !ok {
			missing = name
			break
		}
		b.WriteString(text[last:loc[0]])
		b.WriteString(v)
		last = loc[1]
		if *budget -= int64(len(v)); *budget < 0 {
			return "", contracts.ErrBadRequest("prompt.variables", contracts.CodeInvalidRequest,
				fmt.Sprintf("The prompt '%s' version %s with these variables is larger than the request limit.", promptID, version))
		}
	}
	if missing != "" {
		return "", contracts.ErrBadRequest("prompt.variables", contracts.CodeMissingPromptVariable,
			fmt.Sprintf("The prompt '%s' version %s uses the variable '%s', which prompt.variables does not give.", promptID, version, missing))
	}
	b.WriteString(text[last:])
	return b.String(), nil
}

// parseVariables reads prompt.variables: each a string or an input_text
// part ({"type": "input_text", "text": ...}).
func parseVariables(raw map[string]json.RawMessage) (map[string]string, *contracts.Error) {
	if len(raw) > MaxPromptVariables {
		return nil, contracts.ErrBadRequest("prompt.variables", contracts.CodeTooManyProperties,
			fmt.Sprintf("Invalid 'prompt.variables': at most %d variables.", MaxPromptVariables))
	}
	out := make(map[string]string, len(raw))
	for name, v := range raw {
		param := "prompt.variables." + httpapi.Bounded(name, 64)
		var s string
		if json.Unmarshal(v, &s) != nil {
			var part struct {
				Type string  `json:"type"`
				Text *string `json:"text"`
			}
			if json.Unmarshal(v, &part) != nil || part.Type != "input_text" || part.Text == nil {
				return nil, contracts.ErrBadRequest(param, contracts.CodeInvalidType,
					fmt.Sprintf("Invalid '%s': a string or an input_text part.", param))
			}
			s = *part.Text
		}
		if len(s) > MaxVariableBytes {
			return nil, contracts.ErrBadRequest(param, contracts.CodeStringTooLong,
				fmt.Sprintf("Invalid '%s': longer than %d bytes.", param, MaxVariableBytes))
		}
		out[name] = s
	}
	return out, nil
}

// labelTarget is one version a label points at, with its share of the
// label's requests (weights of a label sum to 100).
type labelTarget struct {
	Version string `json:"version"`
	Weight  int    `json:"weight"`
}

// choose picks the version of a label for one request: deterministic per
// key (the response id, random per request), split by the weights.
func choose(targets []labelTarget, key string) string {
	total := 0
	for _, t := range targets {
		total += t.Weight
	}
	if total <= 0 {
		return ""
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	// Mix the FNV hash (its low bits follow the last bytes of the key
	// closely) before reducing it.
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	n := int(x % uint64(total))
	for _, t := range targets {
		if n < t.Weight {
			return t.Version
		}
		n -= t.Weight
	}
	return targets[len(targets)-1].Version
}
