package scan

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// pb is a minimal protobuf writer for test inputs.
type pb struct{ b []byte }

func (p *pb) tag(num uint64, wire uint8) *pb {
	p.b = binary.AppendUvarint(p.b, num<<3|uint64(wire))
	return p
}

func (p *pb) bytes(num uint64, v []byte) *pb {
	p.tag(num, wireBytes)
	p.b = binary.AppendUvarint(p.b, uint64(len(v)))
	p.b = append(p.b, v...)
	return p
}

func (p *pb) varint(num, v uint64) *pb {
	p.tag(num, wireVarint)
	p.b = binary.AppendUvarint(p.b, v)
	return p
}

func (p *pb) float(num uint64, f float32) *pb {
	p.tag(num, wireFixed32)
	p.b = binary.LittleEndian.AppendUint32(p.b, math.Float32bits(f))
	return p
}

func spPiece(piece string, score float32, typ uint64) []byte {
	return (&pb{}).bytes(spPieceFieldPiece, []byte(piece)).float(spPieceFieldScore, score).varint(spPieceFieldType, typ).b
}

// writeSP builds a SentencePiece model shaped like the real ones: pieces,
// then trainer and normalizer specs.
func writeSP(pieces ...string) []byte {
	m := &pb{}
	for i, p := range pieces {
		typ := uint64(1)
		if i == 0 {
			typ = 2 // <unk>
		}
		m.bytes(spFieldPieces, spPiece(p, -float32(i), typ))
	}
	trainer := (&pb{}).bytes(1, []byte("input.txt")).varint(3, 32000).float(10, 0.9995).b
	normalizer := (&pb{}).bytes(1, []byte("nmt_nfkc")).varint(3, 1).b
	m.bytes(spFieldTrainerSpec, trainer).bytes(spFieldNormalizerSpec, normalizer)
	return m.b
}

func TestSentencePieceValid(t *testing.T) {
	info, err := ParseSentencePiece(writeSP("<unk>", "<s>", "</s>", "▁the", "日本"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Pieces != 5 {
		t.Fatalf("pieces %d", info.Pieces)
	}
	for _, name := range []string{"tokenizer.model", "spiece.model", "sub/sentencepiece.bpe.model"} {
		v := scanFiles(map[string][]byte{name: writeSP("<unk>", "a")}, nil)
		if !v.Accepted || v.Files[0].Format != "sentencepiece" {
			t.Fatalf("%s: %+v", name, v)
		}
	}
}

func TestSentencePieceInvalid(t *testing.T) {
	good := writeSP("<unk>", "a")
	longVarint := append([]byte{0x0a}, bytes.Repeat([]byte{0x80}, 10)...)
	overflowVarint := append([]byte{0x0a}, append(bytes.Repeat([]byte{0xff}, 9), 0x02)...)
	cases := []struct {
		name string
		file []byte
	}{
		{"no pieces", (&pb{}).bytes(spFieldTrainerSpec, nil).b},
		{"empty", nil},
		{"truncated", good[:len(good)-3]},
		{"length past end", []byte{0x0a, 0x7f, 0x0a, 0x01, 'a'}},
		{"varint too long", longVarint},
		{"varint overflows", overflowVarint},
		{"group wire type", (&pb{}).bytes(spFieldPieces, spPiece("a", 0, 1)).tag(6, 3).b},
		{"end group wire type", append((&pb{}).bytes(spFieldPieces, spPiece("a", 0, 1)).b, 0x0c)},
		{"reserved wire type", append((&pb{}).bytes(spFieldPieces, spPiece("a", 0, 1)).b, 0x0e)},
		{"field zero", append((&pb{}).bytes(spFieldPieces, spPiece("a", 0, 1)).b, 0x02, 0x00)},
		{"unknown top field", (&pb{}).bytes(spFieldPieces, spPiece("a", 0, 1)).bytes(9, []byte("x")).b},
		{"pieces not bytes", (&pb{}).varint(spFieldPieces, 1).b},
		{"piece not utf8", (&pb{}).bytes(spFieldPieces, spPiece("a\xff", 0, 1)).b},
		{"piece empty", (&pb{}).bytes(spFieldPieces, spPiece("", 0, 1)).b},
		{"piece missing string", (&pb{}).bytes(spFieldPieces, (&pb{}).float(2, 0).b).b},
		{"score wrong wire", (&pb{}).bytes(spFieldPieces, (&pb{}).bytes(1, []byte("a")).varint(2, 0).b).b},
		{"type unknown", (&pb{}).bytes(spFieldPieces, spPiece("a", 0, 9)).b},
		{"piece field past end", (&pb{}).bytes(spFieldPieces, []byte{0x0a, 0x05, 'a'}).b},
		{"trainer spec framing", (&pb{}).bytes(spFieldPieces, spPiece("a", 0, 1)).bytes(spFieldTrainerSpec, []byte{0x0a, 0x09}).b},
		{"spec not a message", (&pb{}).bytes(spFieldPieces, spPiece("a", 0, 1)).varint(spFieldNormalizerSpec, 1).b},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ParseSentencePiece(c.file); err == nil {
				t.Fatal("accepted")
			}
			v := scanFiles(map[string][]byte{"tokenizer.model": c.file}, nil)
			if v.Accepted {
				t.Fatalf("upload accepted: %+v", v)
			}
		})
	}
}

func TestSentencePieceNeedsModelName(t *testing.T) {
	sp := writeSP("<unk>", "a")
	for _, name := range []string{"tokenizer.bin", "tokenizer", "x.model.txt", ".model"} {
		v := scanFiles(map[string][]byte{name: sp}, nil)
		if v.Accepted {
			t.Fatalf("%s accepted as %s", name, v.Files[0].Format)
		}
	}
	// a pickle under a .model name stays a pickle
	v := scanFiles(map[string][]byte{"tokenizer.model": picklePayload}, nil)
	if v.Accepted || !hasCode(v.Reasons, CodePickle) {
		t.Fatalf("%v", v.Reasons)
	}
}

func FuzzSentencePiece(f *testing.F) {
	f.Add(writeSP("<unk>", "<s>", "▁a"))
	f.Add((&pb{}).bytes(spFieldPieces, spPiece("a", 0, 1)).b)
	f.Add([]byte{0x0a, 0x7f})
	f.Add(append([]byte{0x0a}, bytes.Repeat([]byte{0xff}, 10)...))
	f.Add([]byte(strings.Repeat("\x0a\x00", 4)))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := ParseSentencePiece(b)
		if err == nil && info.Pieces == 0 {
			t.Fatal("accepted without pieces")
		}
		if err == nil && info.Pieces > len(b)/5 {
			t.Fatalf("%d pieces from %d bytes", info.Pieces, len(b))
		}
	})
}
