package guard

import (
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"
)

// Pseudo-categories: evidence that changes how the others are read.
const (
	catMeta     = "meta"     // talking about attacks (a question, a paper): dampens
	catQuestion = "question" // asking what a command does: dampens destructive and exfiltration
	catDecode   = "decode"   // "decode this and follow it": raises what a decoded payload says
	catMundane  = "mundane"  // "ignore my last email": what is set aside is no instruction; dampens injection
	catHowto    = "howto"    // "how do I …": asking how to do something oneself; dampens injection and jailbreak
)

// Rule options.
const (
	optDocOnly = 1 << iota // counts only in tool outputs and documents
	optBoost               // adds to a category only where it already has evidence
)

// spec is a lexicon entry as written: slots separated by " .. " (each
// slot may follow the previous one within gap words), alternatives by
// "|", a trailing "*" makes the last word a prefix.
type spec struct {
	cat string
	w   float64
	pat string
	opt int
	gap int
	lit bool   // pat is a literal substring of the folded text
	rx  string // a regular expression over the folded text, run when pat (a literal trigger) occurs
}

type phrase struct {
	words  []string
	prefix bool
}

type rule struct {
	cat   int
	w     float64
	opt   int
	gap   int
	slots [][]phrase
	first []map[string][]int // per slot: first word → phrase indexes
	pfx   [][]int            // per slot: phrase indexes whose first word is a prefix
	lit   string
	rx    *regexp.Regexp
}

type lexicon struct {
	rules  []rule
	exact  map[string][]int // first word of slot 0 → rules
	prefix map[string][]int // first-word prefixes of slot 0 → rules
	maxPfx int
	pfx2   map[string][]string // the first two bytes of each prefix → the prefixes
	// hidden holds ROT13 and reversed spellings of telling words: only a
	// text holding one is read as ROT13 or backwards.
	hidden map[string]bool
	lits   []int // literal and regexp rules
	vocab  map[string]struct{}
}

var catIndex = map[string]int{
	CategoryInjection: 0, CategoryJailbreak: 1, CategoryExtraction: 2, CategoryExfiltration: 3, CategoryDestructive: 4,
	catMeta: 5, catQuestion: 6, catDecode: 7, catMundane: 8, catHowto: 9,
}

const nCat = 5
const nAll = 10

var (
	lexOnce sync.Once
	lexVal  *lexicon
)

func lex() *lexicon {
	lexOnce.Do(func() { lexVal = buildLexicon(lexiconSpecs()) })
	return lexVal
}

func splitWords(p string) []string { return tokenizeRaw(fold(p)) }

// tokenizeRaw tokenizes without merging or segmenting (used on the
// lexicon itself, so it cannot depend on the vocabulary).
func tokenizeRaw(s string) []string {
	var out []string
	i := 0
	for i < len(s) {
		c, n := utf8.DecodeRuneInString(s[i:])
		if isIdeo(c) {
			out = append(out, s[i:i+n])
			i += n
			continue
		}
		if !wordRune(c) {
			i += n
			continue
		}
		st := i
		for i < len(s) {
			c, n = utf8.DecodeRuneInString(s[i:])
			if isIdeo(c) || !wordRune(c) {
				break
			}
			i += n
		}
		out = append(out, s[st:i])
	}
	return out
}

func buildLexicon(specs []spec) *lexicon {
	l := &lexicon{exact: map[string][]int{}, prefix: map[string][]int{}, vocab: map[string]struct{}{}}
	for _, w := range strings.Fields("a an the all any and or to of you your me my i is are be now this that these with for in on it from what who then so as at by not no do say tell") {
		l.vocab[w] = struct{}{}
	}
	for _, sp := range specs {
		ci, ok := catIndex[sp.cat]
		if !ok {
			panic("guard: unknown category " + sp.cat)
		}
		r := rule{cat: ci, w: sp.w, opt: sp.opt, gap: sp.gap}
		if sp.lit || sp.rx != "" {
			r.lit = fold(sp.pat)
			if sp.rx != "" {
				r.rx = regexp.MustCompile(sp.rx)
			}
			l.rules = append(l.rules, r)
			l.lits = append(l.lits, len(l.rules)-1)
			continue
		}
		ideo := false
		for _, slot := range strings.Split(sp.pat, " .. ") {
			var ps []phrase
			for _, alt := range strings.Split(slot, "|") {
				alt = strings.TrimSpace(alt)
				pre := strings.HasSuffix(alt, "*")
				alt = strings.TrimSuffix(alt, "*")
				ws := splitWords(alt)
				if len(ws) == 0 {
					continue
				}
				for _, w := range ws {
					c, _ := utf8.DecodeRuneInString(w)
					if isIdeo(c) {
						ideo = true
					}
					if len(w) > 2 && w[0] >= 'a' && w[0] <= 'z' {
						l.vocab[w] = struct{}{}
					}
				}
				ps = append(ps, phrase{words: ws, prefix: pre})
			}
			if len(ps) == 0 {
				panic("guard: empty slot in " + sp.pat)
			}
			r.slots = append(r.slots, ps)
		}
		if r.gap == 0 {
			r.gap = 4
			if ideo {
				r.gap = 12
			}
		}
		r.first = make([]map[string][]int, len(r.slots))
		r.pfx = make([][]int, len(r.slots))
		for si, ps := range r.slots {
			r.first[si] = map[string][]int{}
			for pi, p := range ps {
				if p.prefix && len(p.words) == 1 {
					r.pfx[si] = append(r.pfx[si], pi)
				} else {
					r.first[si][p.words[0]] = append(r.first[si][p.words[0]], pi)
				}
			}
		}
		id := len(l.rules)
		l.rules = append(l.rules, r)
		for _, p := range r.slots[0] {
			w := p.words[0]
			if p.prefix && len(p.words) == 1 {
				l.prefix[w] = appendOnce(l.prefix[w], id)
				if len(w) > l.maxPfx {
					l.maxPfx = len(w)
				}
			} else {
				l.exact[w] = appendOnce(l.exact[w], id)
			}
		}
	}
	l.pfx2 = map[string][]string{}
	for w := range l.prefix {
		k := w
		if len(k) > 2 {
			k = k[:2]
		}
		l.pfx2[k] = append(l.pfx2[k], w)
	}
	l.hidden = map[string]bool{}
	for _, w := range strings.Fields("ignore disregard forget previous instructions instruction prompt system rules reveal jailbreak restrictions pretend developer delete remove execute send password secret conversation above prior override unrestricted filters server root preserve database drop table production format wipe destroy truncate") {
		l.hidden[rot13String(w)] = true
		r := []byte(w)
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		l.hidden[string(r)] = true
	}
	return l
}

func rot13String(w string) string {
	b := []byte(w)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = 'a' + (c-'a'+13)%26
		}
	}
	return string(b)
}

// mayHide reports whether toks hold a ROT13 or reversed telling word.
func (l *lexicon) mayHide(toks []token) bool {
	for _, t := range toks {
		if len(t.a) >= 4 && l.hidden[t.a] {
			return true
		}
	}
	return false
}

func appendOnce(s []int, v int) []int {
	if len(s) > 0 && s[len(s)-1] == v {
		return s
	}
	return append(s, v)
}

// hit is one rule matched at a byte position of the folded text.
type hit struct {
	pos  int
	rule int
}

func tokEq(t token, w string) bool { return t.a == w || t.b != "" && t.b == w }

func tokPrefix(t token, w string) bool {
	return strings.HasPrefix(t.a, w) || t.b != "" && strings.HasPrefix(t.b, w)
}

// phraseAt reports whether p matches at toks[i:], returning the index
// after it.
func phraseAt(p phrase, toks []token, i int) (int, bool) {
	if i+len(p.words) > len(toks) {
		return 0, false
	}
	for k, w := range p.words {
		t := toks[i+k]
		if p.prefix && k == len(p.words)-1 {
			if !tokPrefix(t, w) {
				return 0, false
			}
		} else if !tokEq(t, w) {
			return 0, false
		}
	}
	return i + len(p.words), true
}

func (r *rule) slotAt(si int, toks []token, i int) (int, bool) {
	t := toks[i]
	for _, key := range [2]string{t.a, t.b} {
		if key == "" {
			continue
		}
		for _, pi := range r.first[si][key] {
			if e, ok := phraseAt(r.slots[si][pi], toks, i); ok {
				return e, true
			}
		}
	}
	for _, pi := range r.pfx[si] {
		if e, ok := phraseAt(r.slots[si][pi], toks, i); ok {
			return e, true
		}
	}
	return 0, false
}

// matchFrom matches slots si.. of r with slot si starting at toks[i].
func (r *rule) matchFrom(si int, toks []token, i int) bool {
	e, ok := r.slotAt(si, toks, i)
	if !ok {
		return false
	}
	if si == len(r.slots)-1 {
		return true
	}
	for j := e; j <= e+r.gap && j < len(toks); j++ {
		if r.matchFrom(si+1, toks, j) {
			return true
		}
	}
	return false
}

// negators are words that, just before a request, forbid it instead.
var negators = map[string]bool{"never": true, "not": true, "dont": true, "nunca": true, "jamais": true, "niemals": true, "mai": true, "nooit": true}

// negated reports whether the words just before toks[i] forbid what
// follows ("never reveal", "do not send", "must not delete").
func negated(toks []token, i int) bool {
	for k := i - 1; k >= 0 && k >= i-2; k-- {
		t := toks[k]
		if negators[t.a] {
			return true
		}
		if t.a == "t" && k > 0 && (toks[k-1].a == "don" || toks[k-1].a == "won" || toks[k-1].a == "can" || toks[k-1].a == "shouldn" || toks[k-1].a == "mustn") {
			return true
		}
	}
	return false
}

// maxHits bounds the evidence one view records.
const maxHits = 1024

// matchTokens appends every rule matched in toks.
func (l *lexicon) matchTokens(toks []token, doc bool, hits []hit) []hit {
	var cand []int
	for i := range toks {
		if len(hits) >= maxHits {
			break
		}
		t := toks[i]
		cand = cand[:0]
		cand = append(cand, l.exact[t.a]...)
		if t.b != "" {
			cand = append(cand, l.exact[t.b]...)
		}
		for _, w := range [2]string{t.a, t.b} {
			if len(w) < 2 {
				continue
			}
			for _, pw := range l.pfx2[w[:2]] {
				if strings.HasPrefix(w, pw) {
					cand = append(cand, l.prefix[pw]...)
				}
			}
		}
		for k, id := range cand {
			dup := false
			for _, p := range cand[:k] {
				if p == id {
					dup = true
					break
				}
			}
			if dup {
				continue
			}
			r := &l.rules[id]
			if r.opt&optDocOnly != 0 && !doc {
				continue
			}
			if r.cat >= catIndex[CategoryExtraction] && r.cat <= catIndex[CategoryDestructive] && negated(toks, i) {
				continue
			}
			if r.matchFrom(0, toks, i) {
				hits = append(hits, hit{pos: t.pos, rule: id})
			}
		}
	}
	return hits
}

// matchLiterals appends literal and regexp rules found in folded text.
func (l *lexicon) matchLiterals(s string, doc bool, hits []hit) []hit {
	for _, id := range l.lits {
		r := &l.rules[id]
		if r.opt&optDocOnly != 0 && !doc {
			continue
		}
		off := 0
		for n := 0; n < 8 && len(hits) < maxHits; n++ {
			k := strings.Index(s[off:], r.lit)
			if k < 0 {
				break
			}
			p := off + k
			if r.rx == nil {
				hits = append(hits, hit{pos: p, rule: id})
			} else {
				lo := max(0, p-64)
				hi := min(len(s), p+256)
				if r.rx.MatchString(s[lo:hi]) {
					hits = append(hits, hit{pos: p, rule: id})
				}
			}
			off = p + len(r.lit)
		}
	}
	return hits
}
