package contracts

import (
	"bufio"
	"bytes"
	"io"
)

// SSE framing as OpenAI streams it: "data: <json>\n\n", ending with
// "data: [DONE]\n\n". Errors mid-stream are a data event whose JSON is an
// error object, and no [DONE] follows.

var (
	ssePrefix = []byte("data: ")
	sseSuffix = []byte("\n\n")
	sseDone   = []byte("data: [DONE]\n\n")
	// DoneMarker is the payload that ends an OpenAI stream.
	DoneMarker = []byte("[DONE]")
)

// WriteEvent writes one data event. A payload with newlines becomes one
// "data:" line per line, which readers join back with "\n".
func WriteEvent(w io.Writer, payload []byte) error {
	if bytes.IndexByte(payload, '\n') >= 0 {
		for _, line := range bytes.Split(payload, []byte("\n")) {
			if _, err := w.Write(ssePrefix); err != nil {
				return err
			}
			if _, err := w.Write(line); err != nil {
				return err
			}
			if _, err := w.Write(sseSuffix[:1]); err != nil {
				return err
			}
		}
		_, err := w.Write(sseSuffix[:1])
		return err
	}
	if _, err := w.Write(ssePrefix); err != nil {
		return err
	}
	if _, err := w.Write(payload); err != nil {
		return err
	}
	_, err := w.Write(sseSuffix)
	return err
}

// WriteDone writes the final [DONE] event.
func WriteDone(w io.Writer) error {
	_, err := w.Write(sseDone)
	return err
}

// WriteErrorEvent writes e as a data event.
func WriteErrorEvent(w io.Writer, e *Error) error { return WriteEvent(w, e.Body()) }

// SSEReader reads data payloads from an event stream. Multi-line data fields
// are joined with "\n"; comments and other fields are skipped.
type SSEReader struct {
	r   *bufio.Reader
	buf []byte
}

// sseBuffer holds a typical event line; a longer one is collected whole in
// Next. It was 64 KiB: a zeroed 64 KiB allocation per streamed request,
// most of the garbage a stream made.
const sseBuffer = 4 << 10

// NewSSEReader reads from r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, sseBuffer)}
}

// Next returns the next data payload. The slice is valid until the next call.
// io.EOF means the stream ended cleanly between events; io.ErrUnexpectedEOF
// means it ended inside one.
func (s *SSEReader) Next() ([]byte, error) {
	s.buf = s.buf[:0]
	have := false
	for {
		line, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: collect it whole.
			full := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				line, err = s.r.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
		}
		if err != nil {
			if err == io.EOF {
				// A stream that ends inside an event (a cut line, or lines
				// without the closing blank line) did not end cleanly: never
				// pass a possibly truncated payload on as complete.
				if have || len(bytes.TrimSpace(line)) > 0 {
					return nil, io.ErrUnexpectedEOF
				}
				return nil, io.EOF
			}
			return nil, err
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		if len(trimmed) == 0 {
			if have {
				return s.buf, nil
			}
			continue
		}
		if bytes.HasPrefix(trimmed, []byte("data:")) {
			s.appendData(trimmed, &have)
		}
	}
}

func (s *SSEReader) appendData(line []byte, have *bool) {
	v := bytes.TrimRight(line[len("data:"):], "\r\n")
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	if *have {
		s.buf = append(s.buf, '\n')
	}
	s.buf = append(s.buf, v...)
	*have = true
}
