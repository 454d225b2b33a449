package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// ChildLimits bound one parse in a child process. The zero value of a field
// selects its default.
type ChildLimits struct {
	// MemoryBytes is the address space the child may map beyond what it
	// holds when it starts (RLIMIT_AS, Linux); the Go heap is kept below
	// 3/4 of it. Default 4 GiB. Measured peaks (resident): about 350 MiB
	// for a 20,000-page PDF and for every document of the hostile corpus
	// (services/ingest/internal/hostile), most of it the tokenizer's ranks;
	// the tests hold the child under 1 GiB.
	MemoryBytes int64
	// CPU is the child's CPU-time limit (RLIMIT_CPU, Linux). Default: the
	// time budget.
	CPU time.Duration
	// Timeout is the per-document time budget: the child is killed when it
	// runs longer. Default 10 minutes.
	Timeout time.Duration
}

func (l ChildLimits) withDefaults() ChildLimits {
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = 4 << 30
	}
	if l.Timeout <= 0 {
		l.Timeout = 10 * time.Minute
	}
	if l.CPU <= 0 {
		l.CPU = l.Timeout
	}
	return l
}

// ChildProcess parses each file in a child process started from Command
// (the aiforge binary and its hidden "__parse" subcommand, which calls
// ServeParse): the file goes to its stdin, the chunks come back on its
// stdout. The child runs under ChildLimits and is killed at the time budget
// or when ctx ends, so no document can take the memory or the cores of the
// process that holds the bus; a child that dies of a limit fails the file
// with a FileError naming the limit.
type ChildProcess struct {
	Command []string
	Limits  ChildLimits
	// MaxOutput bounds the chunks read back. Default 1 GiB.
	MaxOutput int64
}

// childHeader is the first line on the child's stdin and stdout.
type childHeader struct {
	Request *ParseRequest `json:"request,omitempty"`
	Size    int64         `json:"size,omitempty"`
	Parsed  *Parsed       `json:"parsed,omitempty"`
	Error   *FileError    `json:"error,omitempty"`
}

// Parse implements Parser.
func (c *ChildProcess) Parse(ctx context.Context, req ParseRequest) (*Parsed, error) {
	if len(c.Command) == 0 {
		return nil, errors.New("ingest: child parser: no command")
	}
	lim := c.Limits.withDefaults()
	maxOut := c.MaxOutput
	if maxOut <= 0 {
		maxOut = 1 << 30
	}
	cctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, c.Command[0], c.Command[1:]...)
	cmd.Env = append(os.Environ(),
		"AIFORGE_PARSE_MEMORY_BYTES="+strconv.FormatInt(lim.MemoryBytes, 10),
		"AIFORGE_PARSE_CPU_SECONDS="+strconv.FormatInt(int64((lim.CPU+time.Second-1)/time.Second), 10))
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &limitedBuffer{b: &stderr, left: 64 << 10}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("ingest: start the parser child: %w", err)
	}
	go func() {
		hdr, _ := json.Marshal(childHeader{Request: &req, Size: int64(len(req.Data))})
		w := bufio.NewWriter(stdin)
		_, _ = w.Write(append(hdr, '\n'))
		_, _ = w.Write(req.Data)
		_ = w.Flush()
		_ = stdin.Close()
	}()
	br := bufio.NewReader(io.LimitReader(stdout, maxOut+1<<20))
	var hdr childHeader
	line, rerr := br.ReadBytes('\n')
	var body []byte
	if rerr == nil {
		if err := json.Unmarshal(line, &hdr); err != nil {
			rerr = fmt.Errorf("bad header from the parser child: %w", err)
		} else if hdr.Parsed != nil {
			// Never read more than the bound: the child's output is as
			// untrusted as the file it parsed.
			body, rerr = io.ReadAll(io.LimitReader(br, maxOut+1))
			if rerr == nil && int64(len(body)) > maxOut {
				rerr = &FileError{Code: "invalid_file", Limit: "parser.max_output_bytes", Message: fmt.Sprintf("the file's chunks exceed the limit parser.max_output_bytes (%d)", maxOut)}
			}
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	peak := peakRSS(cmd.ProcessState)
	p, err := c.outcome(ctx, cctx, lim, &hdr, body, rerr, werr, cmd.ProcessState, stderr.String())
	if p != nil {
		p.PeakRSS = peak
	}
	var fe *FileError
	if errors.As(err, &fe) {
		fe.PeakRSS = peak
	}
	return p, err
}

func (c *ChildProcess) outcome(ctx, cctx context.Context, lim ChildLimits, hdr *childHeader, body []byte, rerr, werr error, ps *os.ProcessState, stderr string) (*Parsed, error) {
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err() // shutdown: not the file's fault
	case cctx.Err() != nil:
		return nil, &FileError{Code: "invalid_file", Limit: "parser.time_budget",
			Message: fmt.Sprintf("parsing the file took longer than the limit parser.time_budget (%s)", lim.Timeout)}
	case hdr.Error != nil && werr == nil:
		return nil, hdr.Error
	case werr == nil && rerr == nil && hdr.Parsed != nil:
		p := hdr.Parsed
		p.JSONL = body
		return p, nil
	}
	var fe *FileError
	if errors.As(rerr, &fe) {
		return nil, fe
	}
	return nil, childDied(ps, stderr, lim)
}

// childDied classifies the death of a child that did not answer.
func childDied(ps *os.ProcessState, stderr string, lim ChildLimits) error {
	tail := strings.TrimSpace(stderr)
	if len(tail) > 300 {
		tail = tail[:300]
	}
	if killedByCPULimit(ps) {
		return &FileError{Code: "invalid_file", Limit: "parser.max_cpu_seconds",
			Message: fmt.Sprintf("parsing the file used more CPU time than the limit parser.max_cpu_seconds (%s)", lim.CPU)}
	}
	if strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory") {
		return &FileError{Code: "invalid_file", Limit: "parser.max_memory_bytes",
			Message: fmt.Sprintf("parsing the file needed more memory than the limit parser.max_memory_bytes (%d)", lim.MemoryBytes)}
	}
	return &FileError{Code: "invalid_file", Message: fmt.Sprintf("the parser process died on the file (%s): %s", ps, tail)}
}

type limitedBuffer struct {
	b    *bytes.Buffer
	left int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if l.left > 0 {
		n := min(len(p), l.left)
		l.b.Write(p[:n])
		l.left -= n
	}
	return len(p), nil
}

// ServeParse is the parser child's side (the "__parse" subcommand): it
// applies the limits handed down in its environment, reads one request
// from r, parses it in process and writes the result to w. It returns an
// error only when it could not answer at all.
func ServeParse(ctx context.Context, r io.Reader, w io.Writer) error {
	mem, _ := strconv.ParseInt(os.Getenv("AIFORGE_PARSE_MEMORY_BYTES"), 10, 64)
	cpu, _ := strconv.ParseInt(os.Getenv("AIFORGE_PARSE_CPU_SECONDS"), 10, 64)
	if mem > 0 {
		debug.SetMemoryLimit(mem / 4 * 3)
	}
	if err := setLimits(mem, cpu); err != nil {
		return fmt.Errorf("ingest: parser limits: %w", err)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("ingest: parser request: %w", err)
	}
	var hdr childHeader
	if err := json.Unmarshal(line, &hdr); err != nil || hdr.Request == nil || hdr.Size < 0 {
		return fmt.Errorf("ingest: parser request: bad header")
	}
	req := *hdr.Request
	req.Data = make([]byte, hdr.Size)
	if _, err := io.ReadFull(br, req.Data); err != nil {
		return fmt.Errorf("ingest: parser request: %w", err)
	}
	p, err := NewInProcess()
	if err != nil {
		return err
	}
	parsed, err := p.Parse(ctx, req)
	var out childHeader
	var fe *FileError
	switch {
	case errors.As(err, &fe):
		out.Error = fe
	case err != nil:
		return err
	default:
		out.Parsed = parsed
	}
	bw := bufio.NewWriter(w)
	b, _ := json.Marshal(out)
	_, _ = bw.Write(append(b, '\n'))
	if parsed != nil {
		_, _ = bw.Write(parsed.JSONL)
	}
	return bw.Flush()
}
