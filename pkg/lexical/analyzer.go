// Package lexical is the text analyzer behind keyword (BM25) search.
//
// The same Analyzer must be used on both sides of the index: document chunks
// are turned into term frequencies at ingest time (TermFreqs → sparse
// vectors), and queries are turned into terms at search time (Terms). Keyword
// search needs no embedding engine; stemming and stop-word removal let a
// paraphrased question ("How do I connect the device?") match a passage
// ("Connecting devices: …") by its stems (connect, devic).
//
// The English pipeline, in order:
//
//  1. NFKC normalisation (golang.org/x/text/unicode/norm); text that is
//     already NFKC — all ASCII text, most English text — is not copied.
//  2. Segmentation into words of letters, digits and combining marks;
//     everything else separates words. Inside a word an apostrophe (' ’ ʼ)
//     between two letters is kept ("don't", "device's"), and '.' or ','
//     between two digits is kept ("3.14", "1,000", "10.0.0.1"). Hyphens,
//     underscores, slashes etc. split ("state-of-the-art" → state, of, the,
//     art). Every Han (CJK ideograph) or Hiragana character is a term of its
//     own (unigrams); other scripts are segmented on the same rules as
//     Latin text.
//  3. Unicode lowercasing (final sigma folded to σ).
//  4. Words longer than MaxTermBytes bytes (after steps 1–3) are dropped.
//  5. English stop words (the Snowball list, see StopWords) are dropped.
//  6. Words containing an ASCII letter are stemmed with the Snowball
//     (Porter2) English stemmer (github.com/kljensen/snowball/english);
//     numbers and words in other scripts are kept as they are.
//
// An Analyzer caches stems in two bounded levels: a lock-free map per
// goroutine in flight (pooled), backed by a sharded map shared under
// read-write locks. Analysing typical English text then costs a map lookup
// per word rather than a run of the stemmer (≈20× faster), and concurrent
// callers do not contend on a lock per word.
package lexical

import (
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/kljensen/snowball/english"
	"golang.org/x/text/unicode/norm"
)

// MaxTermBytes is the longest word, in bytes of UTF-8 after normalisation
// and lowercasing, that is kept as a term. Longer ones (base64 blobs, hashes,
// URLs without separators, unsegmented scripts) are dropped whole, not
// truncated.
const MaxTermBytes = 64

const (
	sharedShards     = 16
	sharedShardCap   = 4096 // 64 Ki stems shared per Analyzer
	localCap         = 8192 // stems per pooled local cache
	defaultTermsHint = 6    // bytes of English text per kept term, roughly
	tfHintBytes      = 16   // bytes of English text per distinct term in a chunk, roughly
	tfHintMax        = 1024
)

// Analyzer turns text into search terms. It is safe for concurrent use;
// create one and share it (its stem caches belong to it).
type Analyzer struct {
	stop   map[string]struct{} // read-only
	local  sync.Pool           // *localCache
	shared [sharedShards]stemShard
}

type stemShard struct {
	mu sync.RWMutex
	m  map[string]stemEntry
	_  [40]byte // keep shards on separate cache lines
}

// stemEntry keeps the key string too, so that a local cache filled from the
// shared one shares its strings instead of allocating.
type stemEntry struct{ word, stem string }

// localCache is used by one call at a time, without locks. It maps words
// to stems, and stop words to "".
type localCache struct{ m map[string]string }

// NewEnglish returns the English analyzer: NFKC, Unicode word segmentation,
// lowercasing, Snowball stop words and Snowball (Porter2) stemming.
func NewEnglish() *Analyzer {
	a := &Analyzer{stop: stopSet}
	a.local.New = func() any { return &localCache{m: make(map[string]string, 256)} }
	for i := range a.shared {
		a.shared[i].m = make(map[string]stemEntry, 256)
	}
	return a
}

// Terms returns the terms of text in order of occurrence, after stop-word
// removal and stemming. Repeated words give repeated terms. Empty,
// whitespace-only and punctuation-only text gives no terms (nil).
func (a *Analyzer) Terms(text string) []string {
	c := a.local.Get().(*localCache)
	defer a.local.Put(c)
	var out []string
	var t tokenizer
	t.reset(text)
	for {
		term, ok := a.next(&t, c)
		if !ok {
			return out
		}
		if out == nil {
			out = make([]string, 0, len(t.s)/defaultTermsHint+1)
		}
		out = append(out, term)
	}
}

// TermFreqs returns how often each term occurs in text, and length, the
// number of terms kept (the sum of the counts): the document length for BM25.
// Text with no terms gives an empty, non-nil map and 0.
func (a *Analyzer) TermFreqs(text string) (tf map[string]uint32, length int) {
	c := a.local.Get().(*localCache)
	defer a.local.Put(c)
	tf = make(map[string]uint32, min(len(text)/tfHintBytes, tfHintMax))
	var t tokenizer
	t.reset(text)
	for {
		term, ok := a.next(&t, c)
		if !ok {
			return tf, length
		}
		tf[term]++
		length++
	}
}

// next returns the next kept term.
func (a *Analyzer) next(t *tokenizer, c *localCache) (string, bool) {
	for {
		word, kind, ok := t.next()
		if !ok {
			return "", false
		}
		if kind == kindNumber {
			return string(word), true
		}
		// One lookup for most words: the local cache holds stop words too,
		// as "". Lookups with string(word) do not allocate.
		if s, hit := c.m[string(word)]; hit {
			if s == "" {
				continue
			}
			return s, true
		}
		if _, stop := a.stop[string(word)]; stop {
			if len(c.m) >= localCap {
				evictOne(c.m)
			}
			c.m[string(word)] = ""
			continue
		}
		key, s := a.stemShared(word, kind == kindStem)
		if len(c.m) >= localCap {
			evictOne(c.m)
		}
		c.m[key] = s
		return s, true
	}
}

// stemShared returns word as a string and its stem (word itself when stem is
// false) through the shared cache.
func (a *Analyzer) stemShared(word []byte, stem bool) (key, s string) {
	sh := &a.shared[fnv1a(word)%sharedShards]
	sh.mu.RLock()
	e, hit := sh.m[string(word)] // no allocation
	sh.mu.RUnlock()
	if hit {
		return e.word, e.stem
	}
	key = string(word)
	s = key
	if stem {
		s = english.Stem(key, true)
	}
	sh.mu.Lock()
	if len(sh.m) >= sharedShardCap {
		evictOne(sh.m)
	}
	sh.m[key] = stemEntry{key, s}
	sh.mu.Unlock()
	return key, s
}

// evictOne deletes an arbitrary entry: Go map iteration starts at a random
// one, which makes the cache random-replacement. Frequent words come straight
// back; rare ones churn.
func evictOne[V any](m map[string]V) {
	for k := range m {
		delete(m, k)
		return
	}
}

type wordKind uint8

const (
	kindPlain  wordKind = iota // kept as is: no ASCII letter, not only digits (other scripts, Han)
	kindStem                   // contains an ASCII letter: run the English stemmer
	kindNumber                 // only digits (and . , between digits): kept as is, not cached
)

// tokenizer segments normalised text into lowercased words. It does not
// allocate: words are returned in its own buffer, valid until the next call.
type tokenizer struct {
	s   string
	i   int
	buf [MaxTermBytes + utf8.UTFMax]byte
}

func (t *tokenizer) reset(text string) {
	if !isASCII(text) {
		text = norm.NFKC.String(text) // returns text itself when already NFKC
	}
	t.s, t.i = text, 0
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// ASCII byte classes.
const (
	cSep    = 0
	cLetter = 1 // A-Z a-z
	cDigit  = 2
	cApos   = 3 // '
	cNumSep = 4 // . ,
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = cLetter, cLetter
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = cDigit
	}
	t['\''] = cApos
	t['.'], t[','] = cNumSep, cNumSep
	return t
}()

// next returns the next word (lowercased, in t.buf), its kind, or ok=false at
// the end of the text. Words over MaxTermBytes are skipped.
func (t *tokenizer) next() (word []byte, kind wordKind, ok bool) {
	s := t.s
	i := t.i
	n := 0
	var (
		tooLong  bool  // the current word is over MaxTermBytes: drop it
		letters  bool  // the current word has an ASCII letter
		nonDigit bool  // the current word has something other than digits and . ,
		last     uint8 // class of the word's previous rune: cLetter, cDigit, cApos, cNumSep; 0 at its start
	)
	for i < len(s) {
		c := s[i]
		size := 1
		if c < utf8.RuneSelf {
			switch asciiClass[c] {
			case cLetter:
				if n < MaxTermBytes {
					t.buf[n] = c | 0x20 // lowercase
					n++
				} else {
					tooLong = true
				}
				letters, nonDigit, last = true, true, cLetter
				i++
				continue
			case cDigit:
				if n < MaxTermBytes {
					t.buf[n] = c
					n++
				} else {
					tooLong = true
				}
				last = cDigit
				i++
				continue
			case cApos:
				if last == cLetter && nextIsLetter(s, i+1) {
					if n < MaxTermBytes {
						t.buf[n] = '\''
						n++
					} else {
						tooLong = true
					}
					nonDigit, last = true, cApos
					i++
					continue
				}
			case cNumSep:
				if last == cDigit && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
					if n < MaxTermBytes {
						t.buf[n] = c
						n++
					} else {
						tooLong = true
					}
					last = cNumSep
					i++
					continue
				}
			}
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			switch {
			case r == '\u2019' || r == '\u02bc': // ’ ʼ: apostrophes
				if last == cLetter && nextIsLetter(s, i+size) {
					if n < MaxTermBytes {
						t.buf[n] = '\''
						n++
					} else {
						tooLong = true
					}
					nonDigit, last = true, cApos
					i += size
					continue
				}
			case isUnigram(r):
				if n > 0 && !tooLong {
					// End the current word; the character is the next term.
					t.i = i
					return t.buf[:n], wordKindOf(letters, nonDigit), true
				}
				t.i = i + size
				return t.buf[:utf8.EncodeRune(t.buf[:], r)], kindPlain, true
			case unicode.IsLetter(r) || unicode.IsNumber(r) || last != 0 && unicode.IsMark(r):
				if unicode.IsDigit(r) {
					last = cDigit
				} else {
					nonDigit, last = true, cLetter
				}
				r = lower(r)
				if n+utf8.RuneLen(r) <= MaxTermBytes {
					n += utf8.EncodeRune(t.buf[n:], r)
				} else {
					tooLong = true
				}
				i += size
				continue
			}
		}
		// s[i:i+size] separates words.
		i += size
		if last != 0 {
			if !tooLong {
				t.i = i
				return t.buf[:n], wordKindOf(letters, nonDigit), true
			}
			n, tooLong, letters, nonDigit, last = 0, false, false, false, 0
		}
	}
	t.i = i
	if last != 0 && !tooLong {
		return t.buf[:n], wordKindOf(letters, nonDigit), true
	}
	return nil, 0, false
}

func wordKindOf(letters, nonDigit bool) wordKind {
	switch {
	case letters:
		return kindStem
	case !nonDigit:
		return kindNumber
	}
	return kindPlain
}

// nextIsLetter reports whether s[i:] starts with a letter.
func nextIsLetter(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c] == cLetter
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return unicode.IsLetter(r) && !isUnigram(r)
}

// isUnigram reports whether r is indexed as a term of its own: Han
// ideographs and Hiragana, which are written without spaces.
func isUnigram(r rune) bool {
	return r >= 0x2e80 && (unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r))
}

func lower(r rune) rune {
	if r == 'ς' { // final sigma: fold to σ so that word-final and medial forms match
		return 'σ'
	}
	return unicode.ToLower(r)
}

// fnv1a is FNV-1a 32 over b.
func fnv1a(b []byte) uint32 {
	h := uint32(offset32)
	for _, c := range b {
		h ^= uint32(c)
		h *= prime32
	}
	return h
}

const (
	offset32 = 2166136261
	prime32  = 16777619
)
