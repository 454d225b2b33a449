package pdf

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	pdfr "github.com/ledongthuc/pdf"
)

// This file walks a page's content stream (with pdfr.Interpret from
// ledongthuc/pdf for the tokenising) and records every glyph with its
// position, then rebuilds words, lines and paragraphs from the geometry:
// a space goes where the gap to the previous glyph is wider than a fraction
// of the font size, a new line where the baseline moves, a new paragraph
// where the line gap grows, the font size changes or a bullet starts.

// mat is a PDF transformation matrix [a b c d e f].
type mat [6]float64

var identity = mat{1, 0, 0, 1, 0, 0}

// mul returns m × n (apply m, then n).
func (m mat) mul(n mat) mat {
	return mat{
		m[0]*n[0] + m[1]*n[2],
		m[0]*n[1] + m[1]*n[3],
		m[2]*n[0] + m[3]*n[2],
		m[2]*n[1] + m[3]*n[3],
		m[4]*n[0] + m[5]*n[2] + n[4],
		m[4]*n[1] + m[5]*n[3] + n[5],
	}
}

type glyph struct {
	x, y  float64 // origin in the glyph's baseline frame (x along the baseline, y across)
	ex    float64 // x after the advance
	size  float64 // effective font size in user space units
	text  string
	dir   int8 // 0 upright, 1 rotated or mirrored
	bold  bool
	space bool
}

type gstate struct {
	ctm                     mat
	tc, tw, th, tl, tfs, ts float64
	font                    *pdfFont
}

// Limits per page against decompression bombs and pathological streams.
const (
	maxOpsPerPage    = 20_000_000
	maxGlyphsPerPage = 2_000_000
	maxFormDepth     = 8
	maxFormsPerPage  = 2000
	maxInheritDepth  = 32
)

var errPageLimit = errors.New("page content exceeds the extraction limits")

type pageWalker struct {
	check  func() error // cancellation check, called every few thousand operators
	glyphs []glyph
	fonts  map[string]*pdfFont
	ops    int
	forms  int
	scope  int
}

// walkPage interprets a page's content and returns its glyphs. A malformed
// stream stops the walk: the glyphs read so far are returned with the error.
func walkPage(page pdfr.Value, check func() error) (glyphs []glyph, err error) {
	w := &pageWalker{check: check, fonts: map[string]*pdfFont{}}
	defer func() {
		if r := recover(); r != nil {
			glyphs = w.glyphs
			if e, ok := r.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	contents := page.Key("Contents")
	if k := contents.Kind(); k != pdfr.Stream && k != pdfr.Array {
		return nil, nil
	}
	res := inherited(page, "Resources")
	w.run(contents, res, gstate{ctm: identity, th: 1}, 0)
	return w.glyphs, nil
}

// inherited looks a page attribute up the page tree, with a bounded walk
// (a Parent cycle would loop forever in pdfr.Page.Resources).
func inherited(v pdfr.Value, key string) pdfr.Value {
	for i := 0; i < maxInheritDepth && !v.IsNull(); i++ {
		if r := v.Key(key); !r.IsNull() {
			return r
		}
		v = v.Key("Parent")
	}
	return pdfr.Value{}
}

func (w *pageWalker) font(res pdfr.Value, scope int, name string) *pdfFont {
	key := fmt.Sprintf("%d/%s", scope, name)
	if f, ok := w.fonts[key]; ok {
		return f
	}
	f := loadFont(res.Key("Font").Key(name))
	w.fonts[key] = f
	return f
}

func (w *pageWalker) run(strm, res pdfr.Value, g gstate, depth int) {
	scope := w.scope
	var tm, tlm mat = identity, identity
	var stack []gstate
	show := func(raw string) { tm = w.show(raw, &g, tm) }
	pdfr.Interpret(strm, func(stk *pdfr.Stack, op string) {
		n := stk.Len()
		args := make([]pdfr.Value, n)
		for i := n - 1; i >= 0; i-- {
			args[i] = stk.Pop()
		}
		if w.ops++; w.ops > maxOpsPerPage {
			panic(errPageLimit)
		}
		if w.ops%4096 == 0 && w.check != nil {
			if err := w.check(); err != nil {
				panic(err)
			}
		}
		num := func(i int) float64 {
			if i < len(args) {
				return args[i].Float64()
			}
			return 0
		}
		switch op {
		case "q":
			if len(stack) < 256 {
				stack = append(stack, g)
			}
		case "Q":
			if len(stack) > 0 {
				g = stack[len(stack)-1]
				stack = stack[:len(stack)-1]
			}
		case "cm":
			if len(args) == 6 {
				g.ctm = mat{num(0), num(1), num(2), num(3), num(4), num(5)}.mul(g.ctm)
			}
		case "BT":
			tm, tlm = identity, identity
		case "Tc":
			g.tc = num(0)
		case "Tw":
			g.tw = num(0)
		case "Tz":
			g.th = num(0) / 100
		case "TL":
			g.tl = num(0)
		case "Ts":
			g.ts = num(0)
		case "Tf":
			if len(args) == 2 {
				g.font = w.font(res, scope, args[0].Name())
				g.tfs = num(1)
			}
		case "Td", "TD":
			if len(args) == 2 {
				if op == "TD" {
					g.tl = -num(1)
				}
				tlm = mat{1, 0, 0, 1, num(0), num(1)}.mul(tlm)
				tm = tlm
			}
		case "Tm":
			if len(args) == 6 {
				tlm = mat{num(0), num(1), num(2), num(3), num(4), num(5)}
				tm = tlm
			}
		case "T*":
			tlm = mat{1, 0, 0, 1, 0, -g.tl}.mul(tlm)
			tm = tlm
		case "Tj":
			if len(args) >= 1 {
				show(args[len(args)-1].RawString())
			}
		case "'", "\"":
			if op == "\"" && len(args) == 3 {
				g.tw, g.tc = num(0), num(1)
			}
			tlm = mat{1, 0, 0, 1, 0, -g.tl}.mul(tlm)
			tm = tlm
			if len(args) >= 1 {
				show(args[len(args)-1].RawString())
			}
		case "TJ":
			if len(args) < 1 {
				return
			}
			v := args[len(args)-1]
			for i := 0; i < v.Len(); i++ {
				x := v.Index(i)
				if x.Kind() == pdfr.String {
					show(x.RawString())
				} else {
					tx := -x.Float64() / 1000 * g.tfs * g.th
					tm = mat{1, 0, 0, 1, tx, 0}.mul(tm)
				}
			}
		case "Do":
			if len(args) == 1 {
				w.form(res, args[0].Name(), g, depth)
			}
		}
	})
}

// form runs a Form XObject (text inside forms is common: headers, stamps,
// whole pages re-used as forms).
func (w *pageWalker) form(res pdfr.Value, name string, g gstate, depth int) {
	if depth >= maxFormDepth || w.forms >= maxFormsPerPage {
		return
	}
	x := res.Key("XObject").Key(name)
	if x.Kind() != pdfr.Stream || x.Key("Subtype").Name() != "Form" {
		return
	}
	w.forms++
	if m := x.Key("Matrix"); m.Len() == 6 {
		var fm mat
		for i := range 6 {
			fm[i] = m.Index(i).Float64()
		}
		g.ctm = fm.mul(g.ctm)
	}
	fres := x.Key("Resources")
	if fres.IsNull() {
		fres = res
	}
	saved := w.scope
	w.scope = w.forms
	w.run(x, fres, g, depth+1)
	w.scope = saved
}

// show lays out one shown string and returns the advanced text matrix.
func (w *pageWalker) show(raw string, g *gstate, tm mat) mat {
	f := g.font
	if f == nil {
		f = defaultFont
	}
	step := 1
	if f.twoByte {
		step = 2
	}
	for i := 0; i+step <= len(raw); i += step {
		code := raw[i : i+step]
		c := int(code[0])
		if step == 2 {
			c = c<<8 | int(code[1])
		}
		trm := mat{g.tfs * g.th, 0, 0, g.tfs, 0, g.ts}.mul(tm).mul(g.ctm)
		adv := f.width(c)*g.tfs + g.tc
		if step == 1 && c == 32 {
			adv += g.tw
		}
		adv *= g.th
		tm = mat{1, 0, 0, 1, adv, 0}.mul(tm)
		text := f.decode(code)
		if text == "" {
			continue
		}
		end := mat{g.tfs * g.th, 0, 0, g.tfs, 0, g.ts}.mul(tm).mul(g.ctm)
		// baseline frame: u along the baseline, n across it
		ux, uy := trm[0], trm[1]
		ul := math.Hypot(ux, uy)
		if ul == 0 || math.IsNaN(ul) || math.IsInf(ul, 0) {
			continue
		}
		ux, uy = ux/ul, uy/ul
		size := math.Abs(trm[2]*-uy + trm[3]*ux) // height component across the baseline
		if size == 0 {
			size = ul
		}
		var dir int8
		if ux < 0.99 || trm[3] < 0 {
			dir = 1
		}
		gl := glyph{
			x:    trm[4]*ux + trm[5]*uy,
			y:    -trm[4]*uy + trm[5]*ux,
			ex:   end[4]*ux + end[5]*uy,
			size: size,
			dir:  dir,
			bold: f.bold,
		}
		gl.text, gl.space = cleanGlyph(text)
		if gl.text == "" && !gl.space {
			continue
		}
		if len(w.glyphs) >= maxGlyphsPerPage {
			panic(errPageLimit)
		}
		w.glyphs = append(w.glyphs, gl)
	}
	return tm
}

// cleanGlyph drops control characters and undecodable glyphs; whitespace is
// reported as a space.
func cleanGlyph(s string) (string, bool) {
	allSpace := true
	clean := true
	for _, r := range s {
		if !unicode.IsSpace(r) {
			allSpace = false
		}
		if r == utf8.RuneError || r == 0 || unicode.IsControl(r) || r == 0xfeff {
			clean = false
		}
	}
	if allSpace {
		return "", true
	}
	if clean {
		return s, false
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || r == 0 || unicode.IsControl(r) || r == 0xfeff {
			return -1
		}
		return r
	}, s), false
}

// Layout tuning, as fractions of the font size.
const (
	wordGap      = 0.18 // a gap wider than this between glyphs is a word break
	sameLineDY   = 0.5  // baselines closer than this are one line (sub/superscripts)
	lineBackstep = 1.0  // moving left by more than this starts a new line
)

type pdfLine struct {
	text      strings.Builder
	x0, y     float64
	size      float64
	dir       int8
	chars     int
	boldChars int
	lastX     float64
	lastEX    float64
	lastText  string
	lastSpace bool
}

// buildLines groups glyphs (in content order) into lines and inserts spaces
// from the geometry.
func buildLines(glyphs []glyph) []*pdfLine {
	var lines []*pdfLine
	var cur *pdfLine
	for i := range glyphs {
		g := &glyphs[i]
		if cur != nil && g.dir == cur.dir {
			size := math.Max(g.size, cur.size)
			dy := math.Abs(g.y - cur.y)
			if dy <= sameLineDY*size && g.x >= cur.lastEX-lineBackstep*size {
				if g.space {
					cur.lastSpace = true
					continue
				}
				// the same glyph drawn again on top (fake bold, shadows)
				if g.text == cur.lastText && math.Abs(g.x-cur.lastX) < 0.2*size && dy < 0.2*size {
					continue
				}
				gap := g.x - cur.lastEX
				if (cur.lastSpace || gap > wordGap*math.Min(g.size, cur.size)) && cur.chars > 0 {
					cur.text.WriteByte(' ')
				}
				cur.add(g)
				continue
			}
		}
		if g.space {
			continue // leading space of a line
		}
		cur = &pdfLine{x0: g.x, y: g.y, size: g.size, dir: g.dir}
		cur.add(g)
		lines = append(lines, cur)
	}
	return lines
}

func (l *pdfLine) add(g *glyph) {
	l.text.WriteString(g.text)
	n := utf8.RuneCountInString(g.text)
	l.chars += n
	if g.bold {
		l.boldChars += n
	}
	if g.size > l.size {
		l.size = g.size
	}
	l.lastX, l.lastEX, l.lastText, l.lastSpace = g.x, g.ex, g.text, false
}

type pdfPara struct {
	text  string
	size  float64
	bold  bool
	lines int
	list  bool
	page  int
}

// buildParagraphs joins lines into paragraphs using line gaps, font size,
// weight and bullets.
func buildParagraphs(lines []*pdfLine, page int) []pdfPara {
	if len(lines) == 0 {
		return nil
	}
	// typical baseline distance between consecutive lines of the same size
	var gaps []float64
	for i := 1; i < len(lines); i++ {
		a, b := lines[i-1], lines[i]
		dy := a.y - b.y
		if a.dir == b.dir && sameSize(a.size, b.size) && dy > 0 && dy < 3*a.size {
			gaps = append(gaps, dy/a.size)
		}
	}
	typical := 1.2
	if len(gaps) > 0 {
		typical = median(gaps)
	}
	var paras []pdfPara
	var sb strings.Builder
	var cur *pdfPara
	flush := func() {
		if cur != nil {
			cur.text = sb.String()
			paras = append(paras, *cur)
		}
		sb.Reset()
		cur = nil
	}
	for i, l := range lines {
		text := strings.TrimSpace(l.text.String())
		if text == "" {
			continue
		}
		bold := l.boldChars*2 > l.chars
		brk := cur == nil
		if !brk {
			prev := lines[i-1]
			dy := prev.y - l.y
			switch {
			case l.dir != prev.dir, !sameSize(l.size, cur.size), bold != cur.bold:
				brk = true
			case dy <= 0, dy > 3*l.size: // moved up (new column) or far down
				brk = true
			case dy/l.size > typical*1.3+0.1:
				brk = true
			case isBullet(text):
				brk = true
			}
		}
		if brk {
			flush()
			cur = &pdfPara{size: l.size, bold: bold, page: page, list: isBullet(text)}
		} else {
			joinLine(&sb)
		}
		sb.WriteString(text)
		cur.lines++
	}
	flush()
	return paras
}

// joinLine prepares the builder for the next line of the same paragraph:
// a word hyphenated across lines is joined at a lineBreakHyphen (which
// resolveHyphens turns into nothing or a hyphen), otherwise a space is added.
func joinLine(sb *strings.Builder) {
	s := sb.String()
	if n := len(s); n >= 2 && s[n-1] == '-' {
		r, _ := utf8.DecodeLastRuneInString(s[:n-1])
		if unicode.IsLower(r) {
			// "exam-" + "ple": "exam\x1fple"
			sb.Reset()
			sb.WriteString(s[:n-1])
			sb.WriteByte(lineBreakHyphen)
			return
		}
	}
	sb.WriteByte(' ')
}

func sameSize(a, b float64) bool {
	return math.Abs(a-b) <= math.Max(0.6, 0.08*math.Max(a, b))
}

func isBullet(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	switch r {
	case '•', '◦', '▪', '▫', '■', '□', '●', '○', '‣', '⁃', '∙', '·', '–', '—', '\uf0b7', '\uf0a7':
		return true
	case '-', '*':
		return len(s) > n && s[n] == ' '
	}
	// "1." "2)" "a)" "(iv)"
	i := 0
	for i < len(s) && i < 4 && (s[i] >= '0' && s[i] <= '9') {
		i++
	}
	if i > 0 && i < len(s)-1 && (s[i] == '.' || s[i] == ')') && s[i+1] == ' ' {
		return true
	}
	return false
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
