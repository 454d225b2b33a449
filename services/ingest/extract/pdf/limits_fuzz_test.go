package pdf

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/aiforge/aiforge/services/ingest/extract/internal/textdoc"
	"github.com/aiforge/aiforge/services/ingest/internal/hostile"
	"github.com/aiforge/aiforge/services/ingest/internal/testpdf"
)

// FuzzPDFLimits: prescan, given anything, returns nil or a LimitError
// naming a limit, never panics, and is deterministic. The limits are
// small so that each input is checked quickly.
func FuzzPDFLimits(f *testing.F) {
	f.Add(testpdf.OnePage("%PDF-1.7", "BT /F1 12 Tf 72 720 Td (hello (nested) \\) world) Tj ET"))
	f.Add(testpdf.OnePage("%PDF-1.4", "BT /F1 12 Tf 72 720 Td <48656c6c6f> Tj [(a) -20 (b)] TJ ET BI /W 1 /H 1 ID \x00(\x01 EI Q"))
	// the small, quickly built members of the hostile corpus
	f.Add(hostile.CyclicPages())
	f.Add(hostile.HugeName())
	f.Add(hostile.HugeArray())
	f.Add(hostile.PDF("<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]] /Count 0 >>",
		hostile.Stream("/Filter [/ASCII85Decode /FlateDecode] /Type /ObjStm /N 1 /First 4", []byte("87cURD]i,~>"))))
	lim := Limits{MaxStreamBytes: 1 << 20, MaxDocumentBytes: 4 << 20, MaxStringBytes: 64 << 10, MaxTokenBytes: 4 << 10, MaxNesting: 32, MaxElements: 4096}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := prescan(context.Background(), bytes.NewReader(data), int64(len(data)), lim)
		if err == nil {
			return
		}
		var le *textdoc.LimitError
		if !errors.As(err, &le) || le.Limit == "" {
			t.Fatalf("prescan = %v, want nil or a LimitError", err)
		}
		again := prescan(context.Background(), bytes.NewReader(data), int64(len(data)), lim)
		if again == nil || again.Error() != err.Error() {
			t.Fatalf("prescan is not deterministic: %v then %v", err, again)
		}
	})
}
