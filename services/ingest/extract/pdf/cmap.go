package pdf

import (
	"io"
	"sort"
	"strings"
	"unicode/utf16"

	pdfr "github.com/ledongthuc/pdf"
)

// toUnicode is a font's /ToUnicode CMap.
//
// ledongthuc/pdf parses these too, but its bfrange arithmetic only increments
// the last byte of the destination: with a range such as <0000> <FFFF> <0000>
// (what fpdf and other producers write for embedded TrueType fonts) every
// character above U+00FF decodes to a control character; "—" (U+2014) comes
// back as U+0014. It also ignores /ToUnicode when a simple font names an
// /Encoding, though the map is the better source for text extraction.
type toUnicode struct {
	single map[uint32]string
	ranges []uniRange // sorted by lo
}

type uniRange struct {
	lo, hi uint32
	dst    []uint16   // UTF-16 of the first code's text; the last unit is incremented
	arr    [][]uint16 // or one destination per code
}

const maxCMapEntries = 1 << 17

// parseToUnicode reads a ToUnicode stream; it returns nil when the stream is
// missing or unusable. The CMap is tokenised here rather than with
// pdfr.Interpret, whose PostScript subset cannot run the CMap prologue
// ("/CIDInit /ProcSet findresource begin") without a callback pushing a
// dictionary, which the package does not let callers build.
func parseToUnicode(v pdfr.Value) (m *toUnicode) {
	if v.Kind() != pdfr.Stream {
		return nil
	}
	defer func() {
		if recover() != nil {
			m = nil
		}
	}()
	rc := v.Reader()
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxCMapBytes))
	if err != nil && len(data) == 0 {
		return nil
	}
	m = &toUnicode{single: map[uint32]string{}}
	toks := cmapTokens(data)
	entries := 0
	var operands []cmapToken
	for _, t := range toks {
		if t.kind != tokWord {
			operands = append(operands, t)
			continue
		}
		switch t.s {
		case "beginbfchar", "beginbfrange":
			operands = operands[:0]
			continue
		case "endbfchar":
			for i := 0; i+1 < len(operands) && entries < maxCMapEntries; i += 2 {
				src, dst := operands[i], operands[i+1]
				if src.kind != tokString || dst.kind != tokString {
					continue
				}
				m.single[codeValue(src.s)] = string(utf16.Decode(units(dst.s)))
				entries++
			}
		case "endbfrange":
			for i := 0; i+2 < len(operands) && entries < maxCMapEntries; i += 3 {
				lo, hi, dst := operands[i], operands[i+1], operands[i+2]
				if lo.kind != tokString || hi.kind != tokString {
					continue
				}
				r := uniRange{lo: codeValue(lo.s), hi: codeValue(hi.s)}
				if r.hi < r.lo {
					continue
				}
				switch dst.kind {
				case tokString:
					r.dst = units(dst.s)
				case tokArray:
					for _, a := range dst.arr {
						r.arr = append(r.arr, units(a))
					}
				default:
					continue
				}
				m.ranges = append(m.ranges, r)
				entries++
			}
		}
		operands = operands[:0]
	}
	if len(m.single) == 0 && len(m.ranges) == 0 {
		return nil
	}
	sort.SliceStable(m.ranges, func(i, j int) bool { return m.ranges[i].lo < m.ranges[j].lo })
	return m
}

const maxCMapBytes = 8 << 20

const (
	tokWord = iota
	tokString
	tokArray
	tokOther
)

type cmapToken struct {
	kind int
	s    string
	arr  []string
}

// cmapTokens splits a CMap into words, strings (hex or literal, decoded to
// bytes), arrays of strings and other operands.
func cmapTokens(b []byte) []cmapToken {
	var out []cmapToken
	var arr []string
	inArr := false
	emit := func(t cmapToken) {
		if inArr {
			if t.kind == tokString {
				arr = append(arr, t.s)
			}
			return
		}
		out = append(out, t)
	}
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '%':
			for i < len(b) && b[i] != '\n' && b[i] != '\r' {
				i++
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == 0:
			i++
		case c == '<' && i+1 < len(b) && b[i+1] == '<', c == '>' && i+1 < len(b) && b[i+1] == '>':
			emit(cmapToken{kind: tokOther})
			i += 2
		case c == '<':
			j := i + 1
			var hex []byte
			for j < len(b) && b[j] != '>' {
				if h := unhexDigit(b[j]); h >= 0 {
					hex = append(hex, byte(h))
				}
				j++
			}
			if len(hex)%2 == 1 {
				hex = append(hex, 0)
			}
			s := make([]byte, len(hex)/2)
			for k := range s {
				s[k] = hex[2*k]<<4 | hex[2*k+1]
			}
			emit(cmapToken{kind: tokString, s: string(s)})
			i = j + 1
		case c == '(':
			j, depth := i+1, 1
			var s []byte
			for j < len(b) && depth > 0 {
				switch b[j] {
				case '\\':
					j++
					if j < len(b) {
						s = append(s, b[j])
					}
				case '(':
					depth++
					s = append(s, b[j])
				case ')':
					depth--
					if depth > 0 {
						s = append(s, b[j])
					}
				default:
					s = append(s, b[j])
				}
				j++
			}
			emit(cmapToken{kind: tokString, s: string(s)})
			i = j
		case c == '[':
			inArr, arr = true, nil
			i++
		case c == ']':
			inArr = false
			out = append(out, cmapToken{kind: tokArray, arr: arr})
			i++
		default:
			j := i
			for j < len(b) && !strings.ContainsRune(" \t\n\r\f\x00<>[]()/%{}", rune(b[j])) {
				j++
			}
			if j == i { // a lone delimiter such as '/', '{' or '}'
				j++
			}
			word := string(b[i:j])
			kind := tokWord
			if word[0] == '/' || (word[0] >= '0' && word[0] <= '9') || word[0] == '-' || word[0] == '.' || word == "{" || word == "}" {
				kind = tokOther
			}
			emit(cmapToken{kind: kind, s: word})
			i = j
		}
	}
	return out
}

func unhexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func codeValue(s string) uint32 {
	var v uint32
	for i := 0; i < len(s) && i < 4; i++ {
		v = v<<8 | uint32(s[i])
	}
	return v
}

func units(s string) []uint16 {
	u := make([]uint16, 0, len(s)/2)
	for i := 0; i+1 < len(s); i += 2 {
		u = append(u, uint16(s[i])<<8|uint16(s[i+1]))
	}
	if len(s)%2 == 1 { // a one-byte destination: treat as a code unit
		u = append(u, uint16(s[len(s)-1]))
	}
	return u
}

// lookup returns the text of a code and whether the map has it.
func (m *toUnicode) lookup(code string) (string, bool) {
	c := codeValue(code)
	if s, ok := m.single[c]; ok {
		return s, true
	}
	// ranges may nest or overlap: scan back from the last range starting at or below c
	for i := sort.Search(len(m.ranges), func(i int) bool { return m.ranges[i].lo > c }) - 1; i >= 0; i-- {
		r := m.ranges[i]
		if c > r.hi {
			continue
		}
		off := c - r.lo
		if r.arr != nil {
			if int(off) < len(r.arr) {
				return string(utf16.Decode(r.arr[off])), true
			}
			return "", false
		}
		switch len(r.dst) {
		case 0:
			return "", false
		case 1:
			return string(rune(r.dst[0]) + rune(off)), true
		}
		u := append([]uint16(nil), r.dst...)
		u[len(u)-1] += uint16(off)
		return string(utf16.Decode(u)), true
	}
	return "", false
}
