package lexical

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
)

func terms(t *testing.T, text string) []string {
	t.Helper()
	return NewEnglish().Terms(text)
}

func TestTermsTable(t *testing.T) {
	a := NewEnglish()
	cases := []struct {
		in   string
		want []string
	}{
		{"How do I connect the device?", []string{"connect", "devic"}},
		{"Connecting devices: plug the cable in.", []string{"connect", "devic", "plug", "cabl"}},
		{"state-of-the-art", []string{"state", "art"}},
		{"Don't do that; it's fine.", []string{"fine"}}, // contractions are stop words
		{"the device's port", []string{"devic", "port"}},
		{"the device’s port", []string{"devic", "port"}}, // curly apostrophe
		{"the students' results", []string{"student", "result"}},
		{"'quoted' words", []string{"quot", "word"}},
		{"pi is 3.14, not 3; 1,000 users on 10.0.0.1 run v1.2.3.", []string{"pi", "3.14", "3", "1,000", "user", "10.0.0.1", "run", "v1.2.3"}},
		{"max_tokens/temperature", []string{"max", "token", "temperatur"}},
		{"GPT4 and H200 in 2024", []string{"gpt4", "h200", "2024"}},
		{"e-mail", []string{"e", "mail"}},
		{"tab\tnew\nline\r\nend", []string{"tab", "new", "line", "end"}},
	}
	for _, c := range cases {
		if got := a.Terms(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Terms(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestLowercaseUnicode(t *testing.T) {
	a := NewEnglish()
	for _, in := range []string{"Café", "CAFÉ", "café", "cafe\u0301" /* decomposed */, "CAFE\u0301"} {
		if got := a.Terms(in); !slices.Equal(got, []string{"café"}) {
			t.Errorf("Terms(%q) = %q, want [café]", in, got)
		}
	}
	// NFKC: full-width letters, ligatures, superscripts.
	if got := a.Terms("ＣＯＮＮＥＣＴＩＮＧ ﬁles x²"); !slices.Equal(got, []string{"connect", "file", "x2"}) {
		t.Errorf("NFKC: got %q", got)
	}
	// Greek: final sigma folds so that case variants match.
	if got, want := a.Terms("ΟΔΟΣ"), a.Terms("οδος"); !slices.Equal(got, want) || len(got) != 1 {
		t.Errorf("Greek: %q vs %q", got, want)
	}
	if got := a.Terms("Москва МОСКВА"); !slices.Equal(got, []string{"москва", "москва"}) {
		t.Errorf("Cyrillic: got %q", got)
	}
}

func TestCJK(t *testing.T) {
	a := NewEnglish()
	got := a.Terms("東京は日本の首都です。")
	want := []string{"東", "京", "は", "日", "本", "の", "首", "都", "で", "す"}
	if !slices.Equal(got, want) {
		t.Errorf("Japanese: got %q, want %q", got, want)
	}
	got = a.Terms("推理服务GPU集群")
	want = []string{"推", "理", "服", "务", "gpu", "集", "群"}
	if !slices.Equal(got, want) {
		t.Errorf("Chinese mixed: got %q, want %q", got, want)
	}
	if got := a.Terms("한국어 텍스트"); !slices.Equal(got, []string{"한국어", "텍스트"}) {
		t.Errorf("Korean: got %q", got)
	}
	// A query and a passage share characters.
	q, d := a.Terms("服务"), a.Terms("推理服务")
	for _, term := range q {
		if !slices.Contains(d, term) {
			t.Errorf("CJK query term %q not in passage terms %q", term, d)
		}
	}
}

func TestStopWords(t *testing.T) {
	if got := terms(t, "The and of to a in is it you that he was for on are with as I his they"); len(got) != 0 {
		t.Errorf("stop words kept: %q", got)
	}
	if got := terms(t, "THE Quick"); !slices.Equal(got, []string{"quick"}) {
		t.Errorf("uppercase stop word: %q", got)
	}
	if n := len(StopWords()); n != 174 {
		t.Errorf("len(StopWords()) = %d, want 174 (Snowball list)", n)
	}
	if !IsStopWord("don't") || IsStopWord("connect") {
		t.Error("IsStopWord")
	}
	seen := map[string]bool{}
	for _, w := range StopWords() {
		if seen[w] || w != strings.ToLower(w) {
			t.Errorf("stop word %q duplicated or not lowercase", w)
		}
		seen[w] = true
	}
}

func TestStemming(t *testing.T) {
	a := NewEnglish()
	groups := [][]string{
		{"running", "runs", "run"},
		{"connection", "connected", "connecting", "connects", "connect", "connections"},
		{"studies", "studying", "studied"},
		{"devices", "device", "device's"},
		{"configure", "configuring", "configured", "configuration"},
	}
	for _, g := range groups {
		var stem string
		for i, w := range g {
			got := a.Terms(w)
			if len(got) != 1 {
				t.Fatalf("Terms(%q) = %q", w, got)
			}
			if i == 0 {
				stem = got[0]
			} else if got[0] != stem {
				t.Errorf("%q → %q, but %q → %q", w, got[0], g[0], stem)
			}
		}
	}
	for in, want := range map[string]string{
		"studies": "studi", "studying": "studi", "connection": "connect",
		"running": "run", "generously": "generous", "cats": "cat",
	} {
		if got := a.Terms(in); !slices.Equal(got, []string{want}) {
			t.Errorf("Terms(%q) = %q, want [%s]", in, got, want)
		}
	}
	// Numbers are not stemmed.
	if got := a.Terms("1990s 2024"); !slices.Equal(got, []string{"1990s", "2024"}) {
		t.Errorf("numbers: %q", got)
	}
}

func TestParaphrase(t *testing.T) {
	a := NewEnglish()
	pairs := [][2]string{
		{"How do I connect the device?", "Connecting devices: use the USB-C port and wait for the LED."},
		{"Why are my requests being throttled?", "Request throttling happens when the quota is exceeded."},
		{"configure GPU memory limits", "Configuration of the memory limit per GPU"},
	}
	for _, p := range pairs {
		q := a.Terms(p[0])
		d, _ := a.TermFreqs(p[1])
		shared := 0
		for _, term := range q {
			if d[term] > 0 {
				shared++
			}
		}
		if shared < 2 {
			t.Errorf("query %q (terms %q) shares %d stems with %q (terms %v)", p[0], q, shared, p[1], d)
		}
	}
}

func TestTermFreqs(t *testing.T) {
	a := NewEnglish()
	tf, n := a.TermFreqs("The device connects. Devices connect; a device, connected! 42 42")
	want := map[string]uint32{"devic": 3, "connect": 3, "42": 2}
	if n != 8 || len(tf) != len(want) {
		t.Fatalf("TermFreqs = %v, %d; want %v, 8", tf, n, want)
	}
	for k, v := range want {
		if tf[k] != v {
			t.Errorf("tf[%q] = %d, want %d", k, tf[k], v)
		}
	}
	var sum int
	for _, c := range tf {
		sum += int(c)
	}
	if sum != n {
		t.Errorf("length %d != sum of counts %d", n, sum)
	}
	// Terms and TermFreqs agree.
	text := "Keyword search works without an embedding engine, finding paraphrased questions by keyword."
	ts := a.Terms(text)
	tf, n = a.TermFreqs(text)
	if n != len(ts) {
		t.Errorf("TermFreqs length %d, len(Terms) %d", n, len(ts))
	}
	for _, term := range ts {
		if tf[term] == 0 {
			t.Errorf("term %q missing from TermFreqs", term)
		}
	}
}

func TestEmpty(t *testing.T) {
	a := NewEnglish()
	for _, in := range []string{"", " ", " \t\n\r ", "?!...---", "''' \"\" ’’", "… — – •", "the a an of", "\x00\x01\xff\xfe"} {
		if got := a.Terms(in); len(got) != 0 {
			t.Errorf("Terms(%q) = %q, want none", in, got)
		}
		tf, n := a.TermFreqs(in)
		if n != 0 || len(tf) != 0 || tf == nil {
			t.Errorf("TermFreqs(%q) = %v, %d", in, tf, n)
		}
	}
}

func TestLongTokens(t *testing.T) {
	a := NewEnglish()
	long := strings.Repeat("x", MaxTermBytes+1)
	edge := strings.Repeat("q", MaxTermBytes)
	if got := a.Terms("start " + long + " finish"); !slices.Equal(got, []string{"start", "finish"}) {
		t.Errorf("long ASCII token: %q", got)
	}
	if got := a.Terms(edge); len(got) != 1 || got[0] != edge {
		t.Errorf("64-byte token: %q", got)
	}
	// Multi-byte: 33 × "é" is 66 bytes.
	if got := a.Terms(strings.Repeat("é", 33) + " ok " + strings.Repeat("é", 32)); !slices.Equal(got, []string{"ok", strings.Repeat("é", 32)}) {
		t.Errorf("long multi-byte token: %q", got)
	}
	// A long token ending at the text's end, and one cut by a Han character.
	if got := a.Terms("ok " + long); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("long token at end: %q", got)
	}
	if got := a.Terms(long + "東"); !slices.Equal(got, []string{"東"}) {
		t.Errorf("long token before Han: %q", got)
	}
}

func TestInvalidUTF8(t *testing.T) {
	a := NewEnglish()
	if got := a.Terms("good\xffbad \xc3"); !slices.Equal(got, []string{"good", "bad"}) {
		t.Errorf("invalid UTF-8: %q", got)
	}
}

func TestTermIDGolden(t *testing.T) {
	golden := map[string]uint32{
		"":        0x811c9dc5, // FNV-1a 32 reference vectors
		"a":       0xe40c292c,
		"foobar":  0xbf9cf968,
		"connect": 0xaae0ccf9,
		"devic":   0xdec49144,
		"café":    0xa82b5049,
		"東":       0x10bc2fc7,
	}
	for term, want := range golden {
		if got := TermID(term); got != want {
			t.Errorf("TermID(%q) = %#08x, want %#08x", term, got, want)
		}
		h := fnv.New32a()
		h.Write([]byte(term))
		if h.Sum32() != TermID(term) {
			t.Errorf("TermID(%q) disagrees with hash/fnv", term)
		}
		if fnv1a([]byte(term)) != TermID(term) {
			t.Errorf("fnv1a(%q) disagrees with TermID", term)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-5 }

func TestBM25TF(t *testing.T) {
	def := BM25{} // zero value: defaults
	cases := []struct {
		p      BM25
		tf     uint32
		dl     int
		avg    float64
		want   float64
		reason string
	}{
		{def, 0, 10, 10, 0, "absent term"},
		{def, 1, 10, 10, 1.0, "2.2/(1+1.2)"},
		{DefaultBM25, 1, 10, 10, 1.0, "explicit defaults"},
		{def, 2, 20, 10, 4.4 / 4.1, "2·2.2/(2+1.2·(0.25+0.75·2))"},
		{def, 3, 5, 10, 1.76, "3·2.2/(3+1.2·(0.25+0.375))"},
		{def, 1, 10, 0, 1.0, "unknown average: no normalisation"},
		{BM25{K1: 2, B: 0}, 1, 100, 10, 1.0, "b=0: 3/(1+2)"},
		{BM25{K1: 2, B: 1}, 4, 5, 10, 12.0 / 5, "4·3/(4+2·0.5)"},
		{BM25{K1: 1.2, B: 0.75}, 1000000, 10, 10, 2.2 * 1e6 / (1e6 + 1.2), "saturates at k1+1"},
	}
	for _, c := range cases {
		if got := c.p.TF(c.tf, c.dl, c.avg); !near(float64(got), c.want) {
			t.Errorf("%+v.TF(%d,%d,%g) = %v, want %v (%s)", c.p, c.tf, c.dl, c.avg, got, c.want, c.reason)
		}
	}
	// Monotone in tf, decreasing in docLen.
	if !(def.TF(2, 10, 10) > def.TF(1, 10, 10) && def.TF(1, 5, 10) > def.TF(1, 20, 10)) {
		t.Error("TF not monotone")
	}
}

func TestIDF(t *testing.T) {
	cases := []struct {
		n, N int64
		want float64
	}{
		{1, 10, math.Log(1 + 9.5/1.5)}, // 1.99243
		{10, 10, math.Log(1 + 0.5/10.5)},
		{5, 10, math.Ln2},
		{0, 0, math.Ln2},
		{0, 1000, math.Log(1 + 1000.5/0.5)},
		{20, 10, math.Log(1 + 0.5/10.5)}, // n clamped to N
		{-3, 10, math.Log(1 + 10.5/0.5)}, // n clamped to 0
	}
	for _, c := range cases {
		got := IDF(c.n, c.N)
		if !near(float64(got), c.want) {
			t.Errorf("IDF(%d, %d) = %v, want %v", c.n, c.N, got, c.want)
		}
		if got < 0 {
			t.Errorf("IDF(%d, %d) negative", c.n, c.N)
		}
	}
	if !near(float64(IDF(1, 10)), 1.9924301) {
		t.Errorf("IDF(1,10) = %v", IDF(1, 10))
	}
	if !(IDF(1, 100) > IDF(10, 100) && IDF(10, 100) > IDF(90, 100)) {
		t.Error("IDF not decreasing in n")
	}
}

func TestVectors(t *testing.T) {
	a := NewEnglish()
	tf, n := a.TermFreqs("Connecting devices: connect each device to the hub.")
	idx, val := DefaultBM25.DocVector(tf, n, 5)
	if len(idx) != len(tf) || len(val) != len(idx) {
		t.Fatalf("DocVector sizes: %d, %d for %d terms", len(idx), len(val), len(tf))
	}
	if !slices.IsSorted(idx) {
		t.Errorf("indices not sorted: %v", idx)
	}
	for i, id := range idx {
		for term, c := range tf {
			if TermID(term) == id && !near(float64(val[i]), float64(DefaultBM25.TF(c, n, 5))) {
				t.Errorf("value for %q = %v", term, val[i])
			}
		}
	}
	qi, qv := QueryVector(a.Terms("How do I connect a device to a device hub?"))
	want := map[uint32]float32{TermID("connect"): 1, TermID("devic"): 2, TermID("hub"): 1}
	if len(qi) != 3 || !slices.IsSorted(qi) {
		t.Fatalf("QueryVector = %v %v", qi, qv)
	}
	for i, id := range qi {
		if want[id] != qv[i] {
			t.Errorf("query weight for %#x = %v, want %v", id, qv[i], want[id])
		}
	}
}

func TestConcurrent(t *testing.T) {
	a := NewEnglish()
	texts := []string{
		"How do I connect the device?",
		"Connecting devices: plug the cable in.",
		"Studies of studying students",
		benchText[:2000],
	}
	want := make([][]string, len(texts))
	for i, s := range texts {
		want[i] = NewEnglish().Terms(s)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := (g + i) % len(texts)
				if got := a.Terms(texts[k]); !slices.Equal(got, want[k]) {
					t.Errorf("concurrent Terms(%q) = %q", texts[k], got)
					return
				}
				// Distinct words churn the bounded cache.
				if got := a.Terms(fmt.Sprintf("word%dx%d", g, i)); len(got) != 1 {
					t.Errorf("churn: %q", got)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestCacheBounded(t *testing.T) {
	a := NewEnglish()
	var b strings.Builder
	for i := range sharedShards*sharedShardCap + 5000 {
		fmt.Fprintf(&b, "w%dq ", i)
	}
	a.Terms(b.String())
	total := 0
	for i := range a.shared {
		if l := len(a.shared[i].m); l > sharedShardCap {
			t.Errorf("shard %d holds %d > %d", i, l, sharedShardCap)
		}
		total += len(a.shared[i].m)
	}
	if total == 0 {
		t.Error("cache unused")
	}
	// Still correct after eviction.
	if got := a.Terms("connecting devices"); !slices.Equal(got, []string{"connect", "devic"}) {
		t.Errorf("after eviction: %q", got)
	}
}
