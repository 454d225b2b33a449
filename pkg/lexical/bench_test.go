package lexical

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// benchText is ordinary English technical prose, the kind of text that gets
// chunked and indexed.
const benchText = `Keyword search complements semantic search. When a user asks a question,
the platform analyses the query with the same pipeline that was applied to every
document chunk at ingest time: the text is normalised, split into words, lowercased,
stripped of stop words and reduced to stems. A passage titled "Connecting devices"
therefore matches the question "How do I connect the device?" even though the two
share no word in its original form. Scores are computed with BM25, which rewards
rare terms more than common ones and dampens the effect of repeating a term many
times in one document. Long documents are normalised against the average length
of the collection, so that a short, focused paragraph is not buried beneath a
sprawling manual that happens to mention every keyword once.

The inference service exposes an OpenAI-compatible API. Requests carry a model
name, a list of messages and optional sampling parameters such as temperature,
top_p and max_tokens. The scheduler batches concurrent requests, keeps the key-value
cache of each sequence resident in GPU memory for as long as possible, and evicts
the least recently used sequences under pressure. Operators configure quotas per
tenant; when a tenant exceeds its quota, further requests are throttled with a
retry-after header rather than rejected outright. Every request is metered, and
the ledger records tokens consumed, latency percentiles and the hardware used.

Deployments are sovereign: models, weights and documents never leave the
operator's own infrastructure. Installation takes a few commands on a machine with
a supported accelerator. After installing the drivers, register the node with the
control plane, upload or mirror the model weights, and create an endpoint. Health
checks report readiness only once the weights are loaded and a warm-up request has
completed successfully. If an upgrade fails, the previous version keeps serving
traffic until the new one passes its checks, and rollbacks are automatic.

Troubleshooting: if responses are slow, check whether the batch size is limited by
memory, whether the tokenizer is running on the CPU, and whether retrieval is
waiting on a remote index. Logs, traces and metrics are exported over
OpenTelemetry; dashboards show queue depth, time to first token, throughput in
tokens per second and error rates for each endpoint and tenant.
`

func corpus(size int) string {
	var b strings.Builder
	for b.Len() < size {
		b.WriteString(benchText)
	}
	return b.String()
}

// zipfCorpus draws words from a large synthetic vocabulary with a Zipf
// distribution, so that many words miss the stem cache.
func zipfCorpus(size, vocab int) string {
	r := rand.New(rand.NewPCG(1, 2))
	var stems []string
	for _, w := range strings.FieldsFunc(strings.ToLower(benchText), func(r rune) bool { return r < 'a' || r > 'z' }) {
		if len(w) >= 3 {
			stems = append(stems, w)
		}
	}
	suffixes := []string{"", "s", "ing", "ed", "ation", "ness", "ly", "er", "ers", "ings", "ize", "izing", "ment", "ments", "ful", "ional"}
	words := make([]string, vocab)
	for i := range words {
		words[i] = stems[r.IntN(len(stems))] + stems[r.IntN(len(stems))][:2] + suffixes[r.IntN(len(suffixes))]
	}
	z := rand.NewZipf(r, 1.1, 2, uint64(vocab-1))
	var b strings.Builder
	for b.Len() < size {
		b.WriteString(words[z.Uint64()])
		if r.IntN(12) == 0 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

func benchTermFreqs(b *testing.B, text string) {
	a := NewEnglish()
	a.TermFreqs(text) // warm the cache as a long-running ingester would have it
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		a.TermFreqs(text)
	}
}

func BenchmarkTermFreqsProse(b *testing.B) { benchTermFreqs(b, corpus(1<<20)) }

func BenchmarkTermFreqsZipf200k(b *testing.B) { benchTermFreqs(b, zipfCorpus(1<<20, 200_000)) }

func BenchmarkTermsProse(b *testing.B) {
	a := NewEnglish()
	text := corpus(1 << 20)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		a.Terms(text)
	}
}

// BenchmarkTermFreqsChunk is the ingest shape: many ~2 KB chunks.
func BenchmarkTermFreqsChunk(b *testing.B) {
	a := NewEnglish()
	text := benchText[:2048]
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		a.TermFreqs(text)
	}
}

// BenchmarkTermsColdCache runs a fresh Analyzer each time: the stemmer's cost.
func BenchmarkTermsColdCache(b *testing.B) {
	text := benchText
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		NewEnglish().Terms(text)
	}
}

func BenchmarkTermsParallel(b *testing.B) {
	a := NewEnglish()
	text := benchText
	b.SetBytes(int64(len(text)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a.Terms(text)
		}
	})
}

// BenchmarkTokenizeOnly measures segmentation and lowercasing alone.
func BenchmarkTokenizeOnly(b *testing.B) {
	text := corpus(1 << 20)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		var t tokenizer
		t.reset(text)
		for {
			if _, _, ok := t.next(); !ok {
				break
			}
		}
	}
}

// BenchmarkTermFreqsTypographic is prose with curly quotes and dashes: not
// ASCII, so it goes through the NFKC check.
func BenchmarkTermFreqsTypographic(b *testing.B) {
	text := strings.NewReplacer("'", "’", " \"", " “", "\" ", "” ", ", ", " — ").Replace(corpus(1 << 20))
	benchTermFreqs(b, text)
}

// BenchmarkTermFreqsNFKC is prose with one character NFKC changes, so the
// whole text is normalised.
func BenchmarkTermFreqsNFKC(b *testing.B) {
	benchTermFreqs(b, "ﬁ "+corpus(1<<20))
}
