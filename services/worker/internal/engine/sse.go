package engine

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// maxEventBytes bounds one event of an engine's stream (its lines and
// data together): an engine, or an external provider, sending a line
// without end must not grow the worker's memory without bound. Each
// event becomes one bridge frame, which must fit a NATS message anyway.
const maxEventBytes = 1 << 20

// errEventTooLarge ends a stream whose event is over maxEventBytes.
var errEventTooLarge = errors.New("engine: a stream event is over 1 MiB")

// An engine's event stream is read field by field: OpenAI engines send
// `data:` events only, but real ones send more. llama-server reports an
// error after its 200 as a non-standard `error: {...}` line (followed by
// `data: [DONE]`); others send `event: error` with the error as data;
// comments (`: ping`), `id:` and `retry:` are ignored as the SSE
// specification says.

// sseEvent is one dispatched event: a data payload, or an engine error
// (its payload, possibly empty).
type sseEvent struct {
	data  []byte
	error bool
}

// sseReader reads an engine's event stream.
type sseReader struct {
	r      *bufio.Reader
	data   []byte
	errBuf []byte
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10)}
}

var (
	fieldData  = []byte("data")
	fieldEvent = []byte("event")
	fieldError = []byte("error")
)

// Next returns the next event; its slices are valid until the next call.
// io.EOF means the stream ended between events, io.ErrUnexpectedEOF inside
// one (an `error:` line the engine closed the stream after is still
// returned as an error event).
func (s *sseReader) Next() (sseEvent, error) {
	s.data, s.errBuf = s.data[:0], s.errBuf[:0]
	haveData, haveErr, errorEvent := false, false, false
	for {
		line, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			full := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				if len(full)+len(s.data)+len(s.errBuf) > maxEventBytes {
					return sseEvent{}, errEventTooLarge
				}
				line, err = s.r.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
		}
		if len(line)+len(s.data)+len(s.errBuf) > maxEventBytes {
			return sseEvent{}, errEventTooLarge
		}
		if err != nil && !(err == io.EOF && len(line) > 0) {
			if err == io.EOF {
				if haveErr {
					return sseEvent{data: s.errBuf, error: true}, nil
				}
				if haveData || errorEvent {
					return sseEvent{}, io.ErrUnexpectedEOF
				}
				return sseEvent{}, io.EOF
			}
			return sseEvent{}, err
		}
		if err == io.EOF {
			// A last line without its newline: an error line is reported,
			// anything else is a cut event.
			if name, v := splitField(bytes.TrimRight(line, "\r")); bytes.Equal(name, fieldError) {
				if haveErr {
					s.errBuf = append(s.errBuf, '\n')
				}
				s.errBuf = append(s.errBuf, v...)
				haveErr = true
			}
			if haveErr {
				return sseEvent{data: s.errBuf, error: true}, nil
			}
			if len(bytes.TrimSpace(line)) == 0 && !haveData && !errorEvent {
				return sseEvent{}, io.EOF
			}
			return sseEvent{}, io.ErrUnexpectedEOF
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			switch {
			case haveErr:
				return sseEvent{data: s.errBuf, error: true}, nil
			case errorEvent:
				return sseEvent{data: s.data, error: true}, nil
			case haveData:
				return sseEvent{data: s.data}, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment
		}
		name, v := splitField(line)
		switch {
		case bytes.Equal(name, fieldData):
			if haveData {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, v...)
			haveData = true
		case bytes.Equal(name, fieldError):
			if haveErr {
				s.errBuf = append(s.errBuf, '\n')
			}
			s.errBuf = append(s.errBuf, v...)
			haveErr = true
		case bytes.Equal(name, fieldEvent):
			errorEvent = bytes.Equal(v, fieldError)
		}
		// id, retry and unknown fields are ignored.
	}
}

// splitField splits an SSE line into its field name and value (one space
// after the colon dropped).
func splitField(line []byte) (name, value []byte) {
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return line, nil
	}
	v := line[i+1:]
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	return line[:i], v
}
