// Package chunk splits extracted documents into token-bounded, overlapping
// chunks for embedding, and hashes files so that re-ingesting an unchanged
// file can be skipped.
//
// Splitting is structure-aware and recursive:
//
//   - The document is cut into top-level sections (at the headings of the
//     highest level it uses). A chunk never spans two top-level sections and
//     overlap is never carried across one.
//   - Within a section whole blocks are packed greedily. A sub-section that
//     would not fit in what is left of a chunk starts a new chunk, and a chunk
//     never ends with a dangling heading.
//   - A block too large for a chunk is split at paragraph, then line, then
//     sentence, then word, then grapheme boundaries: only as deep as needed.
//   - Each chunk after the first in a section starts with the last
//     OverlapTokens of the previous chunk, cut at sentence or word boundaries.
//
// Token counts come from the Tokenizer and every chunk's Tokens is the real
// count of its Text: no chunk exceeds MaxTokens. The output is deterministic.
package chunk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aiforge/aiforge/pkg/vectorstore"
	"github.com/aiforge/aiforge/services/ingest/extract"
)

// Defaults follow OpenAI's file-search "auto" chunking strategy.
const (
	DefaultMaxTokens     = 800
	DefaultOverlapTokens = 400
	// MinMaxTokens is the smallest MaxTokens accepted: one Unicode scalar is
	// at most 4 BPE tokens, so any text can be split under it.
	MinMaxTokens = 16
	MaxMaxTokens = 1 << 16
)

// Options configure Split. The zero value is the "auto" strategy: 800 tokens
// per chunk, 400 tokens overlap. Setting MaxTokens selects the "static"
// strategy, where OverlapTokens is taken as given (0 means no overlap) and
// must not exceed MaxTokens/2.
type Options struct {
	MaxTokens     int
	OverlapTokens int
}

// Normalize applies the defaults and validates the options.
func (o Options) Normalize() (Options, error) {
	if o.MaxTokens == 0 && o.OverlapTokens == 0 {
		return Options{MaxTokens: DefaultMaxTokens, OverlapTokens: DefaultOverlapTokens}, nil
	}
	if o.MaxTokens < MinMaxTokens || o.MaxTokens > MaxMaxTokens {
		return o, fmt.Errorf("chunk: MaxTokens %d out of range [%d, %d]", o.MaxTokens, MinMaxTokens, MaxMaxTokens)
	}
	if o.OverlapTokens < 0 || o.OverlapTokens > o.MaxTokens/2 {
		return o, fmt.Errorf("chunk: OverlapTokens %d out of range [0, MaxTokens/2 = %d]", o.OverlapTokens, o.MaxTokens/2)
	}
	return o, nil
}

// Chunk is one piece of a document ready for embedding.
type Chunk struct {
	Index       int      // position in the document, from 0
	Text        string   // the chunk text, overlap included, with a vectorstore.PageBreak where a further page starts
	Tokens      int      // token count of Text by the tokenizer used
	Pages       []int    // distinct, sorted pages the text came from (PDF); empty otherwise
	HeadingPath []string // heading path of the chunk's first block (its first new block when it starts with overlap)
	Hash        string   // sha256 (hex) of Text
}

// unit is an atomic span of text for packing.
type unit struct {
	text    string
	sep     string // separator before this unit when it follows another
	tokens  int
	level   int // split level the unit was produced at
	block   int // index of the source block
	page    int
	heading int // heading level when the unit is a whole heading block, else 0
	path    []string
	// subTokens: for a heading unit, the tokens of its whole sub-section
	subTokens int
}

// Split chunks a document. An empty document yields no chunks. It is linear
// in the document's size and returns ctx's error once ctx is done.
func Split(ctx context.Context, doc *extract.Document, opt Options, tok Tokenizer) ([]Chunk, error) {
	if doc == nil {
		return nil, errors.New("chunk: nil document")
	}
	if tok == nil {
		return nil, errors.New("chunk: nil tokenizer")
	}
	opt, err := opt.Normalize()
	if err != nil {
		return nil, err
	}
	s := &splitter{ctx: ctx, opt: opt, tok: tok, pieceMax: opt.MaxTokens - opt.OverlapTokens}
	var chunks []Chunk
	for _, sec := range sections(doc.Blocks) {
		units := s.units(doc.Blocks, sec)
		if s.err != nil {
			return nil, s.err
		}
		chunks = s.pack(units, chunks)
		if s.err != nil {
			return nil, s.err
		}
	}
	return chunks, nil
}

type splitter struct {
	ctx      context.Context
	err      error // ctx's error, once seen
	steps    int   // work done since ctx was last checked
	opt      Options
	tok      Tokenizer
	pieceMax int // largest unit: fits after a full overlap
}

// stopped reports whether the split must end; it checks ctx every 256 steps.
func (s *splitter) stopped() bool {
	if s.err != nil {
		return true
	}
	if s.steps++; s.steps%256 == 0 {
		s.err = s.ctx.Err()
	}
	return s.err != nil
}

// sections returns [start, end) block ranges of the top-level sections: cut
// at every heading of the smallest level present.
func sections(blocks []extract.Block) [][2]int {
	top := 0
	for _, b := range blocks {
		if b.Kind == extract.KindHeading && b.Level > 0 && (top == 0 || b.Level < top) {
			top = b.Level
		}
	}
	var out [][2]int
	start := 0
	for i, b := range blocks {
		if i > start && b.Kind == extract.KindHeading && b.Level == top {
			out = append(out, [2]int{start, i})
			start = i
		}
	}
	if start < len(blocks) {
		out = append(out, [2]int{start, len(blocks)})
	}
	return out
}

func sepFor(i, start int) string {
	if i == start {
		return ""
	}
	return "\n\n"
}

// units turns a section's blocks into packing units, splitting blocks that
// are too large.
func (s *splitter) units(blocks []extract.Block, sec [2]int) []unit {
	var out []unit
	for i := sec[0]; i < sec[1]; i++ {
		b := blocks[i]
		text := strings.TrimSpace(strings.ToValidUTF8(b.Text, "\uFFFD"))
		if text == "" {
			continue
		}
		base := unit{block: i, page: b.Page, path: b.HeadingPath, sep: sepFor(len(out), 0)}
		if b.Kind == extract.KindHeading {
			base.heading = max(1, b.Level)
		}
		out = s.explode(out, text, levelBlock, base)
	}
	// sub-section sizes for heading units
	for i := range out {
		if out[i].heading == 0 {
			continue
		}
		total := 0
		for j := i; j < len(out); j++ {
			if j > i && out[j].heading > 0 && out[j].heading <= out[i].heading {
				break
			}
			total += out[j].tokens + 1
		}
		out[i].subTokens = total
	}
	return out
}

// explode appends text as one unit if it fits in pieceMax tokens, otherwise
// splits it at the next level that yields several pieces, recursively.
func (s *splitter) explode(out []unit, text string, level int, base unit) []unit {
	if s.stopped() {
		return out
	}
	n := s.tok.Count(text)
	if n <= s.pieceMax || level >= levelRune {
		u := base
		u.text, u.tokens, u.level = text, n, level
		return append(out, u)
	}
	for lvl := level + 1; lvl <= levelRune; lvl++ {
		pieces := splitAt(text, lvl)
		if len(pieces) < 2 {
			continue
		}
		for k, p := range pieces {
			b := base
			if k > 0 {
				b.sep = p.sep
				b.heading = 0 // only the first piece of a split heading counts as its start
			}
			out = s.explode(out, p.text, lvl, b)
		}
		return out
	}
	u := base
	u.text, u.tokens, u.level = text, n, levelRune
	return append(out, u)
}

// building is a chunk under construction.
type building struct {
	units   []unit
	overlap int // number of leading units carried over from the previous chunk
	est     int // estimated tokens
}

func joinCost(u unit, first bool) int {
	if first {
		return u.tokens
	}
	if u.sep == "\n\n" || u.sep == "\n" {
		return u.tokens + 1
	}
	return u.tokens
}

func (b *building) add(u unit) {
	b.est += joinCost(u, len(b.units) == 0)
	b.units = append(b.units, u)
}

func (b *building) recompute() {
	b.est = 0
	for i, u := range b.units {
		b.est += joinCost(u, i == 0)
	}
}

// render joins units into a chunk's text, with a page break
// (vectorstore.PageBreak) before the separator of each unit that starts a
// further page.
func render(units []unit) string {
	var sb strings.Builder
	for i, u := range units {
		if i > 0 {
			if p := units[i-1].page; u.page > 0 && p > 0 && u.page != p {
				sb.WriteString(vectorstore.PageBreak)
			}
			sb.WriteString(u.sep)
		}
		sb.WriteString(u.text)
	}
	return sb.String()
}

// pack packs one section's units into chunks appended to out.
func (s *splitter) pack(units []unit, out []Chunk) []Chunk {
	limit := s.opt.MaxTokens
	var prev []unit // units of the previous chunk in this section
	prevTokens := 0
	for i := 0; i < len(units); {
		if s.stopped() {
			return out
		}
		var b building
		// overlap continues the previous chunk; a chunk that opens a
		// sub-section starts clean
		if prev != nil && units[i].heading == 0 {
			ov := s.overlap(prev, min(s.opt.OverlapTokens, prevTokens/2))
			for _, u := range ov {
				b.add(u)
			}
			b.overlap = len(ov)
		}
		start := i
		for i < len(units) {
			u := units[i]
			cost := joinCost(u, len(b.units) == 0)
			if len(b.units) > b.overlap {
				if b.est+cost > limit {
					break
				}
				// a sub-section that will not fit in what is left starts a new chunk
				if u.heading > 0 && u.subTokens > limit-b.est {
					break
				}
			} else {
				// first new unit: make room by dropping overlap from the front
				for b.est+cost > limit && b.overlap > 0 {
					b.units, b.overlap = b.units[1:], b.overlap-1
					if len(b.units) > 0 {
						b.units[0].sep = ""
					}
					b.recompute()
					cost = joinCost(u, len(b.units) == 0)
				}
			}
			b.add(u)
			i++
		}
		// never end on a dangling heading: leave trailing headings for the next chunk
		for n := len(b.units); n-b.overlap > 1 && b.units[n-1].heading > 0 && i < len(units); n = len(b.units) {
			b.units = b.units[:n-1]
			i--
		}
		// enforce the limit on the real count
		text := render(b.units)
		tokens := s.tok.Count(text)
	shrink:
		for tokens > limit {
			switch {
			case len(b.units)-b.overlap > 1:
				b.units = b.units[:len(b.units)-1]
				i--
			case b.overlap > 0:
				b.units, b.overlap = b.units[1:], b.overlap-1
				b.units[0].sep = ""
			default:
				// cannot happen: a lone unit holds at most pieceMax tokens
				break shrink
			}
			text = render(b.units)
			tokens = s.tok.Count(text)
		}
		if i == start { // no progress is impossible, but never loop forever
			i++
		}
		out = append(out, s.makeChunk(len(out), b, text, tokens))
		prev, prevTokens = b.units, tokens
	}
	return out
}

// overlap returns the tail of the previous chunk's units holding at most
// budget tokens, split at sentence or word boundaries where a whole unit is
// too large.
func (s *splitter) overlap(prev []unit, budget int) []unit {
	if budget <= 0 || len(prev) == 0 {
		return nil
	}
	var tail []unit
	used := 0
	for k := len(prev) - 1; k >= 0; k-- {
		u := prev[k]
		cost := u.tokens + 1
		if used+cost <= budget {
			tail = append(tail, u)
			used += cost
			continue
		}
		// take the end of this unit at a finer level
		tail = append(tail, s.tailOf(u, budget-used)...)
		break
	}
	slices.Reverse(tail)
	if len(tail) > 0 {
		tail[0].sep = ""
	}
	for i := range tail {
		tail[i].heading, tail[i].subTokens = 0, 0
	}
	return tail
}

// tailOf returns the last pieces of u fitting in budget tokens (reversed
// order), splitting u at sentence, then word, then grapheme level.
func (s *splitter) tailOf(u unit, budget int) []unit {
	if budget <= 0 {
		return nil
	}
	// overlap is cut at sentence or word boundaries; text without spaces
	// (CJK without terminators, long tokens) at grapheme clusters
	finest := levelWord
	if u.level >= levelGraphemeRun {
		finest = levelGrapheme
	}
	for lvl := max(u.level+1, levelSentence); lvl <= finest; lvl++ {
		pieces := splitAt(u.text, lvl)
		if len(pieces) < 2 {
			continue
		}
		var tail []unit
		used := 0
		for k := len(pieces) - 1; k >= 0; k-- {
			p := pieces[k]
			n := s.tok.Count(p.text)
			if used+n+1 > budget {
				break
			}
			v := u
			v.text, v.sep, v.tokens, v.level = p.text, p.sep, n, lvl
			tail = append(tail, v)
			used += n + 1
		}
		if len(tail) > 0 {
			return tail
		}
		// even the last piece is too large: go one level finer
	}
	return nil
}

func (s *splitter) makeChunk(index int, b building, text string, tokens int) Chunk {
	var pages []int
	for _, u := range b.units {
		if u.page > 0 && !slices.Contains(pages, u.page) {
			pages = append(pages, u.page)
		}
	}
	slices.Sort(pages)
	first := b.units[0]
	if b.overlap < len(b.units) {
		first = b.units[b.overlap]
	}
	return Chunk{
		Index:       index,
		Text:        text,
		Tokens:      tokens,
		Pages:       pages,
		HeadingPath: slices.Clone(first.path),
		Hash:        hashText(text),
	}
}
