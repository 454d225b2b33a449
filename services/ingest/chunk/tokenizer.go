package chunk

import (
	"fmt"
	"sync"

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
func (t tiktokenTokenizer) Count(s string) int {
	if s == "" {
		return 0
	}
	return len(t.enc.EncodeOrdinary(s))
}

func (t tiktokenTokenizer) Name() string { return "tiktoken/" + Encoding }
