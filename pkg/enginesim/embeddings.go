package enginesim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"
)

// maxEmbeddingDims bounds "dimensions".
const maxEmbeddingDims = 1 << 16

type embRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// embReq is a parsed embeddings request: one seed per input item.
type embReq struct {
	model  string
	seeds  []uint64
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

func (e *embReq) addText(t string) {
	e.seeds = append(e.seeds, fnvString(fnvOffset64, t))
	e.tokens += max(countWords(t), 1)
}

func (e *embReq) addTokens(t []int) {
	e.seeds = append(e.seeds, fnvInts(fnvOffset64, t))
	e.tokens += len(t)
}

// embed fills v with the deterministic unit vector for seed.
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
	for i, seed := range e.seeds {
		embed(vec, seed)
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
