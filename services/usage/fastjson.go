package usage

import (
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/aiforge/aiforge/pkg/events"
)

// A fast path for the one message shape the folder and the audit read
// hundreds of thousands of times: UsageRecordedV1/V2/V3 as events.Marshal
// writes it. encoding/json spends ~8µs on one; this scanner ~1µs, and it
// interns the strings that repeat (tenant, key, model, endpoint...), so the
// ledger's buckets share them.
//
// It is deliberately narrow: anything it does not fully understand (an
// unknown or differently cased field name, an escape sequence, null, a
// number that is not a plain integer where one is expected, trailing data)
// makes it give up, and the caller decodes with encoding/json, whose
// answer is authoritative. TestFastDecodeMatchesEncodingJSON checks the two
// agree.

// interner returns one shared string per distinct value seen.
type interner map[string]string

const maxInterned = 1 << 14

func (in *interner) get(b []byte) string {
	if s, ok := (*in)[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	if *in == nil || len(*in) >= maxInterned {
		*in = make(interner, 256)
	}
	(*in)[s] = s
	return s
}

type scanner struct {
	b  []byte
	i  int
	in *interner
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) consume(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str returns the bytes of a string without escapes or control
// characters, in valid UTF-8.
func (s *scanner) str() ([]byte, bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	ascii := true
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		switch {
		case c == '"':
			v := s.b[start:j]
			if !ascii && !utf8.Valid(v) {
				return nil, false
			}
			s.i = j + 1
			return v, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, false
}

func (s *scanner) intern() (string, bool) {
	b, ok := s.str()
	if !ok {
		return "", false
	}
	return s.in.get(b), true
}

func (s *scanner) plainString() (string, bool) {
	b, ok := s.str()
	return string(b), ok
}

// int reads a JSON integer that fits int64 comfortably (at most 18 digits).
func (s *scanner) int() (int64, bool) {
	s.ws()
	j := s.i
	neg := false
	if j < len(s.b) && s.b[j] == '-' {
		neg = true
		j++
	}
	start := j
	var n int64
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		n = n*10 + int64(s.b[j]-'0')
		j++
	}
	digits := j - start
	if digits == 0 || digits > 18 || (digits > 1 && s.b[start] == '0') {
		return 0, false
	}
	if j < len(s.b) && (s.b[j] == '.' || s.b[j] == 'e' || s.b[j] == 'E') {
		return 0, false
	}
	s.i = j
	if neg {
		n = -n
	}
	return n, true
}

// float reads a JSON number (the JSON grammar, checked) as float64.
func (s *scanner) float() (float64, bool) {
	s.ws()
	j := s.i
	digits := func() int {
		k := j
		for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
			j++
		}
		return j - k
	}
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	intStart := j
	nd := digits()
	if nd == 0 || (nd > 1 && s.b[intStart] == '0') {
		return 0, false
	}
	if j < len(s.b) && s.b[j] == '.' {
		j++
		if digits() == 0 {
			return 0, false
		}
	}
	if j < len(s.b) && (s.b[j] == 'e' || s.b[j] == 'E') {
		j++
		if j < len(s.b) && (s.b[j] == '+' || s.b[j] == '-') {
			j++
		}
		if digits() == 0 {
			return 0, false
		}
	}
	tok := s.b[s.i:j]
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(tok), len(tok)), 64)
	if err != nil {
		return 0, false
	}
	s.i = j
	return f, true
}

func (s *scanner) bool() (bool, bool) {
	s.ws()
	rest := s.b[s.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		s.i += 4
		return true, true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		s.i += 5
		return false, true
	}
	return false, false
}

func (s *scanner) time() (time.Time, bool) {
	b, ok := s.str()
	if !ok {
		return time.Time{}, false
	}
	var t time.Time
	if err := t.UnmarshalText(b); err != nil { // the RFC 3339 parser UnmarshalJSON uses
		return time.Time{}, false
	}
	return t, true
}

func (s *scanner) reservations(dst []events.Reservation) ([]events.Reservation, bool) {
	dst = dst[:0]
	if !s.consume('[') {
		return nil, false
	}
	if s.consume(']') {
		return dst, true
	}
	for {
		if !s.consume('{') {
			return nil, false
		}
		var r events.Reservation
		if !s.consume('}') {
			for {
				k, ok := s.str()
				if !ok || !s.consume(':') {
					return nil, false
				}
				switch string(k) {
				case "key":
					r.Key, ok = s.intern()
				case "nano_usd":
					r.NanoUSD, ok = s.int()
				default:
					return nil, false
				}
				if !ok {
					return nil, false
				}
				if s.consume(',') {
					continue
				}
				if s.consume('}') {
					break
				}
				return nil, false
			}
		}
		dst = append(dst, r)
		if s.consume(',') {
			continue
		}
		if s.consume(']') {
			return dst, true
		}
		return nil, false
	}
}

// v4Fields are the fields UsageRecordedV4 adds to V3, and those V5 adds
// to V4.
type v4Fields struct {
	AdmissionAction, AdmissionCategory string
	AdmissionScore                     float64
	Router, RouteClass, Cache          string
	PromptID, PromptVersion            string
}

func (x *v4Fields) field(s *scanner, name string) (ok bool) {
	switch name {
	case "admission_action":
		x.AdmissionAction, ok = s.intern()
	case "admission_category":
		x.AdmissionCategory, ok = s.intern()
	case "admission_score":
		x.AdmissionScore, ok = s.float()
	case "router":
		x.Router, ok = s.intern()
	case "route_class":
		x.RouteClass, ok = s.intern()
	case "cache":
		x.Cache, ok = s.intern()
	case "prompt_id":
		x.PromptID, ok = s.intern()
	case "prompt_version":
		x.PromptVersion, ok = s.intern()
	}
	return ok
}

// v4 is the UsageRecordedV4 of u and x.
func (x v4Fields) v4(u events.UsageRecordedV3) events.UsageRecordedV4 {
	return events.UsageRecordedV4{UsageRecordedV3: u, AdmissionAction: x.AdmissionAction, AdmissionCategory: x.AdmissionCategory,
		AdmissionScore: x.AdmissionScore, Router: x.Router, RouteClass: x.RouteClass, Cache: x.Cache}
}

// fastDecodeRecorded decodes a UsageRecordedV1, V2, V3, V4 or V5 body
// (version 1 to 5) into u (which the caller has reset, keeping Reservations'
// capacity), and V4's and V5's own fields into x (version 4 and 5); the fields a
// version does not have are unknown fields. It reports false when the body
// needs encoding/json.
func fastDecodeRecorded(data []byte, u *events.UsageRecordedV3, version int, in *interner, x *v4Fields) bool {
	s := scanner{b: data, in: in}
	if !s.consume('{') {
		return false
	}
	if s.consume('}') {
		s.ws()
		return s.i == len(s.b)
	}
	for {
		k, ok := s.str()
		if !ok || !s.consume(':') {
			return false
		}
		switch string(k) {
		case "request_id":
			u.RequestID, ok = s.plainString()
		case "tenant":
			u.Tenant, ok = s.intern()
		case "key_id":
			u.KeyID, ok = s.intern()
		case "model":
			u.Model, ok = s.intern()
		case "endpoint":
			u.Endpoint, ok = s.intern()
		case "stream":
			u.Stream, ok = s.bool()
		case "prompt_tokens":
			u.PromptTokens, ok = s.int()
		case "cached_prompt_tokens":
			u.CachedPromptTokens, ok = s.int()
		case "completion_tokens":
			u.CompletionTokens, ok = s.int()
		case "estimated":
			u.Estimated, ok = s.bool()
		case "status":
			u.Status, ok = s.intern()
		case "error_code":
			u.ErrorCode, ok = s.intern()
		case "latency_ms":
			u.LatencyMS, ok = s.float()
		case "ttft_ms":
			u.TTFTMS, ok = s.float()
		case "worker_id":
			u.WorkerID, ok = s.intern()
		case "reporter":
			u.Reporter, ok = s.intern()
		case "started_at":
			u.StartedAt, ok = s.time()
		case "finished_at":
			u.FinishedAt, ok = s.time()
		case "reservations":
			if version < 2 {
				return false
			}
			u.Reservations, ok = s.reservations(u.Reservations)
		case "batch":
			if version < 3 {
				return false
			}
			u.Batch, ok = s.bool()
		case "batch_id":
			if version < 3 {
				return false
			}
			u.BatchID, ok = s.intern()
		case "admission_action", "admission_category", "admission_score", "router", "route_class", "cache":
			if version < 4 || x == nil {
				return false
			}
			ok = x.field(&s, string(k))
		case "prompt_id", "prompt_version":
			if version < 5 || x == nil {
				return false
			}
			ok = x.field(&s, string(k))
		default:
			return false
		}
		if !ok {
			return false
		}
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			s.ws()
			return s.i == len(s.b)
		}
		return false
	}
}
