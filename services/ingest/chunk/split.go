package chunk

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Split levels, coarse to fine. A block too large for a chunk is split at the
// first level that yields more than one piece, recursively.
const (
	levelBlock = iota
	levelParagraph
	levelLine
	levelSentence
	levelWord
	levelGraphemeRun // runs of graphemeRun clusters
	levelGrapheme
	levelRune
)

// piece is a span of text with the separator that preceded it in the source.
type piece struct {
	text string
	sep  string // "" (no whitespace), " ", "\n" or "\n\n"
}

// splitAt splits s at one level. Pieces are trimmed and non-empty; the first
// piece's sep is "".
func splitAt(s string, level int) []piece {
	switch level {
	case levelParagraph:
		return splitParagraphs(s)
	case levelLine:
		return splitLines(s)
	case levelSentence:
		return splitSentences(s)
	case levelWord:
		return splitFunc(s, unicode.IsSpace)
	case levelGraphemeRun:
		return splitGraphemeRuns(s)
	case levelGrapheme:
		var out []piece
		for _, g := range graphemes(s) {
			out = append(out, piece{text: g})
		}
		return out
	case levelRune:
		var out []piece
		for _, r := range s {
			out = append(out, piece{text: string(r)})
		}
		return out
	}
	return []piece{{text: s}}
}

// sepOf classifies a whitespace run between two pieces.
func sepOf(ws string) string {
	switch n := strings.Count(ws, "\n"); {
	case n >= 2:
		return "\n\n"
	case n == 1:
		return "\n"
	case ws == "":
		return ""
	}
	return " "
}

func splitParagraphs(s string) []piece {
	var out []piece
	lines := strings.Split(s, "\n")
	var cur []string
	flush := func() {
		if t := strings.TrimSpace(strings.Join(cur, "\n")); t != "" {
			sep := "\n\n"
			if len(out) == 0 {
				sep = ""
			}
			out = append(out, piece{text: t, sep: sep})
		}
		cur = cur[:0]
	}
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		cur = append(cur, l)
	}
	flush()
	return out
}

// splitLines splits at newlines, keeping each line's indentation (code).
func splitLines(s string) []piece {
	var out []piece
	for l := range strings.SplitSeq(s, "\n") {
		l = strings.TrimRightFunc(l, unicode.IsSpace)
		if strings.TrimSpace(l) == "" {
			continue
		}
		sep := "\n"
		if len(out) == 0 {
			sep = ""
			l = strings.TrimLeftFunc(l, unicode.IsSpace)
		}
		out = append(out, piece{text: l, sep: sep})
	}
	return out
}

// splitFunc splits at runs of runes matching isSep.
func splitFunc(s string, isSep func(rune) bool) []piece {
	var out []piece
	start, lastEnd := -1, 0
	for i, r := range s {
		if isSep(r) {
			if start >= 0 {
				out = appendPiece(out, s[start:i], s[lastEnd:start])
				start, lastEnd = -1, i
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = appendPiece(out, s[start:], s[lastEnd:start])
	}
	return out
}

func appendPiece(out []piece, text, ws string) []piece {
	trimmed := strings.TrimSpace(text)
	if trimmed == "" {
		return out
	}
	// whitespace trimmed from the front of text counts as separator too
	lead := text[:len(text)-len(strings.TrimLeftFunc(text, unicode.IsSpace))]
	sep := sepOf(ws + lead)
	if len(out) == 0 {
		sep = ""
	} else if sep == "" {
		sep = " "
	}
	return append(out, piece{text: trimmed, sep: sep})
}

func isSentenceEnd(r rune) bool {
	switch r {
	case '.', '!', '?', '…', '‼', '⁇', '⁈', '⁉':
		return true
	}
	return false
}

// isCJKSentenceEnd marks terminators that end a sentence without a space.
func isCJKSentenceEnd(r rune) bool {
	switch r {
	case '。', '！', '？', '．', '｡', '︒':
		return true
	}
	return false
}

func isCloser(r rune) bool {
	switch r {
	case '"', '\'', ')', ']', '}', '”', '’', '»', '」', '』', '）', '】', '〉', '》':
		return true
	}
	return false
}

// splitSentences splits after sentence terminators (with any closing quotes
// or brackets) followed by whitespace, and after CJK terminators.
func splitSentences(s string) []piece {
	var out []piece
	start := 0
	prevWS := ""
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		cjk := isCJKSentenceEnd(r)
		if !isSentenceEnd(r) && !cjk {
			continue
		}
		// absorb more terminators and closers: "?!", ".)", ".”"
		for i < len(s) {
			r2, n2 := utf8.DecodeRuneInString(s[i:])
			if isSentenceEnd(r2) || isCJKSentenceEnd(r2) || isCloser(r2) {
				i += n2
				continue
			}
			break
		}
		end := i
		// whitespace run after the terminator
		j := i
		for j < len(s) {
			r2, n2 := utf8.DecodeRuneInString(s[j:])
			if !unicode.IsSpace(r2) {
				break
			}
			j += n2
		}
		if j == end && !cjk && j < len(s) {
			continue // "3.14", "e.g.x": not a boundary
		}
		if t := strings.TrimSpace(s[start:end]); t != "" {
			out = append(out, piece{text: t, sep: sepOrSpace(len(out), prevWS, s[start:end])})
		}
		prevWS = s[end:j]
		start, i = j, j
	}
	if t := strings.TrimSpace(s[start:]); t != "" {
		out = append(out, piece{text: t, sep: sepOrSpace(len(out), prevWS, s[start:])})
	}
	return out
}

func sepOrSpace(n int, ws, text string) string {
	if n == 0 {
		return ""
	}
	lead := text[:len(text)-len(strings.TrimLeftFunc(text, unicode.IsSpace))]
	return sepOf(ws + lead)
}

// splitGraphemeRuns splits text without spaces (CJK, long identifiers,
// base64) into runs of up to graphemeRun user-perceived characters, so that
// BPE merges between neighbours still count; a run too large is split into
// single clusters at the next level.
const graphemeRun = 16

func splitGraphemeRuns(s string) []piece {
	clusters := graphemes(s)
	var out []piece
	for i := 0; i < len(clusters); i += graphemeRun {
		j := min(i+graphemeRun, len(clusters))
		out = append(out, piece{text: strings.Join(clusters[i:j], "")})
	}
	return out
}

// graphemes splits into user-perceived characters, approximately: combining
// marks, variation selectors, emoji modifiers, ZWJ sequences and
// regional-indicator pairs stay with their base.
func graphemes(s string) []string {
	var out []string
	start := 0
	var prev rune = -1
	riCount := 0
	for i, r := range s {
		if i > 0 && !extendsCluster(prev, r, riCount) {
			out = append(out, s[start:i])
			start = i
			riCount = 0
		}
		if isRegionalIndicator(r) {
			riCount++
		}
		prev = r
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func isRegionalIndicator(r rune) bool { return r >= 0x1F1E6 && r <= 0x1F1FF }

func extendsCluster(prev, r rune, riCount int) bool {
	switch {
	case prev == '\r' && r == '\n':
		return true
	case prev == 0x200D: // after a zero-width joiner
		return true
	case r == 0x200D, r == 0x200C:
		return true
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc):
		return true
	case r >= 0xFE00 && r <= 0xFE0F, r >= 0xE0100 && r <= 0xE01EF: // variation selectors
		return true
	case r >= 0x1F3FB && r <= 0x1F3FF: // emoji skin-tone modifiers
		return true
	case r >= 0xE0020 && r <= 0xE007F: // emoji tag sequences
		return true
	case isRegionalIndicator(r) && isRegionalIndicator(prev) && riCount%2 == 1:
		return true
	}
	return false
}
