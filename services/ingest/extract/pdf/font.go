package pdf

import (
	"sort"
	"strings"

	pdfr "github.com/ledongthuc/pdf"
)

// pdfFont is what the text walker needs from a PDF font: how to split a
// shown string into character codes, what each code means in Unicode and how
// far each code advances the pen.
//
// ledongthuc/pdf decodes text well but its own positioning (Page.Content)
// takes widths only from a simple font's /Widths array: the standard 14
// fonts written without /Widths and every composite (Type0/CID) font come
// back with width 0, so all glyphs of a string share one X and word gaps
// cannot be seen. Here widths come from /Widths, the CID /W and /DW arrays,
// the built-in AFM metrics of the standard fonts, or an estimate.
type pdfFont struct {
	twoByte bool // composite (Type0) font: 2-byte codes
	enc     pdfr.TextEncoding
	uni     *toUnicode // the font's /ToUnicode map, preferred over enc
	cache   map[string]string

	// simple fonts
	first  int
	widths []float64
	std    *[256]uint16
	fixed  float64 // monospaced standard font width (Courier), in 1/1000 em
	miss   float64 // /MissingWidth, in 1/1000 em
	scale  float64 // glyph space to text space (0.001, or Type3 FontMatrix)

	// composite fonts
	dw     float64
	cidW   map[int]float64
	ranges []cidRange

	bold bool
}

type cidRange struct {
	lo, hi int
	w      float64
}

// defaultFont is used when text is shown before any Tf or with an unknown font.
var defaultFont = &pdfFont{enc: latin1Encoding{}, std: &widthHelvetica, scale: 0.001, cache: map[string]string{}}

type latin1Encoding struct{}

func (latin1Encoding) Decode(raw string) string {
	r := make([]rune, len(raw))
	for i := 0; i < len(raw); i++ {
		r[i] = rune(raw[i])
	}
	return string(r)
}

const maxCIDEntries = 1 << 16

// loadFont reads a font dictionary. It never panics: on a malformed font it
// degrades to Latin-1 decoding with estimated widths.
func loadFont(v pdfr.Value) (f *pdfFont) {
	f = &pdfFont{scale: 0.001, cache: map[string]string{}}
	defer func() {
		if recover() != nil {
			f = &pdfFont{enc: latin1Encoding{}, std: &widthHelvetica, scale: 0.001, cache: map[string]string{}}
		}
	}()
	if v.Kind() != pdfr.Dict {
		return defaultFont
	}
	base := v.Key("BaseFont").Name()
	if i := strings.IndexByte(base, '+'); i >= 0 {
		base = base[i+1:]
	}
	subtype := v.Key("Subtype").Name()
	desc := v.Key("FontDescriptor")
	if subtype == "Type0" {
		f.twoByte = true
		d := v.Key("DescendantFonts").Index(0)
		if desc.IsNull() {
			desc = d.Key("FontDescriptor")
		}
		f.dw = 1000
		if dw := d.Key("DW"); dw.Kind() == pdfr.Integer || dw.Kind() == pdfr.Real {
			f.dw = dw.Float64()
		}
		f.readCIDWidths(d.Key("W"))
	} else {
		f.first = int(v.Key("FirstChar").Int64())
		ws := v.Key("Widths")
		n := min(ws.Len(), 256)
		if n > 0 {
			f.widths = make([]float64, n)
			for i := range n {
				f.widths[i] = ws.Index(i).Float64()
			}
		}
		if subtype == "Type3" {
			if fm := v.Key("FontMatrix"); fm.Len() >= 1 && fm.Index(0).Float64() != 0 {
				f.scale = fm.Index(0).Float64()
			}
		}
		f.miss = desc.Key("MissingWidth").Float64()
		lb := strings.ToLower(base)
		bold := strings.Contains(lb, "bold")
		italic := strings.Contains(lb, "italic") || strings.Contains(lb, "oblique")
		switch {
		case strings.Contains(lb, "courier") || strings.Contains(lb, "mono"):
			f.fixed = 600
		case strings.Contains(lb, "times"):
			switch {
			case bold && italic:
				f.std = &widthTimesBoldItalic
			case bold:
				f.std = &widthTimesBold
			case italic:
				f.std = &widthTimesItalic
			default:
				f.std = &widthTimesRoman
			}
		case bold:
			f.std = &widthHelveticaBold
		default:
			f.std = &widthHelvetica // Helvetica, Arial, and the estimate for anything else
		}
	}
	lb := strings.ToLower(base)
	f.bold = strings.Contains(lb, "bold") || strings.Contains(lb, "black") || strings.Contains(lb, "heavy") ||
		desc.Key("FontWeight").Float64() >= 600 || desc.Key("Flags").Int64()&(1<<18) != 0
	f.uni = parseToUnicode(v.Key("ToUnicode"))
	pf := pdfr.Font{V: v}
	f.enc = pf.Encoder()
	if f.enc == nil {
		f.enc = latin1Encoding{}
	}
	return f
}

// readCIDWidths parses a CIDFont /W array: [c [w1 w2 ...]] or [cfirst clast w].
func (f *pdfFont) readCIDWidths(w pdfr.Value) {
	n := w.Len()
	entries := 0
	for i := 0; i < n && entries < maxCIDEntries; {
		c := w.Index(i)
		if c.Kind() != pdfr.Integer {
			return
		}
		next := w.Index(i + 1)
		switch next.Kind() {
		case pdfr.Array:
			if f.cidW == nil {
				f.cidW = map[int]float64{}
			}
			start := int(c.Int64())
			for j := 0; j < next.Len() && entries < maxCIDEntries; j++ {
				f.cidW[start+j] = next.Index(j).Float64()
				entries++
			}
			i += 2
		case pdfr.Integer:
			f.ranges = append(f.ranges, cidRange{int(c.Int64()), int(next.Int64()), w.Index(i + 2).Float64()})
			entries++
			i += 3
		default:
			return
		}
	}
	sort.Slice(f.ranges, func(i, j int) bool { return f.ranges[i].lo < f.ranges[j].lo })
}

// width is the advance of a code, in text space units per unit font size.
func (f *pdfFont) width(code int) float64 {
	if f.twoByte {
		if w, ok := f.cidW[code]; ok {
			return w / 1000
		}
		i := sort.Search(len(f.ranges), func(i int) bool { return f.ranges[i].hi >= code })
		if i < len(f.ranges) && f.ranges[i].lo <= code {
			return f.ranges[i].w / 1000
		}
		return f.dw / 1000
	}
	if i := code - f.first; i >= 0 && i < len(f.widths) {
		return f.widths[i] * f.scale
	}
	switch {
	case f.miss > 0:
		return f.miss / 1000
	case f.fixed > 0:
		return f.fixed / 1000
	case f.std != nil && code >= 0 && code < 256:
		return float64(f.std[code]) / 1000
	}
	return 0.5
}

// decode maps one character code to text.
func (f *pdfFont) decode(code string) string {
	if s, ok := f.cache[code]; ok {
		return s
	}
	s, ok := "", false
	if f.uni != nil {
		s, ok = f.uni.lookup(code)
	}
	if !ok {
		s = f.enc.Decode(code)
	}
	if len(f.cache) < 1<<16 {
		f.cache[code] = s
	}
	return s
}
