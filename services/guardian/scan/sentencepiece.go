package scan

import (
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// SentencePiece ModelProto fields (sentencepiece_model.proto).
const (
	spFieldPieces            = 1 // repeated SentencePiece
	spFieldTrainerSpec       = 2
	spFieldNormalizerSpec    = 3
	spFieldSelfTestData      = 4
	spFieldDenormalizerSpec  = 5
	spPieceFieldPiece        = 1 // string
	spPieceFieldScore        = 2 // float
	spPieceFieldType         = 3 // enum Type
	spMaxPieceType           = 6 // NORMAL=1 ... BYTE=6
	maxSentencePieceFileSize = maxSmallFileForParsing
)

// Protobuf wire types accepted; groups (3, 4) and reserved ones are refused.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

var errPBEOF = errors.New("field runs past the end of its message")

// pbReader walks protobuf wire format within b, bounds-checking every step.
type pbReader struct {
	b   []byte
	pos int
}

func (p *pbReader) done() bool { return p.pos >= len(p.b) }

// varint reads a base-128 varint of at most 10 bytes whose value fits in
// 64 bits.
func (p *pbReader) varint() (uint64, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		if p.pos >= len(p.b) {
			return 0, errPBEOF
		}
		c := p.b[p.pos]
		p.pos++
		if i == 9 && c > 1 {
			return 0, errors.New("varint overflows 64 bits")
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, errors.New("varint longer than 10 bytes")
}

// field reads one tag and its payload. For wireBytes the payload is the
// length-delimited bytes; for the others it is the raw value bytes.
func (p *pbReader) field() (num uint64, wire uint8, payload []byte, val uint64, err error) {
	tag, err := p.varint()
	if err != nil {
		return 0, 0, nil, 0, fmt.Errorf("tag: %w", err)
	}
	num, wire = tag>>3, uint8(tag&7)
	if num == 0 || num > 1<<29-1 {
		return 0, 0, nil, 0, fmt.Errorf("field number %d out of range", num)
	}
	start := p.pos
	switch wire {
	case wireVarint:
		val, err = p.varint()
		if err != nil {
			return 0, 0, nil, 0, fmt.Errorf("field %d: %w", num, err)
		}
	case wireFixed64, wireFixed32:
		n := 8
		if wire == wireFixed32 {
			n = 4
		}
		if len(p.b)-p.pos < n {
			return 0, 0, nil, 0, fmt.Errorf("field %d: %w", num, errPBEOF)
		}
		p.pos += n
	case wireBytes:
		n, err := p.varint()
		if err != nil {
			return 0, 0, nil, 0, fmt.Errorf("field %d length: %w", num, err)
		}
		if n > uint64(len(p.b)-p.pos) {
			return 0, 0, nil, 0, fmt.Errorf("field %d: length %d: %w", num, n, errPBEOF)
		}
		start = p.pos
		p.pos += int(n)
	default:
		return 0, 0, nil, 0, fmt.Errorf("field %d: wire type %d not allowed", num, wire)
	}
	return num, wire, p.b[start:p.pos], val, nil
}

// SentencePieceInfo summarises a valid SentencePiece model.
type SentencePieceInfo struct {
	Pieces int
}

// ParseSentencePiece structurally validates a SentencePiece ModelProto: it
// walks the protobuf wire format with bounds checks, accepts only the known
// top-level fields (pieces, trainer/normalizer specs, self-test data,
// denormalizer spec), requires at least one piece and every piece a valid
// UTF-8 string (non-empty, as SentencePiece itself requires). Nothing is interpreted beyond that.
func ParseSentencePiece(b []byte) (SentencePieceInfo, error) {
	var info SentencePieceInfo
	p := &pbReader{b: b}
	for !p.done() {
		num, wire, payload, _, err := p.field()
		if err != nil {
			return info, err
		}
		switch num {
		case spFieldPieces:
			if wire != wireBytes {
				return info, fmt.Errorf("piece %d: wire type %d, want length-delimited", info.Pieces, wire)
			}
			if err := checkSentencePiece(payload); err != nil {
				return info, fmt.Errorf("piece %d: %w", info.Pieces, err)
			}
			info.Pieces++
		case spFieldTrainerSpec, spFieldNormalizerSpec, spFieldSelfTestData, spFieldDenormalizerSpec:
			if wire != wireBytes {
				return info, fmt.Errorf("field %d: wire type %d, want a message", num, wire)
			}
			if err := walkMessage(payload); err != nil {
				return info, fmt.Errorf("field %d: %w", num, err)
			}
		default:
			return info, fmt.Errorf("unknown ModelProto field %d", num)
		}
	}
	if info.Pieces == 0 {
		return info, errors.New("no pieces")
	}
	return info, nil
}

func checkSentencePiece(b []byte) error {
	p := &pbReader{b: b}
	havePiece := false
	for !p.done() {
		num, wire, payload, val, err := p.field()
		if err != nil {
			return err
		}
		switch num {
		case spPieceFieldPiece:
			if wire != wireBytes {
				return fmt.Errorf("piece: wire type %d, want a string", wire)
			}
			if len(payload) == 0 {
				return errors.New("piece is empty")
			}
			if !utf8.Valid(payload) {
				return errors.New("piece is not valid UTF-8")
			}
			havePiece = true
		case spPieceFieldScore:
			if wire != wireFixed32 {
				return fmt.Errorf("score: wire type %d, want float", wire)
			}
		case spPieceFieldType:
			if wire != wireVarint {
				return fmt.Errorf("type: wire type %d, want enum", wire)
			}
			if val < 1 || val > spMaxPieceType {
				return fmt.Errorf("type %d unknown", val)
			}
		default:
			return fmt.Errorf("unknown SentencePiece field %d", num)
		}
	}
	if !havePiece {
		return errors.New("no piece string")
	}
	return nil
}

// walkMessage checks that b is a well-formed sequence of fields. Nested
// messages cannot be told from strings without the schema, so only the
// framing of this level is checked.
func walkMessage(b []byte) error {
	p := &pbReader{b: b}
	for !p.done() {
		if _, _, _, _, err := p.field(); err != nil {
			return err
		}
	}
	return nil
}

// scanSentencePiece reads a bounded SentencePiece file and validates it.
func scanSentencePiece(r io.ReaderAt, size int64) (SentencePieceInfo, error) {
	if size > maxSentencePieceFileSize {
		return SentencePieceInfo{}, fmt.Errorf("%d bytes is larger than %d", size, maxSentencePieceFileSize)
	}
	b := make([]byte, size)
	if err := readAtFull(r, b, 0); err != nil {
		return SentencePieceInfo{}, err
	}
	return ParseSentencePiece(b)
}
