package pdf

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/ascii85"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"github.com/aiforge/aiforge/services/ingest/extract/internal/textdoc"
)

// The PDF reader (ledongthuc/pdf) decompresses streams and reads tokens of
// any size: a 2 KB file holding a 1 GiB string behind two FlateDecode
// filters took the process to 3.5 GB. It cannot be told to stop, so before
// it sees a file, prescan reads the file once with limits of its own:
//
//   - every stream the reader may decompress (all but images, font
//     programs, colour profiles, embedded files and metadata, which text
//     extraction never reads) is decompressed through its filter chain
//     (FlateDecode, ASCII85Decode; at most maxFilters of them), counting
//     the bytes of each stream and of the whole document;
//   - the file's objects and every decompressed stream but cross-reference
//     streams are tokenised with bounds on the size of one string and of
//     one other token (name, number, operator), on the nesting of arrays
//     and dictionaries and on the elements of one array or dictionary.
//
// The first limit broken fails the file with a *textdoc.LimitError naming
// it. prescan is linear in the decompressed size (which it bounds), holds
// one 32 KiB buffer per filter, and checks ctx every 32 KiB.
//
// prescan finds a stream's data by its /Length (direct, or an indirect
// integer object stored outside object streams), else up to the next
// "endstream". A file that hides a stream from it (a stream marked as an
// image but used as page content, say) still meets the memory, CPU and time
// limits of the parser's child process (services/ingest).

// Limits bound what prescan accepts. The zero value of a field selects its
// default (DefaultLimits).
type Limits struct {
	MaxStreamBytes   int64 // decompressed bytes of one stream
	MaxDocumentBytes int64 // decompressed bytes of all streams of the file
	MaxStringBytes   int64 // bytes of one string literal or hex string
	MaxTokenBytes    int64 // bytes of one name, number or operator
	MaxNesting       int64 // arrays and dictionaries nested in one another
	MaxElements      int64 // elements of one array, or keys and values of one dictionary
}

// DefaultLimits are the limits prescan applies by default: far above what a
// 20,000-page text document needs, far below what hurts.
var DefaultLimits = Limits{
	MaxStreamBytes:   128 << 20,
	MaxDocumentBytes: 1 << 30,
	MaxStringBytes:   4 << 20,
	MaxTokenBytes:    64 << 10,
	MaxNesting:       256,
	MaxElements:      1 << 20,
}

// maxFilters bounds one stream's filter chain.
const maxFilters = 8

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxStreamBytes > 0 {
		d.MaxStreamBytes = l.MaxStreamBytes
	}
	if l.MaxDocumentBytes > 0 {
		d.MaxDocumentBytes = l.MaxDocumentBytes
	}
	if l.MaxStringBytes > 0 {
		d.MaxStringBytes = l.MaxStringBytes
	}
	if l.MaxTokenBytes > 0 {
		d.MaxTokenBytes = l.MaxTokenBytes
	}
	if l.MaxNesting > 0 {
		d.MaxNesting = l.MaxNesting
	}
	if l.MaxElements > 0 {
		d.MaxElements = l.MaxElements
	}
	return d
}

const scanBuf = 32 << 10

// Lexer states.
const (
	stSpace = iota
	stComment
	stString
	stHex
	stToken
	stLT // after "<": a dictionary or a hex string
	stGT // after ">": maybe ">>"
)

// lexer tokenises PDF syntax fed to it in pieces, enforcing the token,
// string, nesting and element limits. It records just enough of the
// dictionary it is in to find streams (see scanner).
type lexer struct {
	lim     *Limits
	where   string // "file" or "stream" (for the message)
	state   int
	n       int64 // bytes of the current token or string
	depth   int   // string paren depth
	esc     bool
	tok     []byte // current token, up to 32 bytes (enough for the keywords and names prescan reads)
	stack   []int64
	onToken func(kind byte, tok []byte) // kind: 'n' name, 'k' keyword/number, 's' string, '[' ']' '<' '>' delimiters
	stop    bool                        // set by onToken: feed returns after this token
	// inline image data after ID: skipped up to "EI"
	inImage bool
	imgTail [3]byte
}

func isWS(c byte) bool {
	switch c {
	case 0, '\t', '\n', '\f', '\r', ' ':
		return true
	}
	return false
}

func isDelim(c byte) bool {
	switch c {
	case '(', ')', '<', '>', '[', ']', '{', '}', '/', '%':
		return true
	}
	return false
}

func (lx *lexer) limit(name string, max int64, detail string) error {
	return textdoc.Limit(name, max, detail+" in the PDF's "+lx.where)
}

func (lx *lexer) element() error {
	if k := len(lx.stack); k > 0 {
		if lx.stack[k-1]++; lx.stack[k-1] > lx.lim.MaxElements {
			return lx.limit("pdf.max_elements", lx.lim.MaxElements, "an array or dictionary with more elements")
		}
	}
	return nil
}

func (lx *lexer) open() error {
	if err := lx.element(); err != nil {
		return err
	}
	if int64(len(lx.stack)) >= lx.lim.MaxNesting {
		return lx.limit("pdf.max_nesting_depth", lx.lim.MaxNesting, "arrays or dictionaries nested deeper")
	}
	lx.stack = append(lx.stack, 0)
	return nil
}

func (lx *lexer) close() {
	if k := len(lx.stack); k > 0 {
		lx.stack = lx.stack[:k-1]
	}
}

func (lx *lexer) endToken() error {
	if lx.state != stToken {
		return nil
	}
	lx.state = stSpace
	if err := lx.element(); err != nil {
		return err
	}
	if string(lx.tok) == "ID" {
		lx.inImage = true
		lx.imgTail = [3]byte{}
	}
	kind := byte('k')
	if len(lx.tok) > 0 && lx.tok[0] == '/' {
		kind = 'n'
	}
	lx.emit(kind, lx.tok)
	return nil
}

func (lx *lexer) addTok(c byte) error {
	if lx.n++; lx.n > lx.lim.MaxTokenBytes {
		return lx.limit("pdf.max_token_bytes", lx.lim.MaxTokenBytes, "a longer name, number or operator")
	}
	if len(lx.tok) < 32 {
		lx.tok = append(lx.tok, c)
	}
	return nil
}

// feed lexes p; it may return a *LimitError. It returns the bytes consumed:
// len(p), or fewer when onToken set stop (the byte after the token that did
// is not consumed).
func (lx *lexer) feed(p []byte) (int, error) {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if lx.inImage {
			// inline image data: ends at whitespace "EI" followed by whitespace
			t := lx.imgTail
			if isWS(t[0]) && t[1] == 'E' && t[2] == 'I' && isWS(c) {
				lx.inImage = false
			}
			lx.imgTail = [3]byte{t[1], t[2], c}
			continue
		}
		switch lx.state {
		case stComment:
			if c == '\n' || c == '\r' {
				lx.state = stSpace
			}
			continue
		case stString:
			if lx.n++; lx.n > lx.lim.MaxStringBytes {
				return i, lx.limit("pdf.max_string_bytes", lx.lim.MaxStringBytes, "a longer string")
			}
			switch {
			case lx.esc:
				lx.esc = false
			case c == '\\':
				lx.esc = true
			case c == '(':
				lx.depth++
			case c == ')':
				if lx.depth--; lx.depth == 0 {
					lx.state = stSpace
					lx.emit('s', nil)
				}
			}
			continue
		case stLT:
			if c == '<' {
				lx.state = stSpace
				if err := lx.open(); err != nil {
					return i, err
				}
				lx.emit('<', nil)
				continue
			}
			if err := lx.element(); err != nil {
				return i, err
			}
			lx.state, lx.n = stHex, 0
			fallthrough
		case stHex:
			if c == '>' {
				lx.state = stSpace
				lx.emit('s', nil)
				continue
			}
			if lx.n++; lx.n > 2*lx.lim.MaxStringBytes {
				return i, lx.limit("pdf.max_string_bytes", lx.lim.MaxStringBytes, "a longer hex string")
			}
			continue
		case stGT:
			lx.state = stSpace
			if c == '>' {
				continue
			}
		case stToken:
			if !isWS(c) && !isDelim(c) {
				if err := lx.addTok(c); err != nil {
					return i, err
				}
				continue
			}
			if err := lx.endToken(); err != nil {
				return i, err
			}
			if lx.stop {
				lx.stop = false
				return i, nil
			}
			if lx.inImage {
				continue // the byte after ID belongs to the image data
			}
		}
		// stSpace
		switch {
		case isWS(c):
		case c == '%':
			lx.state = stComment
		case c == '(':
			if err := lx.element(); err != nil {
				return i, err
			}
			lx.state, lx.n, lx.depth, lx.esc = stString, 0, 1, false
		case c == '<':
			lx.state = stLT
		case c == '>':
			lx.state = stGT
			lx.close()
			lx.emit('>', nil)
		case c == '[':
			if err := lx.open(); err != nil {
				return i, err
			}
			lx.emit('[', nil)
		case c == ']':
			lx.close()
			lx.emit(']', nil)
		case c == '{' || c == '}' || c == ')':
		default: // '/' or a regular character
			lx.state, lx.n, lx.tok = stToken, 0, lx.tok[:0]
			if err := lx.addTok(c); err != nil {
				return i, err
			}
		}
	}
	return len(p), nil
}

func (lx *lexer) emit(kind byte, tok []byte) {
	if lx.onToken != nil {
		lx.onToken(kind, tok)
	}
}

// streamInfo is what prescan needs of a stream's dictionary.
type streamInfo struct {
	length    int64 // -1 when unknown
	lengthRef [2]int64
	filters   []string
	skip      bool // never decompressed by text extraction
	xref      bool // cross-reference stream: decompressed, not lexed
	objStm    bool
}

// scanner drives the lexer over the file and the streams it finds.
type scanner struct {
	ctx   context.Context
	lim   Limits
	r     io.ReaderAt
	size  int64
	total int64 // decompressed bytes so far

	// dictionary tracking at depth 1 of the object being read
	depth   int
	key     string
	inArray bool
	vals    map[string][]string
	pend    []string // tokens of the value being read (integers of a possible reference)
}

// prescan checks the whole file against lim; see the comment above.
func prescan(ctx context.Context, r io.ReaderAt, size int64, lim Limits) error {
	s := &scanner{ctx: ctx, lim: lim.withDefaults(), r: r, size: size, vals: map[string][]string{}}
	return s.run()
}

func (s *scanner) run() error {
	lx := &lexer{lim: &s.lim, where: "file"}
	lx.onToken = func(kind byte, tok []byte) {
		if s.track(kind, tok) {
			lx.stop = true
		}
	}
	buf := make([]byte, scanBuf)
	for off := int64(0); off < s.size; {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		n, err := s.r.ReadAt(buf[:min(int64(len(buf)), s.size-off)], off)
		if n == 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			break
		}
		k, err := lx.feed(buf[:n])
		if err != nil {
			return err
		}
		if k == n {
			off += int64(n)
			continue
		}
		// a "stream" keyword ended at off+k: read its data
		end, err := s.stream(off + int64(k))
		if err != nil {
			return err
		}
		lx.state, lx.stack = stSpace, lx.stack[:0]
		s.resetDict()
		off = max(end, off+int64(k)+1)
	}
	return nil
}

func (s *scanner) resetDict() {
	s.depth, s.key, s.inArray, s.pend = 0, "", false, nil
	clear(s.vals)
}

// track follows the top-level dictionary of the object being read; it
// reports a "stream" keyword.
func (s *scanner) track(kind byte, tok []byte) bool {
	switch kind {
	case '<':
		if s.depth == 1 {
			s.flushPend()
			s.key = "" // a dictionary value
		}
		s.depth++
		if s.depth == 1 {
			clear(s.vals)
			s.key, s.pend = "", nil
		}
		return false
	case '>':
		s.flushPend()
		s.depth--
		return false
	case '[':
		if s.depth == 1 {
			s.flushPend()
			s.inArray = s.key != ""
		}
		s.depth++
		return false
	case ']':
		s.depth--
		if s.depth == 1 && s.inArray {
			s.inArray = false
			s.key = ""
		}
		return false
	}
	t := string(tok)
	if s.depth == 0 {
		switch t {
		case "stream":
			return true
		case "obj", "endobj":
			s.resetDict()
		}
		return false
	}
	if s.depth == 2 && s.inArray {
		if kind == 'n' {
			s.vals[s.key] = append(s.vals[s.key], t)
		}
		return false
	}
	if s.depth != 1 {
		return false
	}
	switch {
	case s.key == "" && kind == 'n':
		s.key = t
	case s.key != "" && kind == 'k' && t == "R" && len(s.pend) == 2:
		s.vals[s.key] = []string{s.pend[0], s.pend[1], "R"}
		s.key, s.pend = "", nil
	case s.key != "" && kind == 'k' && len(s.pend) < 2 && isInt(t):
		s.pend = append(s.pend, t)
	case s.key != "" && len(s.pend) > 0 && kind == 'n':
		// the value was a number; this name is the next key
		s.flushPend()
		s.key = t
	case s.key != "":
		s.flushPend()
		if kind == 'n' || kind == 'k' {
			s.vals[s.key] = []string{t}
		}
		s.key = ""
	}
	return false
}

func (s *scanner) flushPend() {
	if s.key != "" && len(s.pend) > 0 {
		s.vals[s.key] = s.pend[:1]
		s.key = ""
	}
	s.pend = nil
}

func isInt(t string) bool {
	_, err := strconv.ParseInt(t, 10, 64)
	return err == nil
}

func (s *scanner) info() streamInfo {
	v := s.vals
	one := func(k string) string {
		if len(v[k]) == 1 {
			return v[k][0]
		}
		return ""
	}
	in := streamInfo{length: -1}
	if l := v["/Length"]; len(l) == 1 {
		in.length, _ = strconv.ParseInt(l[0], 10, 64)
	} else if len(l) == 3 {
		in.lengthRef[0], _ = strconv.ParseInt(l[0], 10, 64)
		in.lengthRef[1], _ = strconv.ParseInt(l[1], 10, 64)
	}
	in.filters = v["/Filter"]
	switch one("/Subtype") {
	case "/Image", "/Type1C", "/CIDFontType0C", "/OpenType", "/XML":
		in.skip = true
	}
	switch one("/Type") {
	case "/EmbeddedFile", "/Metadata":
		in.skip = true
	case "/XRef":
		in.xref = true
	case "/ObjStm":
		in.objStm = true
	}
	if v["/Length1"] != nil || v["/Length2"] != nil || v["/FunctionType"] != nil || (v["/N"] != nil && v["/Alternate"] != nil) {
		in.skip = true
	}
	return in
}

var lengthObjRE = regexp.MustCompile(`^\s*(\d+)\s+endobj`)

// resolveLength finds "id gen obj <int> endobj" in the file (indirect
// /Length values are written so by every producer that writes them).
func (s *scanner) resolveLength(ref [2]int64) int64 {
	if ref[0] <= 0 {
		return -1
	}
	pat := fmt.Appendf(nil, "%d %d obj", ref[0], ref[1])
	buf := make([]byte, scanBuf+len(pat))
	for off := int64(0); off < s.size; off += scanBuf {
		n, _ := s.r.ReadAt(buf, off)
		if n <= 0 {
			break
		}
		b := buf[:n]
		for k := 0; ; {
			i := bytes.Index(b[k:], pat)
			if i < 0 {
				break
			}
			at := off + int64(k+i)
			if at == 0 || isWS(b[k+i-1]) || isDelim(b[k+i-1]) {
				tail := make([]byte, 64)
				m, _ := s.r.ReadAt(tail, at+int64(len(pat)))
				if sm := lengthObjRE.FindSubmatch(tail[:m]); sm != nil {
					l, err := strconv.ParseInt(string(sm[1]), 10, 64)
					if err == nil {
						return l
					}
				}
			}
			k += i + 1
		}
		if err := s.ctx.Err(); err != nil {
			return -1
		}
	}
	return -1
}

// stream checks the stream whose "stream" keyword ends just before at and
// returns the offset where lexing resumes (after its data).
func (s *scanner) stream(at int64) (int64, error) {
	in := s.info()
	// data starts after the end of line following "stream"
	start := at
	var eol [2]byte
	n, _ := s.r.ReadAt(eol[:], start)
	switch {
	case n >= 1 && eol[0] == '\n':
		start++
	case n == 2 && eol[0] == '\r' && eol[1] == '\n':
		start += 2
	case n >= 1 && eol[0] == '\r':
		start++
	}
	length := in.length
	if length < 0 && in.lengthRef[0] > 0 {
		length = s.resolveLength(in.lengthRef)
	}
	end := int64(-1)
	if length >= 0 && start+length <= s.size && s.endstreamAt(start+length) {
		end = start + length
	}
	if end < 0 {
		end = s.findEndstream(start)
	}
	resume := end
	if in.skip {
		return resume, nil
	}
	if len(in.filters) > maxFilters {
		return 0, textdoc.Limit("pdf.max_filters", maxFilters, "a stream with more filters")
	}
	var rd io.Reader = io.NewSectionReader(s.r, start, end-start)
	for _, f := range in.filters {
		switch f {
		case "/FlateDecode", "/Fl":
			zr, err := zlib.NewReader(rd)
			if err != nil {
				return resume, nil // the reader will fail on it, not us
			}
			rd = zr
		case "/ASCII85Decode", "/A85":
			rd = ascii85.NewDecoder(&a85Clean{r: rd})
		default:
			return resume, nil // a filter the reader cannot decode: it never reads this stream
		}
	}
	var lx *lexer
	if !in.xref {
		lx = &lexer{lim: &s.lim, where: "streams"}
	}
	buf := make([]byte, scanBuf)
	var got int64
	for {
		if err := s.ctx.Err(); err != nil {
			return 0, err
		}
		n, err := rd.Read(buf)
		if n > 0 {
			got += int64(n)
			s.total += int64(n)
			if got > s.lim.MaxStreamBytes {
				return 0, textdoc.Limit("pdf.max_stream_bytes", s.lim.MaxStreamBytes, "a stream that decompresses to more bytes (a decompression bomb?)")
			}
			if s.total > s.lim.MaxDocumentBytes {
				return 0, textdoc.Limit("pdf.max_document_bytes", s.lim.MaxDocumentBytes, "streams that decompress to more bytes in all")
			}
			if lx != nil {
				if _, err := lx.feed(buf[:n]); err != nil {
					return 0, err
				}
			}
		}
		if err != nil {
			// io.EOF, or corrupt data the reader will report (or not read)
			return resume, nil
		}
	}
}

func (s *scanner) endstreamAt(off int64) bool {
	var b [12]byte
	n, _ := s.r.ReadAt(b[:], off)
	t := bytes.TrimLeft(b[:n], "\r\n \t")
	return bytes.HasPrefix(t, []byte("endstream"))
}

func (s *scanner) findEndstream(from int64) int64 {
	pat := []byte("endstream")
	buf := make([]byte, scanBuf+len(pat))
	for off := from; off < s.size; off += scanBuf {
		n, _ := s.r.ReadAt(buf, off)
		if n <= 0 {
			break
		}
		if i := bytes.Index(buf[:n], pat); i >= 0 {
			return off + int64(i)
		}
	}
	return s.size
}

// a85Clean drops whitespace and stops at "~>" for encoding/ascii85.
type a85Clean struct {
	r    io.Reader
	done bool
}

func (a *a85Clean) Read(p []byte) (int, error) {
	if a.done {
		return 0, io.EOF
	}
	n, err := a.r.Read(p)
	w := 0
	for i := 0; i < n; i++ {
		c := p[i]
		if c == '~' {
			a.done = true
			return w, nil
		}
		if !isWS(c) {
			p[w] = c
			w++
		}
	}
	return w, err
}
