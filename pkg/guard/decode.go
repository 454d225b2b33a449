package guard

import (
	"encoding/base64"
	"encoding/hex"
	"html"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxDecoded bounds how many decoded payloads one text yields.
const maxDecoded = 16

// decodePayloads finds encoded payloads in s (case preserved) and returns
// their decoded text: base64 runs, hex runs (plain, \x.., 0x.., spaced
// pairs), percent-encoding, HTML entities and \u escapes. Only decodings
// that are mostly printable text are kept.
func decodePayloads(s string) []string {
	var out []string
	add := func(d string) {
		if len(out) < maxDecoded && printable(d) {
			out = append(out, d)
		}
	}
	// base64 runs.
	for i := 0; i < len(s) && len(out) < maxDecoded; {
		if !b64Char(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && b64Char(s[j]) {
			j++
		}
		for j < len(s) && s[j] == '=' {
			j++
		}
		if j-i >= 16 {
			if d, ok := decodeB64(s[i:j]); ok {
				add(d)
			}
		}
		i = j
	}
	// hex runs: digits with optional separators and \x / 0x prefixes.
	for i := 0; i < len(s) && len(out) < maxDecoded; {
		if !hexChar(s[i]) {
			i++
			continue
		}
		var digits []byte
		j := i
		for j < len(s) {
			switch {
			case hexChar(s[j]):
				digits = append(digits, s[j])
				j++
				continue
			case s[j] == '\\' && j+1 < len(s) && s[j+1] == 'x', s[j] == '0' && j+1 < len(s) && s[j+1] == 'x':
				j += 2
				continue
			case (s[j] == ' ' || s[j] == ',' || s[j] == ':' || s[j] == '-') && j+1 < len(s) && (hexChar(s[j+1]) || s[j+1] == '\\' || s[j+1] == '0'):
				j++
				continue
			}
			break
		}
		if len(digits) >= 16 && len(digits)%2 == 0 {
			if b, err := hex.DecodeString(string(digits)); err == nil {
				add(string(b))
			}
		}
		if j == i {
			j++
		}
		i = j
	}
	if strings.Count(s, "%") >= 3 {
		if d := percentDecode(s); d != s {
			add(d)
		}
	}
	if strings.Contains(s, "&#") || strings.Contains(s, "&lt;") {
		if d := html.UnescapeString(s); d != s {
			add(d)
		}
	}
	if strings.Contains(s, `\u`) {
		if d := unicodeUnescape(s); d != s {
			add(d)
		}
	}
	return out
}

func b64Char(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_'
}

func hexChar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func decodeB64(run string) (string, bool) {
	trimmed := strings.TrimRight(run, "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(trimmed); err == nil {
			return string(b), true
		}
	}
	// A run glued to surrounding text: try without a trailing partial quantum.
	if cut := len(trimmed) - len(trimmed)%4; cut >= 16 && cut != len(trimmed) {
		if b, err := base64.RawStdEncoding.DecodeString(trimmed[:cut]); err == nil {
			return string(b), true
		}
	}
	return "", false
}

// printable reports whether d reads as text: valid UTF-8, at least 6
// runes, nearly all of them printable, and some letters.
func printable(d string) bool {
	if !utf8.ValidString(d) {
		return false
	}
	n, bad, letters := 0, 0, 0
	for _, c := range d {
		n++
		switch {
		case c == '\n' || c == '\t' || c == '\r':
		case c < 0x20 || c == 0x7f || c == utf8.RuneError:
			bad++
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c > 0x7f:
			letters++
		}
	}
	return n >= 6 && bad*20 <= n && letters*3 >= n
}

func percentDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && hexChar(s[i+1]) && hexChar(s[i+2]) {
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(v))
			i += 2
			continue
		}
		if s[i] == '+' {
			b.WriteByte(' ')
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unicodeUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+5 < len(s) && s[i+1] == 'u' {
			if v, err := strconv.ParseUint(s[i+2:i+6], 16, 32); err == nil {
				b.WriteRune(rune(v))
				i += 5
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
