// Package hostile builds the corpus of hostile documents the ingest tests
// feed to the parser: decompression bombs, huge strings, tokens and arrays,
// deep nesting, cyclic references, whitespace floods, runs without
// whitespace and huge DOCX paragraphs. Each case names the extraction limit
// it must break ("" for documents that must be processed, in linear time).
package hostile

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/adler32"
	"strings"
	"sync"
)

// Case is one hostile document.
type Case struct {
	Name     string
	Filename string
	Data     func() []byte // built on first use and cached
	// Limit is the limit the document must break (as LimitError.Limit
	// names it); "" when it must be processed.
	Limit string
	// Heavy cases decompress a gigabyte or more before they break their
	// limit: seconds, minutes under the race detector, which tests skip
	// them under.
	Heavy bool
}

// Corpus returns every case.
func Corpus() []Case {
	return []Case{
		{"deflate bomb: 12 streams of 100 MiB", "bomb.pdf", DeflateBomb, "pdf.max_document_bytes", true},
		{"1 GiB literal string behind two FlateDecode filters", "string.pdf", StringBomb, "pdf.max_string_bytes", false},
		{"whitespace flood: 2 GiB behind two FlateDecode filters", "spaces.pdf", WhitespaceFlood, "pdf.max_stream_bytes", true},
		{"nesting 100,000 arrays deep", "nested.pdf", DeepNesting, "pdf.max_nesting_depth", false},
		{"cyclic page tree", "cycle.pdf", CyclicPages, "pdf.max_page_tree_depth", false},
		{"array of 4 million numbers", "array.pdf", HugeArray, "pdf.max_elements", false},
		{"name of 1 MiB", "name.pdf", HugeName, "pdf.max_token_bytes", false},
		{"huge DOCX paragraph", "para.docx", HugeDOCXParagraph, "docx.max_paragraph_bytes", false},
		{"300 KB run of one letter", "letters.txt", LetterRun, "", false},
		{"16 MiB whitespace flood with a word", "spaces.txt", TextWhitespace, "", false},
	}
}

func cached(f func() []byte) func() []byte { return sync.OnceValue(f) }

// stream is one stream object: its dictionary entries and raw data.
type stream struct {
	dict string
	data []byte
}

// PDF assembles a PDF (object i+1 is objs[i], a string or a stream; object
// 1 is the catalog) with a correct cross-reference table.
func PDF(objs ...any) []byte {
	var b bytes.Buffer
	b.WriteString("%PDF-1.7\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n", i+1)
		switch o := o.(type) {
		case stream:
			fmt.Fprintf(&b, "<< /Length %d %s >>\nstream\n", len(o.data), o.dict)
			b.Write(o.data)
			b.WriteString("\nendstream\n")
		case string:
			b.WriteString(o + "\n")
		}
		b.WriteString("endobj\n")
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

// Stream is a stream object for PDF.
func Stream(dict string, data []byte) any { return stream{dict, data} }

// onePage is a one-page PDF whose page has the given contents entry, with
// the extra objects (numbered from 5) after the font.
func onePage(contents string, extra ...any) []byte {
	objs := []any{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents " + contents + " >>",
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
	}
	return PDF(append(objs, extra...)...)
}

func zlibBytes(p []byte) []byte {
	var b bytes.Buffer
	w, _ := zlib.NewWriterLevel(&b, zlib.BestCompression)
	_, _ = w.Write(p)
	_ = w.Close()
	return b.Bytes()
}

// repeatZlib is a zlib stream of n MiB of byte c (plus prefix and suffix)
// built in well under a second: deflate blocks flushed on byte boundaries
// are identical once the window holds only c, so one is repeated.
func repeatZlib(prefix []byte, c byte, mib int, suffix []byte) []byte {
	chunk := bytes.Repeat([]byte{c}, 1<<20)
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	_, _ = w.Write(prefix)
	var marks []int
	for range 3 {
		_, _ = w.Write(chunk)
		_ = w.Flush()
		marks = append(marks, b.Len())
	}
	head, seg := b.Bytes()[:marks[1]], b.Bytes()[marks[1]:marks[2]]
	var out bytes.Buffer
	out.Write([]byte{0x78, 0xda})
	out.Write(head) // prefix and 2 MiB
	for i := 2; i < mib; i++ {
		out.Write(seg)
	}
	// the suffix, uncompressed in a final stored block
	var hdr [5]byte
	hdr[0] = 1
	binary.LittleEndian.PutUint16(hdr[1:], uint16(len(suffix)))
	binary.LittleEndian.PutUint16(hdr[3:], ^uint16(len(suffix)))
	out.Write(hdr[:])
	out.Write(suffix)
	h := adler32.New()
	_, _ = h.Write(prefix)
	for range mib {
		_, _ = h.Write(chunk)
	}
	_, _ = h.Write(suffix)
	_ = binary.Write(&out, binary.BigEndian, h.Sum32())
	return out.Bytes()
}

// DeflateBomb: a page whose content is 12 streams of 100 MiB of zeros
// (whitespace to a PDF), 100 KB each compressed.
var DeflateBomb = cached(func() []byte {
	z := repeatZlib(nil, 0, 100, nil)
	refs := make([]string, 12)
	extra := make([]any, 12)
	for i := range 12 {
		refs[i] = fmt.Sprintf("%d 0 R", 5+i)
		extra[i] = Stream("/Filter /FlateDecode", z)
	}
	return onePage("["+strings.Join(refs, " ")+"]", extra...)
})

// StringBomb: a literal string of 1 GiB in a content stream behind two
// FlateDecode filters, a file of about 6 KB.
var StringBomb = cached(func() []byte {
	inner := repeatZlib([]byte("BT /F1 12 Tf 72 720 Td ("), 'A', 1024, []byte(") Tj ET"))
	return onePage("5 0 R", Stream("/Filter [/FlateDecode /FlateDecode]", zlibBytes(inner)))
})

// WhitespaceFlood: a content stream of 2 GiB of spaces and no operator
// behind two FlateDecode filters.
var WhitespaceFlood = cached(func() []byte {
	inner := repeatZlib(nil, ' ', 2048, []byte("BT /F1 12 Tf 72 720 Td (late) Tj ET"))
	return onePage("5 0 R", Stream("/Filter [/FlateDecode /FlateDecode]", zlibBytes(inner)))
})

// DeepNesting: an object nested 100,000 arrays deep.
var DeepNesting = cached(func() []byte {
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	return onePage("5 0 R", Stream("", []byte("BT /F1 12 Tf 72 720 Td (hello) Tj ET")), "<< /Junk "+deep+" >>")
})

// CyclicPages: a page tree whose node is its own kid.
var CyclicPages = cached(func() []byte {
	return PDF(
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [2 0 R] /Count 1 >>",
	)
})

// HugeArray: a TJ array of 4 million numbers in a compressed content stream.
var HugeArray = cached(func() []byte {
	content := "BT /F1 12 Tf 72 720 Td [" + strings.Repeat("0 ", 4<<20) + "] TJ ET"
	return onePage("5 0 R", Stream("/Filter /FlateDecode", zlibBytes([]byte(content))))
})

// HugeName: a name token of 1 MiB.
var HugeName = cached(func() []byte {
	content := "BT /" + strings.Repeat("F", 1<<20) + " 12 Tf 72 720 Td (x) Tj ET"
	return onePage("5 0 R", Stream("/Filter /FlateDecode", zlibBytes([]byte(content))))
})

// HugeDOCXParagraph: a DOCX whose one paragraph holds 64 MiB of text in
// runs of 1 MiB.
var HugeDOCXParagraph = cached(func() []byte {
	var body strings.Builder
	body.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p>`)
	run := `<w:r><w:t>` + strings.Repeat("lorem ipsum ", (1<<20)/12) + `</w:t></w:r>`
	for range 64 {
		body.WriteString(run)
	}
	body.WriteString(`</w:p></w:body></w:document>`)
	return DOCX(body.String())
})

// DOCX packs a word/document.xml into a minimal DOCX.
func DOCX(documentXML string) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	add := func(name, s string) {
		w, _ := zw.Create(name)
		_, _ = w.Write([]byte(s))
	}
	add("[Content_Types].xml", `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>`)
	add("word/document.xml", documentXML)
	_ = zw.Close()
	return b.Bytes()
}

// LetterRun: 300 KB of one letter, no whitespace (quadratic for byte-pair
// merging done naively).
var LetterRun = cached(func() []byte { return bytes.Repeat([]byte("a"), 300_000) })

// TextWhitespace: 16 MiB of spaces and newlines around one word.
var TextWhitespace = cached(func() []byte {
	return []byte(strings.Repeat(" \n\t ", 2<<20) + "needle" + strings.Repeat("  ", 4<<20))
})
