package enginesim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/aiforge/aiforge/pkg/lexical"
)

// maxEmbeddingDims bounds "dimensions".
const maxEmbeddingDims = 1 << 16

type embRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// embReq is a parsed embeddings request: one item per input.
type embReq struct {
	model  string
	items  []embItem
	dims   int
	b64    bool
	tokens int
}

func (s *Sim) parseEmbeddings(body []byte, e *embReq) *apiError {
	var req embRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return malformed(err)
	}
	model, aerr := s.resolveModel(req.Model)
	if aerr != nil {
		return aerr
	}
	e.model = model
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		e.b64 = true
	default:
		return badRequest("encoding_format must be \"float\" or \"base64\"", "encoding_format")
	}
	e.dims = s.embeddingDims
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > maxEmbeddingDims {
			return badRequest("dimensions must be between 1 and "+strconv.Itoa(maxEmbeddingDims), "dimensions")
		}
		e.dims = *req.Dimensions
	}

	var err error
	switch firstByte(req.Input) {
	case '"':
		var in string
		if err = json.Unmarshal(req.Input, &in); err == nil {
			e.addText(in)
		}
	case '[':
		switch elemByte(req.Input) {
		case ']':
			return badRequest("input must not be empty", "input")
		case '"':
			var in []string
			if err = json.Unmarshal(req.Input, &in); err == nil {
				for _, t := range in {
					e.addText(t)
				}
			}
		case '[':
			var in [][]int
			if err = json.Unmarshal(req.Input, &in); err == nil {
				for _, t := range in {
					e.addTokens(t)
				}
			}
		default:
			var in []int
			if err = json.Unmarshal(req.Input, &in); err == nil {
				e.addTokens(in)
			}
		}
	default:
		return badRequest("input is required (a string, an array of strings, of token ids or of arrays of token ids)", "input")
	}
	if err != nil {
		return malformed(err)
	}
	return nil
}

// embItem is one input: a text, or token ids (tokens non-nil).
type embItem struct {
	text   string
	tokens []int
}

func (e *embReq) addText(t string) {
	e.items = append(e.items, embItem{text: t})
	e.tokens += max(countWords(t), 1)
}

func (e *embReq) addTokens(t []int) {
	e.items = append(e.items, embItem{tokens: slices.Clone(t)})
	e.tokens += len(t)
}

// The simulator's embeddings are a weak lexical model, deterministic and
// cheap, so that dense and hybrid retrieval can be exercised meaningfully
// without one: signed feature hashing (Weinberger et al., "Feature hashing
// for large scale multitask learning", 2009) of the text's word stems (the
// lexical package's English analyzer: stop words removed, Porter2 stems) and
// of the character trigrams of each stem with its boundaries ("#ke", "key",
// "ey#"), each feature weighted by 1 + ln(its count), trigrams at
// trigramWeight of a stem; the sum is L2-normalised. Texts sharing words or
// word parts ("keyring", "keyrings", "key") have a positive cosine, unrelated
// texts one near 0. Token-id inputs hash each id as a feature. An input with
// no feature (empty, punctuation, stop words only) gets the hash-derived unit
// vector of its bytes, as every input did before.
const trigramWeight = 0.25

var embedAnalyzer = lexical.NewEnglish()

// Embed is the simulator's embedding of text in dims dimensions (a unit
// vector; see above). Tests use it to predict the engine's vectors.
func Embed(text string, dims int) []float32 {
	v := make([]float32, dims)
	embedItem(v, embItem{text: text})
	return v
}

// embedItem fills v with the item's unit vector.
func embedItem(v []float32, it embItem) {
	feats := map[string]int{}
	if it.tokens != nil {
		for _, t := range it.tokens {
			feats["t"+strconv.Itoa(t)]++
		}
	} else {
		for _, stem := range embedAnalyzer.Terms(it.text) {
			feats["w"+stem]++
			b := "#" + stem + "#"
			// Trigrams of bytes: a multi-byte letter's bytes hash like any
			// others; only consistency matters.
			for i := 0; i+3 <= len(b); i++ {
				feats["g"+b[i:i+3]]++
			}
		}
	}
	if len(feats) == 0 {
		seed := fnvString(fnvOffset64, it.text)
		if it.tokens != nil {
			seed = fnvInts(fnvOffset64, it.tokens)
		}
		embed(v, seed)
		return
	}
	acc := make([]float64, len(v))
	for f, n := range feats {
		w := 1 + math.Log(float64(n))
		if f[0] == 'g' {
			w *= trigramWeight
		}
		h := fnvString(fnvOffset64, f)
		if h>>63 != 0 {
			w = -w
		}
		acc[(h&(1<<63-1))%uint64(len(v))] += w
	}
	var sum float64
	for _, x := range acc {
		sum += x * x
	}
	if sum == 0 { // every feature cancelled out
		embed(v, fnvString(fnvOffset64, it.text))
		return
	}
	inv := 1 / math.Sqrt(sum)
	for i, x := range acc {
		v[i] = float32(x * inv)
	}
}

// embed fills v with the deterministic hash-derived unit vector for seed.
func embed(v []float32, seed uint64) {
	rng := seed
	var sum float64
	for range v {
		x := float64(splitmix64(&rng)>>11)/(1<<53)*2 - 1
		sum += x * x
	}
	if sum == 0 {
		clear(v)
		v[0] = 1
		return
	}
	inv := 1 / math.Sqrt(sum)
	rng = seed
	for i := range v {
		x := float64(splitmix64(&rng)>>11)/(1<<53)*2 - 1
		v[i] = float32(x * inv)
	}
}

func (s *Sim) serveEmbeddings(w http.ResponseWriter, r *http.Request, e *embReq) {
	if ttft, _ := s.timing(); ttft > 0 {
		var tm *time.Timer
		ok := sleepCtx(r.Context(), &tm, ttft)
		tm.Stop()
		if !ok {
			s.canceled.Add(1)
			return
		}
	} else if r.Context().Err() != nil {
		s.canceled.Add(1)
		return
	}
	vec := make([]float32, e.dims)
	var raw []byte
	if e.b64 {
		raw = make([]byte, 4*e.dims)
	}
	bp := getBuf()
	b := append((*bp)[:0], `{"object":"list","data":[`...)
	for i, it := range e.items {
		embedItem(vec, it)
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		if e.b64 {
			for j, x := range vec {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(x))
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, raw)
			b = append(b, '"')
		} else {
			b = append(b, '[')
			for j, x := range vec {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, float64(x), 'g', -1, 32)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `],"model":`...)
	b = appendJSONString(b, e.model)
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(e.tokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(e.tokens), 10)
	b = append(b, "}}"...)
	s.writeJSON(w, http.StatusOK, b)
	*bp = b
	putBuf(bp)
	s.completed.Add(1)
}
