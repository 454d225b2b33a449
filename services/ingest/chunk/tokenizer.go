package chunk

import (
	"fmt"
	"sync"
	"unicode"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// Tokenizer counts tokens. Implementations must be safe for concurrent use
// and deterministic.
type Tokenizer interface {
	// Count returns the number of tokens in s.
	Count(s string) int
	// Name identifies the tokenizer (recorded with chunks so a change of
	// tokenizer can be detected).
	Name() string
}

// Encoding is the BPE encoding used by NewTiktoken (GPT-3.5/4, and what
// OpenAI's file-search chunking counts in).
const Encoding = "cl100k_base"

type tiktokenTokenizer struct{ enc *tiktoken.Tiktoken }

var loadTiktoken = sync.OnceValues(func() (*tiktoken.Tiktoken, error) {
	// The offline loader embeds the BPE ranks: no network access, ever.
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	enc, err := tiktoken.GetEncoding(Encoding)
	if err != nil {
		return nil, fmt.Errorf("chunk: load %s tokenizer: %w", Encoding, err)
	}
	return enc, nil
})

// NewTiktoken returns the cl100k_base BPE tokenizer with ranks embedded in the
// binary (github.com/pkoukk/tiktoken-go-loader). The first call parses the
// ranks (about 100k entries, a few hundred milliseconds); later calls share
// the result. There is no fallback: an error is returned as is.
func NewTiktoken() (Tokenizer, error) {
	enc, err := loadTiktoken()
	if err != nil {
		return nil, err
	}
	return tiktokenTokenizer{enc}, nil
}

// Count implements Tokenizer. Special-token text such as "<|endoftext|>" in
// a document is counted as ordinary text.
//
// Byte-pair merging is quadratic in the length of a run the pre-tokenizer
// keeps whole (a run of letters, of punctuation or of whitespace), so a
// 300 KB run of one letter took minutes. Count hands the encoder segments of
// about maxSegment bytes cut before a whitespace run, where cl100k's
// pre-tokenizer cuts too (the count is exact there), and cuts runs longer
// than maxRun bytes every maxRun bytes (no cl100k token is that long; each
// such cut may add a token to the count). Count is linear in len(s).
func (t tiktokenTokenizer) Count(s string) int {
	n := 0
	segments(s, func(seg string) { n += len(t.enc.EncodeOrdinary(seg)) })
	return n
}

const (
	maxSegment = 4096
	maxRun     = 128
)

// segments calls yield with consecutive non-empty pieces of s that
// concatenate to s: cut before a whitespace run once a piece reaches
// maxSegment bytes, and inside any run of whitespace or of non-whitespace
// every maxRun bytes.
func segments(s string, yield func(string)) {
	start, runStart, lastBreak := 0, 0, -1
	prevSpace := false
	for i, r := range s {
		sp := unicode.IsSpace(r)
		if i > start && sp != prevSpace {
			runStart = i
			if sp {
				lastBreak = i
			}
		}
		prevSpace = sp
		switch {
		case i-runStart >= maxRun:
			yield(s[start:i])
			start, runStart, lastBreak = i, i, -1
		case i-start >= maxSegment && lastBreak > start:
			yield(s[start:lastBreak])
			start, lastBreak = lastBreak, -1
		}
	}
	if start < len(s) {
		yield(s[start:])
	}
}

func (t tiktokenTokenizer) Name() string { return "tiktoken/" + Encoding }
