package pdf

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// lineBreakHyphen marks where a word was hyphenated across two lines
// ("docu-" / "mentation") until resolveHyphens decides, with the whole
// document in view, whether the hyphen was the typesetter's or the word's.
const lineBreakHyphen = '\x1f'

// resolveHyphens removes the line-break hyphen of typeset words ("docu-" +
// "mentation" → "documentation") and keeps that of compounds that happened
// to break at their hyphen ("Debian-" + "based" → "Debian-based", not
// "Debianbased", which matches neither "Debian" nor "based"). The document
// is its own dictionary: the hyphen stays when the hyphenated form appears
// elsewhere in the text and the joined one does not, or when either part
// holds a digit (TeX, which set most technical PDFs, never hyphenates a word
// with digits: "kfreebsd-amd64" is a name). Otherwise it goes, as most
// line-end hyphens are hyphenation.
func resolveHyphens(pages [][]pdfPara) {
	marked := false
	for _, ps := range pages {
		for _, p := range ps {
			if strings.IndexByte(p.text, lineBreakHyphen) >= 0 {
				marked = true
			}
		}
	}
	if !marked {
		return
	}
	// the words of the text, and its hyphenated compounds, lower-cased
	words, compounds := map[string]bool{}, map[string]bool{}
	for _, ps := range pages {
		for _, p := range ps {
			forWords(p.text, func(w string) {
				if strings.IndexByte(w, lineBreakHyphen) >= 0 {
					return
				}
				w = strings.ToLower(w)
				if strings.IndexByte(w, '-') >= 0 {
					compounds[w] = true
				} else {
					words[w] = true
				}
			})
		}
	}
	for pi := range pages {
		for i := range pages[pi] {
			p := &pages[pi][i]
			if strings.IndexByte(p.text, lineBreakHyphen) < 0 {
				continue
			}
			var b strings.Builder
			b.Grow(len(p.text))
			for k := 0; k < len(p.text); k++ {
				c := p.text[k]
				if c != lineBreakHyphen {
					b.WriteByte(c)
					continue
				}
				before, after := wordBefore(p.text[:k]), wordAfter(p.text[k+1:])
				if keepHyphen(before, after, words, compounds) {
					b.WriteByte('-')
				}
			}
			p.text = b.String()
		}
	}
}

func keepHyphen(before, after string, words, compounds map[string]bool) bool {
	if strings.ContainsFunc(before, unicode.IsDigit) || strings.ContainsFunc(after, unicode.IsDigit) {
		return true
	}
	lb, la := strings.ToLower(before), strings.ToLower(after)
	return compounds[lb+"-"+la] && !words[lb+la]
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// forWords calls f with each run of letters, digits, inner hyphens and
// line-break hyphens of s.
func forWords(s string, f func(string)) {
	start := -1
	for i, r := range s {
		in := isWordRune(r) || ((r == '-' || r == lineBreakHyphen) && start >= 0)
		switch {
		case in && start < 0:
			start = i
		case !in && start >= 0:
			f(strings.TrimRight(s[start:i], "-"))
			start = -1
		}
	}
	if start >= 0 {
		f(strings.TrimRight(s[start:], "-"))
	}
}

// wordBefore is the run of letters and digits that ends s.
func wordBefore(s string) string {
	i := len(s)
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !isWordRune(r) {
			break
		}
		i -= n
	}
	return s[i:]
}

// wordAfter is the run of letters and digits that starts s.
func wordAfter(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isWordRune(r) {
			break
		}
		i += n
	}
	return s[:i]
}
