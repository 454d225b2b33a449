package guard

import (
	"math"
	"math/big"
	"regexp"
	"sort"
	"strings"
)

// PII kinds.
const (
	PIIEmail  = "email"
	PIIPhone  = "phone"
	PIIIBAN   = "iban"
	PIICard   = "card"
	PIIAPIKey = "api_key"
)

// PIIMatch is one piece of personal data or a secret in a text: its kind
// and byte range.
type PIIMatch struct {
	Kind       string
	Start, End int
}

var (
	reEmail = regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`)
	reCard  = regexp.MustCompile(`\d(?:[ -]?\d){12,18}`)
	reIBAN  = regexp.MustCompile(`\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b`)
	rePhone = regexp.MustCompile(`(?:\+|\b00)?\(?\d[\d ().\-/]{6,20}\d`)
	reDate  = regexp.MustCompile(`^(?:\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./]\d{2,4})(?:[ T]\d{1,2}[:.]\d{2})?$`)
	reKeys  = []*regexp.Regexp{
		regexp.MustCompile(`\bsk-(?:af-|proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{16,}`),
		regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`),
		regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{30,}`),
		regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{30,}`),
		regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`),
		regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{35}`),
		regexp.MustCompile(`\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}`),
		regexp.MustCompile(`-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----`),
	}
	reKeyValue = regexp.MustCompile(`(?i)\b(?:api[_-]?key|apikey|access[_-]?key|secret(?:[_-]?key)?|token|auth[_-]?token|bearer|password|passwd|pwd|client[_-]?secret)["']?\s*(?:[:=]|\s)\s*["']?([A-Za-z0-9_\-./+=]{16,})`)
)

// FindPII returns the personal data and secrets in text, in order, not
// overlapping: e-mail addresses, phone numbers (international or national
// with separators, 8 to 15 digits, not dates), IBANs (mod-97 checksum),
// card numbers (13 to 19 digits, Luhn checksum) and API-key shapes.
func FindPII(text string) []PIIMatch {
	var ms []PIIMatch
	add := func(kind string, s, e int) { ms = append(ms, PIIMatch{Kind: kind, Start: s, End: e}) }
	for _, re := range reKeys {
		for _, m := range re.FindAllStringIndex(text, -1) {
			add(PIIAPIKey, m[0], m[1])
		}
	}
	for _, m := range reKeyValue.FindAllStringSubmatchIndex(text, -1) {
		if v := text[m[2]:m[3]]; entropy(v) >= 3.0 && hasDigitAndLetter(v) {
			add(PIIAPIKey, m[2], m[3])
		}
	}
	for _, m := range reIBAN.FindAllStringIndex(text, -1) {
		if validIBAN(text[m[0]:m[1]]) {
			add(PIIIBAN, m[0], m[1])
		}
	}
	for _, m := range reCard.FindAllStringIndex(text, -1) {
		if validCard(text[m[0]:m[1]]) {
			add(PIICard, m[0], m[1])
		}
	}
	for _, m := range reEmail.FindAllStringIndex(text, -1) {
		add(PIIEmail, m[0], m[1])
	}
	for _, m := range rePhone.FindAllStringIndex(text, -1) {
		s, e := m[0], m[1]
		if s > 0 && (isDigit(text[s-1]) || isAlpha(text[s-1])) || e < len(text) && (isDigit(text[e]) || isAlpha(text[e])) {
			continue
		}
		if validPhone(text[s:e]) {
			add(PIIPhone, s, e)
		}
	}
	// Earlier kinds win overlaps: keys, IBANs, cards, e-mails, phones.
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Start < ms[j].Start })
	out := ms[:0]
	for _, m := range ms {
		if len(out) > 0 && m.Start < out[len(out)-1].End {
			last := &out[len(out)-1]
			if piiRank(m.Kind) < piiRank(last.Kind) || piiRank(m.Kind) == piiRank(last.Kind) && m.End > last.End {
				*last = m
			}
			continue
		}
		out = append(out, m)
	}
	return out
}

func piiRank(k string) int {
	switch k {
	case PIIAPIKey:
		return 0
	case PIIIBAN:
		return 1
	case PIICard:
		return 2
	case PIIEmail:
		return 3
	}
	return 4
}

// MaskPII replaces every match with its kind in brackets ("[EMAIL]",
// "[CARD]", ...) and returns the kinds found, sorted, once each.
func MaskPII(text string) (masked string, kinds []string) {
	ms := FindPII(text)
	if len(ms) == 0 {
		return text, nil
	}
	var b strings.Builder
	b.Grow(len(text))
	prev := 0
	seen := map[string]bool{}
	for _, m := range ms {
		b.WriteString(text[prev:m.Start])
		b.WriteString("[" + strings.ToUpper(m.Kind) + "]")
		prev = m.End
		if !seen[m.Kind] {
			seen[m.Kind] = true
			kinds = append(kinds, m.Kind)
		}
	}
	b.WriteString(text[prev:])
	sort.Strings(kinds)
	return b.String(), kinds
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func digitsOf(s string) []byte {
	d := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if isDigit(s[i]) {
			d = append(d, s[i]-'0')
		}
	}
	return d
}

func validCard(s string) bool {
	d := digitsOf(s)
	if len(d) < 13 || len(d) > 19 {
		return false
	}
	same := true
	for _, x := range d {
		if x != d[0] {
			same = false
		}
	}
	if same {
		return false
	}
	sum := 0
	for i := len(d) - 1; i >= 0; i-- {
		x := int(d[i])
		if (len(d)-1-i)%2 == 1 {
			x *= 2
			if x > 9 {
				x -= 9
			}
		}
		sum += x
	}
	return sum%10 == 0
}

func validIBAN(s string) bool {
	s = strings.ReplaceAll(s, " ", "")
	if len(s) < 15 || len(s) > 34 {
		return false
	}
	r := s[4:] + s[:4]
	var num strings.Builder
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case isDigit(c):
			num.WriteByte(c)
		case c >= 'A' && c <= 'Z':
			v := int(c-'A') + 10
			num.WriteByte(byte('0' + v/10))
			num.WriteByte(byte('0' + v%10))
		default:
			return false
		}
	}
	n, ok := new(big.Int).SetString(num.String(), 10)
	return ok && new(big.Int).Mod(n, big.NewInt(97)).Int64() == 1
}

func validPhone(s string) bool {
	s = strings.TrimSpace(s)
	d := digitsOf(s)
	if len(d) < 8 || len(d) > 15 || reDate.MatchString(s) {
		return false
	}
	intl := strings.HasPrefix(s, "+") || strings.HasPrefix(s, "00")
	seps := strings.Count(s, " ") + strings.Count(s, "-") + strings.Count(s, ".") + strings.Count(s, "(") + strings.Count(s, "/")
	if !intl && seps == 0 {
		return false // a plain number
	}
	if strings.Count(s, ".") > 0 && strings.Count(s, " ") == 0 && strings.Count(s, "-") == 0 && !intl && strings.Count(s, ".") != 2 && strings.Count(s, ".") != 3 {
		return false // 1.234.567,8-style amounts and versions
	}
	if strings.Contains(s, "/") && !intl {
		return false // fractions and dates
	}
	return true
}

func hasDigitAndLetter(s string) bool {
	var d, l bool
	for i := 0; i < len(s); i++ {
		d = d || isDigit(s[i])
		l = l || isAlpha(s[i])
	}
	return d && l
}

// entropy is the Shannon entropy of s in bits per character.
func entropy(s string) float64 {
	var f [256]int
	for i := 0; i < len(s); i++ {
		f[s[i]]++
	}
	h := 0.0
	for _, n := range f {
		if n > 0 {
			p := float64(n) / float64(len(s))
			h -= p * math.Log2(p)
		}
	}
	return h
}
