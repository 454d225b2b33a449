package chunk

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/aiforge/aiforge/pkg/vectorstore"
	"github.com/aiforge/aiforge/services/ingest/extract"
)

func mustTok(t testing.TB) Tokenizer {
	t.Helper()
	tok, err := NewTiktoken()
	if err != nil {
		t.Fatalf("tokenizer: %v", err)
	}
	return tok
}

var words = strings.Fields(`platform tenants budget quota ledger replay engine worker router
admission stream consumer durable subject envelope retriever embedder vector sparse dense
citation chunk overlap heading section paragraph sentence boundary token encoder decoder`)

func sentenceN(seed, n int) string {
	var w []string
	for i := range n {
		w = append(w, words[(seed*11+i*7)%len(words)])
	}
	s := strings.Join(w, " ")
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

func paragraphN(seed, sentences int) string {
	var s []string
	for i := range sentences {
		s = append(s, sentenceN(seed*17+i, 6+(seed+i)%11))
	}
	return strings.Join(s, " ")
}

func heading(level int, text string, path []string, page int) extract.Block {
	return extract.Block{Kind: extract.KindHeading, Level: level, Text: text, HeadingPath: path, Page: page}
}

func para(text string, path []string, page int) extract.Block {
	return extract.Block{Kind: extract.KindParagraph, Text: text, HeadingPath: path, Page: page}
}

// bigDoc: two top-level sections with sub-sections and paragraphs over pages.
func bigDoc() *extract.Document {
	var blocks []extract.Block
	page := 1
	for h1 := 1; h1 <= 2; h1++ {
		t1 := fmt.Sprintf("Part %d", h1)
		blocks = append(blocks, heading(1, t1, []string{t1}, page))
		for h2 := 1; h2 <= 3; h2++ {
			t2 := fmt.Sprintf("Topic %d.%d", h1, h2)
			p2 := []string{t1, t2}
			blocks = append(blocks, heading(2, t2, p2, page))
			for k := range 4 {
				blocks = append(blocks, para(paragraphN(h1*100+h2*10+k, 5+k), p2, page))
				if k%2 == 1 {
					page++
				}
			}
		}
	}
	return &extract.Document{Blocks: blocks, Pages: page, Format: extract.FormatPDF}
}

func checkInvariants(t *testing.T, chunks []Chunk, opt Options, tok Tokenizer) {
	t.Helper()
	opt, _ = opt.Normalize()
	for i, c := range chunks {
		if c.Index != i {
			t.Errorf("chunk %d has index %d", i, c.Index)
		}
		if n := tok.Count(c.Text); n != c.Tokens {
			t.Errorf("chunk %d: Tokens %d but text counts %d", i, c.Tokens, n)
		}
		if c.Tokens > opt.MaxTokens {
			t.Errorf("chunk %d: %d tokens > max %d", i, c.Tokens, opt.MaxTokens)
		}
		if c.Tokens == 0 || strings.TrimSpace(c.Text) != c.Text {
			t.Errorf("chunk %d: empty or untrimmed text %q", i, c.Text)
		}
		if !utf8.ValidString(c.Text) {
			t.Errorf("chunk %d: invalid UTF-8", i)
		}
		if c.Hash != hashText(c.Text) || len(c.Hash) != 64 {
			t.Errorf("chunk %d: bad hash", i)
		}
		if !slices.IsSorted(c.Pages) || len(slices.Compact(slices.Clone(c.Pages))) != len(c.Pages) {
			t.Errorf("chunk %d: pages %v not distinct and sorted", i, c.Pages)
		}
	}
}

// overlapLen returns the longest prefix of next that is a suffix of prev.
func overlapLen(prev, next string) int {
	for k := min(len(prev), len(next)); k > 0; k-- {
		if strings.HasSuffix(prev, next[:k]) {
			return k
		}
	}
	return 0
}

func TestNoChunkExceedsMaxTokens(t *testing.T) {
	tok := mustTok(t)
	for _, opt := range []Options{{}, {MaxTokens: 200, OverlapTokens: 100}, {MaxTokens: 64}, {MaxTokens: 100, OverlapTokens: 20}, {MaxTokens: 16, OverlapTokens: 8}} {
		t.Run(fmt.Sprintf("%d-%d", opt.MaxTokens, opt.OverlapTokens), func(t *testing.T) {
			chunks, err := Split(context.Background(), bigDoc(), opt, tok)
			if err != nil {
				t.Fatal(err)
			}
			if len(chunks) < 2 {
				t.Fatalf("only %d chunks", len(chunks))
			}
			checkInvariants(t, chunks, opt, tok)
		})
	}
}

func TestOverlapBetweenConsecutiveChunks(t *testing.T) {
	tok := mustTok(t)
	var text []string
	for i := range 12 {
		text = append(text, paragraphN(i, 8))
	}
	doc := &extract.Document{Blocks: []extract.Block{
		heading(1, "Only", []string{"Only"}, 0),
		para(strings.Join(text, " "), []string{"Only"}, 0),
	}}
	opt := Options{MaxTokens: 200, OverlapTokens: 80}
	chunks, err := Split(context.Background(), doc, opt, tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 4 {
		t.Fatalf("got %d chunks", len(chunks))
	}
	checkInvariants(t, chunks, opt, tok)
	for i := 1; i < len(chunks); i++ {
		k := overlapLen(chunks[i-1].Text, chunks[i].Text)
		ov := tok.Count(chunks[i].Text[:k])
		if ov < opt.OverlapTokens/4 || ov > opt.OverlapTokens+1 {
			t.Errorf("chunks %d->%d: overlap of %d tokens (%q)", i-1, i, ov, chunks[i].Text[:k])
		}
		// overlap starts at a sentence or word boundary
		if k > 0 && k < len(chunks[i-1].Text) {
			before := chunks[i-1].Text[len(chunks[i-1].Text)-k-1]
			if before != ' ' && before != '\n' {
				t.Errorf("chunk %d overlap starts mid-word: %q", i, chunks[i].Text[:min(k, 40)])
			}
		}
		// and the chunk then moves on: it is not the previous one again
		if len(chunks[i].Text) <= k {
			t.Errorf("chunk %d adds nothing new", i)
		}
	}
	// the default options overlap too
	chunks, err = Split(context.Background(), doc, Options{}, tok)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(chunks); i++ {
		if k := overlapLen(chunks[i-1].Text, chunks[i].Text); tok.Count(chunks[i].Text[:k]) < 100 {
			t.Errorf("default options: chunk %d overlap only %d bytes", i, k)
		}
	}
}

func TestTopLevelHeadingBoundaryRespected(t *testing.T) {
	tok := mustTok(t)
	// two small top-level sections that would fit together in one chunk
	doc := &extract.Document{Blocks: []extract.Block{
		heading(1, "Alpha", []string{"Alpha"}, 1),
		para("Alpha body text about engines.", []string{"Alpha"}, 1),
		heading(1, "Beta", []string{"Beta"}, 2),
		para("Beta body text about routers.", []string{"Beta"}, 2),
	}}
	chunks, err := Split(context.Background(), doc, Options{}, tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 2 {
		t.Fatalf("got %d chunks: %+v", len(chunks), chunks)
	}
	if chunks[0].Text != "Alpha\n\nAlpha body text about engines." || !slices.Equal(chunks[0].HeadingPath, []string{"Alpha"}) || !slices.Equal(chunks[0].Pages, []int{1}) {
		t.Errorf("chunk 0 = %+v", chunks[0])
	}
	if chunks[1].Text != "Beta\n\nBeta body text about routers." || !slices.Equal(chunks[1].HeadingPath, []string{"Beta"}) || !slices.Equal(chunks[1].Pages, []int{2}) {
		t.Errorf("chunk 1 = %+v", chunks[1])
	}

	// large sections: no chunk mixes the parts, and no overlap crosses them
	opt := Options{MaxTokens: 300, OverlapTokens: 100}
	chunks, err = Split(context.Background(), bigDoc(), opt, tok)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, chunks, opt, tok)
	part2 := -1
	for i, c := range chunks {
		has1, has2 := strings.Contains(c.Text, "Part 1"), strings.Contains(c.Text, "Part 2")
		if has1 && has2 {
			t.Errorf("chunk %d spans both parts", i)
		}
		if has2 && part2 < 0 {
			part2 = i
		}
		if c.HeadingPath[0] == "Part 2" && part2 < 0 {
			t.Errorf("chunk %d is in part 2 before its heading", i)
		}
	}
	if part2 < 1 || !strings.HasPrefix(chunks[part2].Text, "Part 2") {
		t.Fatalf("part 2 does not start a chunk: %d", part2)
	}
	// every chunk before part 2 belongs to part 1 and after to part 2
	for i, c := range chunks {
		want := "Part 1"
		if i >= part2 {
			want = "Part 2"
		}
		if c.HeadingPath[0] != want {
			t.Errorf("chunk %d path %q, want under %q", i, c.HeadingPath, want)
		}
	}
	// no chunk ends with a dangling heading
	for i, c := range chunks {
		last := c.Text[strings.LastIndex(c.Text, "\n\n")+1:]
		if strings.HasPrefix(strings.TrimSpace(last), "Topic ") && !strings.Contains(last, ".") {
			t.Errorf("chunk %d ends with heading %q", i, last)
		}
	}
}

func TestLongParagraphWithoutPunctuation(t *testing.T) {
	tok := mustTok(t)
	var w []string
	for i := range 3000 {
		w = append(w, fmt.Sprintf("%s%d", words[i%len(words)], i))
	}
	doc := &extract.Document{Blocks: []extract.Block{para(strings.Join(w, " "), nil, 0)}}
	opt := Options{MaxTokens: 256, OverlapTokens: 64}
	chunks, err := Split(context.Background(), doc, opt, tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 10 {
		t.Fatalf("got %d chunks", len(chunks))
	}
	checkInvariants(t, chunks, opt, tok)
	// every word survives, whole
	seen := map[string]bool{}
	for _, c := range chunks {
		for _, f := range strings.Fields(c.Text) {
			seen[f] = true
		}
	}
	for _, x := range w {
		if !seen[x] {
			t.Fatalf("word %q lost", x)
		}
	}
	if len(seen) != len(w) {
		t.Errorf("words were cut: %d distinct fields for %d words", len(seen), len(w))
	}
}

func TestUnicodeCJKAndEmoji(t *testing.T) {
	tok := mustTok(t)
	// no punctuation, no spaces, not periodic
	han := []rune("人工智能推理平台在本地运行模型并保护数据主权的服务器集群调度")
	rng := rand.New(rand.NewPCG(7, 11))
	var cjkB strings.Builder
	for range 2400 {
		cjkB.WriteRune(han[rng.IntN(len(han))])
	}
	cjk := cjkB.String()
	cjkSentences := strings.Repeat("数据不会离开本地。模型在本地运行！", 80)
	emoji := strings.Repeat("👨‍👩‍👧‍👦🇩🇪👍🏽é̃", 150) // ZWJ family, flag, skin tone, combining marks
	doc := &extract.Document{Blocks: []extract.Block{
		para(cjk, nil, 1), para(cjkSentences, nil, 2), para(emoji, nil, 3),
	}}
	opt := Options{MaxTokens: 64, OverlapTokens: 16}
	chunks, err := Split(context.Background(), doc, opt, tok)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, chunks, opt, tok)
	for i, c := range chunks {
		r, _ := utf8.DecodeRuneInString(c.Text)
		last, _ := utf8.DecodeLastRuneInString(c.Text)
		if r == 0x200D || last == 0x200D || (r >= 0x1F3FB && r <= 0x1F3FF) || r == 0x0303 || r == 0x0301 {
			t.Errorf("chunk %d splits a grapheme cluster: %q ... %q", i, string(r), string(last))
		}
		if strings.Contains(c.Text, "\uFFFD") {
			t.Errorf("chunk %d holds a replacement character", i)
		}
	}
	// all the CJK text is there, in order, once overlap is removed
	only, err := Split(context.Background(), &extract.Document{Blocks: []extract.Block{para(cjk, nil, 1)}}, opt, tok)
	if err != nil {
		t.Fatal(err)
	}
	var rebuilt strings.Builder
	for i, c := range only {
		text := c.Text
		if i > 0 {
			k := overlapLen(only[i-1].Text, text)
			if k == 0 {
				t.Errorf("chunk %d: no overlap in CJK text", i)
			}
			text = text[k:]
		}
		rebuilt.WriteString(text)
	}
	if rebuilt.String() != cjk {
		t.Errorf("CJK text not preserved: %d bytes rebuilt of %d", rebuilt.Len(), len(cjk))
	}
	// sentences split at CJK terminators, not mid-sentence
	for _, c := range chunks {
		if slices.Equal(c.Pages, []int{2}) && !strings.HasSuffix(c.Text, "。") && !strings.HasSuffix(c.Text, "！") {
			t.Errorf("CJK sentence chunk does not end at a terminator: %q", c.Text)
		}
	}
}

func TestDeterministic(t *testing.T) {
	tok := mustTok(t)
	opt := Options{MaxTokens: 150, OverlapTokens: 50}
	first, err := Split(context.Background(), bigDoc(), opt, tok)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([][]Chunk, 4)
	for i := range results {
		wg.Go(func() {
			c, err := Split(context.Background(), bigDoc(), opt, tok)
			if err != nil {
				t.Error(err)
			}
			results[i] = c
		})
	}
	wg.Wait()
	for i, r := range results {
		if !reflect.DeepEqual(first, r) {
			t.Fatalf("run %d differs", i)
		}
	}
}

func TestPagesAndHeadingPaths(t *testing.T) {
	tok := mustTok(t)
	doc := &extract.Document{Blocks: []extract.Block{
		heading(1, "Intro", []string{"Intro"}, 1),
		para("On page one.", []string{"Intro"}, 1),
		para("On page two.", []string{"Intro"}, 2),
		heading(2, "Sub", []string{"Intro", "Sub"}, 3),
		para("On page three.", []string{"Intro", "Sub"}, 3),
	}}
	chunks, err := Split(context.Background(), doc, Options{}, tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 1 {
		t.Fatalf("got %d chunks", len(chunks))
	}
	c := chunks[0]
	if !slices.Equal(c.Pages, []int{1, 2, 3}) || !slices.Equal(c.HeadingPath, []string{"Intro"}) {
		t.Errorf("pages %v path %q", c.Pages, c.HeadingPath)
	}
	// non-paginated formats have no pages
	doc = &extract.Document{Blocks: []extract.Block{para("text", nil, 0)}}
	chunks, _ = Split(context.Background(), doc, Options{}, tok)
	if len(chunks) != 1 || chunks[0].Pages != nil {
		t.Errorf("pages = %v", chunks[0].Pages)
	}
}

func TestEmptyDocument(t *testing.T) {
	tok := mustTok(t)
	for _, doc := range []*extract.Document{
		{},
		{Blocks: []extract.Block{para("  \n\t ", nil, 0)}},
	} {
		chunks, err := Split(context.Background(), doc, Options{}, tok)
		if err != nil || len(chunks) != 0 {
			t.Errorf("chunks=%d err=%v", len(chunks), err)
		}
	}
	if _, err := Split(context.Background(), nil, Options{}, tok); err == nil {
		t.Error("nil document accepted")
	}
	if _, err := Split(context.Background(), &extract.Document{}, Options{}, nil); err == nil {
		t.Error("nil tokenizer accepted")
	}
}

func TestOptions(t *testing.T) {
	got, err := Options{}.Normalize()
	if err != nil || got.MaxTokens != 800 || got.OverlapTokens != 400 {
		t.Errorf("defaults = %+v, %v", got, err)
	}
	got, err = Options{MaxTokens: 1000}.Normalize()
	if err != nil || got.OverlapTokens != 0 {
		t.Errorf("static without overlap = %+v, %v", got, err)
	}
	for _, bad := range []Options{{MaxTokens: 100, OverlapTokens: 51}, {MaxTokens: 8}, {MaxTokens: 100, OverlapTokens: -1}, {OverlapTokens: 10}, {MaxTokens: 1 << 20}} {
		if _, err := bad.Normalize(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestTiktokenOffline(t *testing.T) {
	tok := mustTok(t)
	// token ids from OpenAI's tiktoken README: the embedded ranks are the real cl100k_base
	enc, err := loadTiktoken()
	if err != nil {
		t.Fatal(err)
	}
	if got := enc.EncodeOrdinary("tiktoken is great!"); !slices.Equal(got, []int{83, 1609, 5963, 374, 2294, 0}) {
		t.Errorf("encode = %v", got)
	}
	for s, want := range map[string]int{
		"hello world":        2,
		"tiktoken is great!": 6,
		"<|endoftext|>":      7, // counted as text, never as a special token
		"":                   0,
	} {
		if got := tok.Count(s); got != want {
			t.Errorf("Count(%q) = %d, want %d", s, got, want)
		}
	}
	if tok.Name() != "tiktoken/cl100k_base" {
		t.Errorf("name %q", tok.Name())
	}
}

func TestHash(t *testing.T) {
	h, err := Hash(strings.NewReader("abc"))
	if err != nil || h != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("Hash = %q, %v", h, err)
	}
	h2, _ := Hash(strings.NewReader("abc"))
	h3, _ := Hash(strings.NewReader("abd"))
	if h != h2 || h == h3 {
		t.Error("hash not stable or not content-sensitive")
	}
	if _, err := Hash(errReader{}); err == nil {
		t.Error("read error swallowed")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, fmt.Errorf("disk on fire") }

// A chunk marks where each further page starts, so that the pages of any
// part of it are known: its parts between page breaks are its pages.
func TestPageBreaksMarkPages(t *testing.T) {
	tok := mustTok(t)
	doc := &extract.Document{Blocks: []extract.Block{
		heading(1, "Intro", []string{"Intro"}, 1),
		para("On page one.", []string{"Intro"}, 1),
		para("Still page one.", []string{"Intro"}, 1),
		para("On page two.", []string{"Intro"}, 2),
		para("On page four.", []string{"Intro"}, 4),
	}}
	chunks, err := Split(context.Background(), doc, Options{}, tok)
	if err != nil || len(chunks) != 1 {
		t.Fatalf("chunks %d, %v", len(chunks), err)
	}
	c := chunks[0]
	want := "Intro\n\nOn page one.\n\nStill page one.\f\n\nOn page two.\f\n\nOn page four."
	if c.Text != want || !slices.Equal(c.Pages, []int{1, 2, 4}) {
		t.Fatalf("text %q pages %v", c.Text, c.Pages)
	}
	clean, spans := vectorstore.SplitPages(c.Text, c.Pages)
	if strings.Contains(clean, vectorstore.PageBreak) || len(spans) != 3 {
		t.Fatalf("clean %q spans %v", clean, spans)
	}
	at := strings.Index(clean, "On page two.")
	if got := vectorstore.PagesOf(spans, at, at+len("On page two.")); !slices.Equal(got, []int{2}) {
		t.Errorf("pages of the page-two sentence: %v", got)
	}
	at = strings.Index(clean, "Still page one.")
	if got := vectorstore.PagesOf(spans, at, len(clean)); !slices.Equal(got, []int{1, 2, 4}) {
		t.Errorf("pages from page one to the end: %v", got)
	}
}
