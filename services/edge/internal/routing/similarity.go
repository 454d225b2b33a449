package routing

import (
	"encoding/json"
	"math"
	"strings"

	"github.com/aiforge/aiforge/pkg/lexical"
)

// MaxPromptBytes bounds the prompt text that is analysed or embedded for
// classification and similarity (the last user message, cut there).
const MaxPromptBytes = 16 << 10

// LastUserText is the text of the last user message of a chat request
// body (string content, or the text parts of an array), cut at
// MaxPromptBytes; "" when there is none.
func LastUserText(body []byte) string {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Prompt json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(body, &req) != nil {
		return ""
	}
	if len(req.Messages) == 0 {
		var p string
		if json.Unmarshal(req.Prompt, &p) == nil {
			return cut(p)
		}
		return ""
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != "user" {
			continue
		}
		return cut(ContentText(m.Content))
	}
	return ""
}

// ContentText is the text of a message content: a string, or the text of
// its text parts joined by newlines.
func ContentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func cut(s string) string {
	if len(s) <= MaxPromptBytes {
		return s
	}
	s = s[:MaxPromptBytes]
	// Do not end inside a UTF-8 sequence.
	for len(s) > 0 && s[len(s)-1]&0xC0 == 0x80 {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0xC0 {
		s = s[:len(s)-1]
	}
	return s
}

// Terms is a sparse, unit-length vector of analysed terms.
type Terms map[string]float32

// LexicalVector is text's terms (pkg/lexical: stop words dropped, stems)
// weighted by sublinear term frequency times idf (nil: every term weighs
// 1), normalised to unit length.
func LexicalVector(an *lexical.Analyzer, text string, idf func(string) float64) Terms {
	tf, _ := an.TermFreqs(text)
	v := make(Terms, len(tf))
	var norm float64
	for t, n := range tf {
		w := 1 + math.Log(float64(n))
		if idf != nil {
			w *= idf(t)
		}
		v[t] = float32(w)
		norm += w * w
	}
	if norm == 0 {
		return v
	}
	inv := float32(1 / math.Sqrt(norm))
	for t := range v {
		v[t] *= inv
	}
	return v
}

// CosineTerms is the cosine of two unit-length term vectors.
func CosineTerms(a, b Terms) float64 {
	if len(a) > len(b) {
		a, b = b, a
	}
	var s float64
	for t, w := range a {
		s += float64(w) * float64(b[t])
	}
	return s
}

// CosineDense is the cosine of two dense vectors (0 when their sizes
// differ or one is zero).
func CosineDense(a, b []float32) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
