package guard

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// extractTags splits out Unicode tag characters (U+E0000 block), which
// render as nothing but spell ASCII: hidden is what they spell, rest the
// text without them.
func extractTags(s string) (hidden, rest string) {
	if !strings.Contains(s, "\xf3\xa0") { // every U+E00xx starts F3 A0
		return "", s
	}
	var h, r strings.Builder
	for _, c := range s {
		if c >= 0xE0000 && c <= 0xE007F {
			if c >= 0xE0020 && c <= 0xE007E {
				h.WriteRune(c - 0xE0000)
			}
			continue
		}
		r.WriteRune(c)
	}
	return h.String(), r.String()
}

// invisible reports the characters attackers hide text with or split
// words by: zero-width characters, bidi controls, soft hyphens,
// variation selectors, and other format characters.
func invisible(c rune) bool {
	switch {
	case c == 0x00AD, c == 0x034F, c == 0x061C, c == 0x115F, c == 0x1160, c == 0x17B4, c == 0x17B5, c == 0x180E:
		return true
	case c >= 0x200B && c <= 0x200F, c >= 0x202A && c <= 0x202E, c >= 0x2060 && c <= 0x206F:
		return true
	case c == 0xFEFF, c >= 0xFE00 && c <= 0xFE0F, c >= 0xFFF0 && c <= 0xFFFB:
		return true
	case c >= 0xE0000 && c <= 0xE0FFF:
		return true
	}
	return c > 0x7f && unicode.Is(unicode.Cf, c)
}

// stripInvisible drops invisible characters.
func stripInvisible(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, c := range s {
		if !invisible(c) {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// fold is the matching form of text: compatibility decomposition (full
// width and styled letters become plain ones), accents and other
// combining marks dropped, lower case, and every run of white space one
// space. The lexicon goes through the same function, so a pattern and
// the text it should match always agree.
func fold(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if !ascii {
		s = norm.NFKD.String(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	space := true
	for i := 0; i < len(s); {
		c := rune(s[i])
		n := 1
		if c >= 0x80 {
			c, n = utf8.DecodeRuneInString(s[i:])
		}
		i += n
		if c < 0x80 {
			if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
				if !space {
					b.WriteByte(' ')
					space = true
				}
				continue
			}
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			b.WriteByte(byte(c))
			space = false
			continue
		}
		if unicode.Is(unicode.Mn, c) || invisible(c) {
			continue
		}
		if unicode.IsSpace(c) {
			if !space {
				b.WriteByte(' ')
				space = true
			}
			continue
		}
		b.WriteRune(unicode.ToLower(c))
		space = false
	}
	return strings.TrimRight(b.String(), " ")
}

// confusables folds Cyrillic and Greek look-alikes of Latin letters, and
// a few other shapes, onto the Latin letter (after fold: lower case,
// no accents).
var confusables = map[rune]rune{
	'а': 'a', 'в': 'b', 'е': 'e', 'ё': 'e', 'к': 'k', 'м': 'm', 'н': 'h', 'о': 'o', 'р': 'p', 'с': 'c', 'т': 't', 'у': 'y', 'х': 'x',
	'і': 'i', 'ї': 'i', 'ј': 'j', 'ѕ': 's', 'ԁ': 'd', 'ԛ': 'q', 'ԝ': 'w', 'һ': 'h', 'ӏ': 'l', 'ɡ': 'g', 'ɑ': 'a', 'ı': 'i', 'ɩ': 'i',
	'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u', 'χ': 'x', 'γ': 'y', 'ϲ': 'c', 'ω': 'w',
	'ℓ': 'l', 'ß': 's',
}

// leet folds digits written for letters (1gn0re) inside words that also
// hold letters.
var leet = map[rune]rune{'0': 'o', '1': 'i', '3': 'e', '4': 'a', '5': 's', '7': 't', '8': 'b', '9': 'g', '@': 'a', '$': 's', '|': 'l', '!': 'i'}

// token is a word of folded text: a is its form, b a second spelling to
// match (look-alikes and digits folded onto Latin letters) or "".
type token struct {
	a, b string
	pos  int
}

// script classes for tokenizing.
func isIdeo(c rune) bool {
	if c < 0x2E80 && (c < 0x0E00 || c > 0x0E7F) {
		return false
	}
	return unicode.Is(unicode.Han, c) || unicode.Is(unicode.Hiragana, c) || unicode.Is(unicode.Katakana, c) || c == 'ー' || unicode.Is(unicode.Thai, c)
}

func wordRune(c rune) bool {
	if c < 0x80 {
		return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z'
	}
	return unicode.IsLetter(c) || unicode.IsDigit(c)
}

// leetRune is a symbol that counts as a letter when inside a word
// (p@ssword, $ystem).
func leetRune(c rune) bool { return c == '@' || c == '$' || c == '|' || c == '!' }

// tokenize cuts folded text into words. Han, kana and Thai characters are
// one token each (those scripts do not space words). URLs and e-mail
// addresses become the tokens "urlx" and "emailx".
func tokenize(s string, toks []token) []token {
	i := 0
	for i < len(s) {
		c, n := rune(s[i]), 1
		if c >= 0x80 {
			c, n = utf8.DecodeRuneInString(s[i:])
		}
		if c == 'h' && (strings.HasPrefix(s[i:], "http://") || strings.HasPrefix(s[i:], "https://")) || c == 'w' && strings.HasPrefix(s[i:], "www.") {
			j := i
			for j < len(s) && s[j] != ' ' && s[j] != ')' && s[j] != '"' && s[j] != '\'' && s[j] != '>' && s[j] != ']' {
				j++
			}
			toks = append(toks, token{a: "urlx", pos: i})
			i = j
			continue
		}
		if c == '@' && len(toks) > 0 && i > 0 && wordRune(rune(s[i-1])) && i+1 < len(s) && wordRune(rune(s[i+1])) {
			j := i + 1
			dot := false
			for j < len(s) && (wordRune(rune(s[j])) || s[j] == '.' || s[j] == '-') {
				if s[j] == '.' {
					dot = true
				}
				j++
			}
			if dot {
				toks[len(toks)-1] = token{a: "emailx", pos: toks[len(toks)-1].pos}
				i = j
				continue
			}
		}
		if isIdeo(c) {
			toks = append(toks, token{a: s[i : i+n], pos: i})
			i += n
			continue
		}
		if !wordRune(c) && !(leetRune(c) && i+n < len(s) && wordRune(rune(s[i+n])) && c != '!') {
			i += n
			continue
		}
		start := i
		email := false
		for i < len(s) {
			c, n = rune(s[i]), 1
			if c >= 0x80 {
				c, n = utf8.DecodeRuneInString(s[i:])
			}
			if c == '@' && i > start {
				if j, ok := emailDomain(s, i+1); ok {
					toks = append(toks, token{a: "emailx", pos: start})
					i, email = j, true
					break
				}
			}
			if isIdeo(c) || !(wordRune(c) || leetRune(c)) {
				break
			}
			i += n
		}
		if email {
			continue
		}
		if i == start {
			i += n
			continue
		}
		w := strings.TrimRight(s[start:i], "@$|!")
		if w == "" {
			continue
		}
		toks = append(toks, token{a: w, b: altSpelling(w), pos: start})
	}
	return mergeSpaced(s, toks)
}

// emailDomain reports whether s[i:] starts with a domain (letters,
// digits, dashes, at least one inner dot) and where it ends.
func emailDomain(s string, i int) (int, bool) {
	j, dot := i, false
	for j < len(s) && (wordRune(rune(s[j])) || s[j] == '.' || s[j] == '-') {
		if s[j] == '.' && j > i && j+1 < len(s) && wordRune(rune(s[j+1])) {
			dot = true
		}
		j++
	}
	return j, dot && j > i
}

// altSpelling folds look-alike letters and leet digits onto Latin when a
// word mixes them with Latin letters (or is made only of look-alikes).
func altSpelling(w string) string {
	latin, digits, other, conf := 0, 0, 0, 0
	for _, c := range w {
		switch {
		case c >= 'a' && c <= 'z':
			latin++
		case c >= '0' && c <= '9' || leetRune(c):
			digits++
		default:
			if _, ok := confusables[c]; ok {
				conf++
			} else {
				other++
			}
		}
	}
	if latin+conf == 0 || (digits == 0 && conf == 0) {
		return ""
	}
	if latin == 0 && (other > 0 || digits > 0) {
		return "" // a real Cyrillic or Greek word, or a number
	}
	if other > 0 && latin == 0 {
		return ""
	}
	var b strings.Builder
	for _, c := range w {
		if r, ok := confusables[c]; ok {
			c = r
		} else if r, ok := leet[c]; ok {
			c = r
		}
		b.WriteRune(c)
	}
	if b.String() == w {
		return ""
	}
	return b.String()
}

// mergeSpaced joins words spelled out letter by letter ("i g n o r e",
// "i-g-n-o-r-e") back into words: the narrowest gap inside a run is the
// gap between letters, wider ones separate words; a run with no wider
// gap is cut into words with the lexicon's vocabulary.
func mergeSpaced(s string, toks []token) []token {
	single := func(t token) bool {
		if t.b != "" {
			return utf8.RuneCountInString(t.b) == 1
		}
		c, n := utf8.DecodeRuneInString(t.a)
		return n == len(t.a) && c < 0x3000
	}
	out := make([]token, 0, len(toks)+8)
	for i := 0; i < len(toks); {
		j := i
		for j < len(toks) && single(toks[j]) && (j == i || toks[j].pos-toks[j-1].pos <= 4) {
			j++
		}
		if j-i < 4 {
			if j == i {
				j = i + 1
			}
			for k := i; k < j; k++ {
				out = append(out, segmentLong(toks[k])...)
			}
			i = j
			continue
		}
		minGap := 1 << 30
		for k := i + 1; k < j; k++ {
			if g := toks[k].pos - toks[k-1].pos; g < minGap {
				minGap = g
			}
		}
		// Letters joined by dashes or dots ("r-u-n r-m"): a space between
		// two of them is a word break, however narrow.
		sepSpace := func(k int) bool {
			lo, hi := toks[k-1].pos+len(toks[k-1].a), toks[k].pos
			return lo <= hi && hi <= len(s) && strings.IndexByte(s[lo:hi], ' ') >= 0
		}
		spaceBreaks := false
		for k := i + 1; k < j; k++ {
			if !sepSpace(k) {
				spaceBreaks = true
				break
			}
		}
		var w strings.Builder
		start := toks[i].pos
		flush := func() {
			if w.Len() == 0 {
				return
			}
			t := token{a: w.String(), pos: start}
			t.b = altSpelling(t.a)
			parts := segmentTol(t, 3)
			out = append(out, parts...)
			w.Reset()
		}
		for k := i; k < j; k++ {
			if k > i && (toks[k].pos-toks[k-1].pos > minGap || spaceBreaks && sepSpace(k)) {
				flush()
				start = toks[k].pos
			}
			w.WriteString(toks[k].a)
		}
		flush()
		i = j
	}
	return out
}

// segmentLong cuts a long run of Latin letters with no spaces
// ("ignorepreviousinstructions") into lexicon words when the vocabulary
// covers most of it; other tokens come back as they are.
func segmentLong(t token) []token { return segmentTol(t, 10) }

// segmentTol is segmentLong allowing one letter outside the vocabulary
// per tol letters of the word (spelled-out text tolerates more: its
// words were clearly separated by their writer).
func segmentTol(t token, tol int) []token {
	w := t.a
	if t.b != "" {
		w = t.b
	}
	if len(w) < 12 || len(w) > 200 {
		return []token{t}
	}
	if _, ok := lex().vocab[w]; ok {
		return []token{t}
	}
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return []token{t}
		}
	}
	n := len(w)
	cost := make([]int, n+1)
	back := make([]int, n+1)
	for i := 1; i <= n; i++ {
		cost[i] = cost[i-1] + 1
		back[i] = i - 1
		for l := 2; l <= 14 && l <= i; l++ {
			if _, ok := lex().vocab[w[i-l:i]]; ok && cost[i-l] < cost[i] {
				cost[i] = cost[i-l]
				back[i] = i - l
			}
		}
	}
	if cost[n]*tol > n {
		return []token{t}
	}
	var parts []token
	for i := n; i > 0; i = back[i] {
		if i-back[i] > 1 {
			parts = append(parts, token{a: w[back[i]:i], pos: t.pos})
		}
	}
	for l, r := 0, len(parts)-1; l < r; l, r = l+1, r-1 {
		parts[l], parts[r] = parts[r], parts[l]
	}
	long := 0
	for _, p := range parts {
		if len(p.a) >= 5 {
			long++
		}
	}
	// A run of short words ("you are dan now") counts too where the
	// writer spelled it out letter by letter.
	if long < 2 && !(tol <= 3 && len(parts) >= 3) {
		return []token{t}
	}
	return parts
}

// rot13Tokens is the token stream read as ROT13 (ASCII words only).
func rot13Tokens(toks []token, out []token) []token {
	for _, t := range toks {
		b := []byte(t.a)
		ok := false
		for i, c := range b {
			if c >= 0x80 {
				ok = false
				break
			}
			if c >= 'a' && c <= 'z' {
				b[i] = 'a' + (c-'a'+13)%26
				ok = true
			}
		}
		if ok {
			out = append(out, token{a: string(b), pos: t.pos})
		}
	}
	return segmentAll(out)
}

// reversedTokens is the token stream read backwards, each word reversed.
func reversedTokens(toks []token, out []token) []token {
	for i := len(toks) - 1; i >= 0; i-- {
		t := toks[i]
		r := []rune(t.a)
		for l, h := 0, len(r)-1; l < h; l, h = l+1, h-1 {
			r[l], r[h] = r[h], r[l]
		}
		out = append(out, token{a: string(r), b: altSpelling(string(r)), pos: t.pos})
	}
	return segmentAll(out)
}

func segmentAll(toks []token) []token {
	long := false
	for _, t := range toks {
		if len(t.a) >= 12 {
			long = true
			break
		}
	}
	if !long {
		return toks
	}
	out := make([]token, 0, len(toks)+8)
	for _, t := range toks {
		out = append(out, segmentLong(t)...)
	}
	return out
}
