package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/services/ingest/chunk"
	"github.com/aiforge/aiforge/services/ingest/extract"
)

// ParseRequest is one file to parse and chunk.
type ParseRequest struct {
	Filename      string `json:"filename"`
	MaxTokens     int    `json:"max_tokens,omitempty"`
	OverlapTokens int    `json:"overlap_tokens,omitempty"`
	Data          []byte `json:"-"`
}

// Parsed is a parsed and chunked file: the chunks as the JSON lines stored
// under ChunksKey (one events.DocChunk a line), their count, the page count
// of paginated formats and the extractor's warnings.
type Parsed struct {
	Chunks   int      `json:"chunks"`
	Pages    int      `json:"pages,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	JSONL    []byte   `json:"-"`
	// PeakRSS is the parsing child's peak resident set in bytes (0 when
	// parsed in process or not known).
	PeakRSS int64 `json:"-"`
}

// Parser extracts the text of an untrusted file and chunks it. An error
// that is a *FileError is the file's fault and permanent; any other error
// is transient (the caller's context ended, the parser could not start).
type Parser interface {
	Parse(ctx context.Context, req ParseRequest) (*Parsed, error)
}

// FileError is a file that cannot be ingested, whatever the number of
// attempts: Code is the DocFailedV1 code (invalid_file, unsupported_file),
// Limit names the limit it broke, if any (extract.LimitError's names, or
// the child process's "parser.max_memory_bytes", "parser.max_cpu_seconds",
// "parser.time_budget").
type FileError struct {
	Code    string `json:"code"`
	Limit   string `json:"limit,omitempty"`
	Message string `json:"message"`
	// PeakRSS is the parsing child's peak resident set in bytes (0 when
	// parsed in process).
	PeakRSS int64 `json:"-"`
}

func (e *FileError) Error() string { return e.Message }

// InProcess parses in the calling process. It is what tests use, and what
// runs when the binary cannot start itself as the parser child (a test
// binary): extraction and chunking are bounded by the extractors' limits
// and by ctx, but a parser bug that loops or allocates without bound is not
// contained as in a ChildProcess.
type InProcess struct{ tok chunk.Tokenizer }

// NewInProcess loads the tokenizer and returns the parser.
func NewInProcess() (*InProcess, error) {
	tok, err := chunk.NewTiktoken()
	if err != nil {
		return nil, fmt.Errorf("ingest: tokenizer: %w", err)
	}
	return &InProcess{tok: tok}, nil
}

// Parse implements Parser.
func (p *InProcess) Parse(ctx context.Context, req ParseRequest) (*Parsed, error) {
	format := extract.Sniff(req.Filename, req.Data)
	ex, ok := extract.ForFormat(format)
	if !ok {
		return nil, &FileError{Code: "unsupported_file", Message: fmt.Sprintf("unsupported file type for %q (supported: PDF, HTML, Markdown, plain text, DOCX)", req.Filename)}
	}
	doc, err := ex.Extract(ctx, bytes.NewReader(req.Data), int64(len(req.Data)))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fileError(fmt.Errorf("the %s file could not be parsed: %w", format, err))
	}
	chunks, err := chunk.Split(ctx, doc, chunk.Options{MaxTokens: req.MaxTokens, OverlapTokens: req.OverlapTokens}, p.tok)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fileError(err)
	}
	if len(chunks) == 0 {
		return nil, &FileError{Code: "invalid_file", Message: "the file has no text to index"}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, c := range chunks {
		_ = enc.Encode(events.DocChunk{Index: c.Index, Text: c.Text, Tokens: c.Tokens, Pages: c.Pages, HeadingPath: c.HeadingPath, Hash: c.Hash})
	}
	return &Parsed{Chunks: len(chunks), Pages: doc.Pages, Warnings: doc.Warnings, JSONL: buf.Bytes()}, nil
}

func fileError(err error) *FileError {
	fe := &FileError{Code: "invalid_file", Message: err.Error()}
	var le *extract.LimitError
	if errors.As(err, &le) {
		fe.Limit = le.Limit
	}
	return fe
}
