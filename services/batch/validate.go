package batch

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
)

// scanResult is what a pass over an input file found.
type scanResult struct {
	errs   []api.ErrorData
	model  string
	lines  int64
	tokens int64
}

func (v *scanResult) fail(max int, code, msg, param string, line int64) {
	if len(v.errs) >= max {
		return
	}
	d := api.ErrorData{Code: code, Message: msg}
	if param != "" {
		d.Param = &param
	}
	if line > 0 {
		d.Line = &line
	}
	v.errs = append(v.errs, d)
}

var errTooLong = errors.New("line too long")

// readLine reads one line (without its newline) of at most limit bytes;
// a longer one is errTooLong. At the end of the input it returns io.EOF
// with the last line, if any.
func readLine(br *bufio.Reader, buf []byte, limit int) ([]byte, error) {
	buf = buf[:0]
	for {
		frag, err := br.ReadSlice('\n')
		buf = append(buf, frag...)
		n := len(buf)
		if err == nil {
			n-- // the newline
		}
		if n > limit {
			return buf, errTooLong
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(buf[:n], []byte("\r")), err
	}
}

// scan reads the batch's input file once, checking every line; with
// publish set (the second pass, after a clean first), it also hands each
// line over as it goes. Errors it returns are the object store's or
// publish's (retried); what is wrong with the file is in the result.
func (s *Service) scan(ctx context.Context, rec api.Record, publish func(events.BatchLineV1) error) (scanResult, error) {
	var v scanResult
	maxErrs := s.cfg.MaxErrors
	rc, _, err := s.deps.Objects.Get(ctx, rec.InputObjectKey)
	if errors.Is(err, objstore.ErrNotFound) {
		v.fail(maxErrs, api.CodeFileNotFound, fmt.Sprintf("The input file %s was not found.", rec.InputFileID), "input_file_id", 0)
		return v, nil
	}
	if err != nil {
		return v, fmt.Errorf("input file: %w", err)
	}
	defer func() { _ = rc.Close() }()
	maxPayload := int(s.deps.NC.MaxPayload())
	lineLimit := min(api.MaxLineBytes, maxPayload-2048)
	br := bufio.NewReaderSize(io.LimitReader(rc, api.MaxFileBytes+1), 64<<10)
	seen := map[[32]byte]int64{}
	buf := make([]byte, 0, 64<<10)
	var read int64
	for lineNo := int64(1); len(v.errs) < maxErrs; lineNo++ {
		if lineNo%1024 == 0 && ctx.Err() != nil {
			return v, ctx.Err()
		}
		line, rerr := readLine(br, buf, lineLimit)
		buf = line[:0]
		read += int64(len(line)) + 1
		if read > api.MaxFileBytes+1 {
			v.fail(maxErrs, api.CodeFileTooLarge, fmt.Sprintf("The input file is larger than %d bytes.", api.MaxFileBytes), "input_file_id", 0)
			break
		}
		if errors.Is(rerr, errTooLong) {
			v.fail(maxErrs, api.CodeLineTooLarge, fmt.Sprintf("Line %d is larger than %d bytes.", lineNo, lineLimit), "", lineNo)
			break
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return v, fmt.Errorf("input file: %w", rerr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if v.lines == api.MaxLines {
				v.fail(maxErrs, api.CodeTooManyLines, fmt.Sprintf("The input file has more than %d lines.", api.MaxLines), "input_file_id", lineNo)
				break
			}
			ev, ok := s.checkLine(&v, rec, line, lineNo, seen)
			if ok && publish != nil {
				ev.Index = v.lines
				if err := publish(ev); err != nil {
					return v, err
				}
			}
			v.lines++
		}
		if rerr != nil { // io.EOF
			break
		}
	}
	if len(v.errs) == 0 && v.lines == 0 {
		v.fail(maxErrs, api.CodeEmptyFile, "The input file has no request lines.", "input_file_id", 0)
	}
	if len(v.errs) == 0 && v.model != "" && publish == nil {
		if _, err := s.reg.GetModel(ctx, v.model); errors.Is(err, registry.ErrNotFound) {
			v.fail(maxErrs, api.CodeModelNotFound, fmt.Sprintf("The model '%s' does not exist.", v.model), "body.model", 1)
		} else if err != nil {
			return v, fmt.Errorf("model %s: %w", v.model, err)
		}
	}
	return v, nil
}

// checkLine checks one request line; ok is false when it failed (the
// error is in v).
func (s *Service) checkLine(v *scanResult, rec api.Record, line []byte, lineNo int64, seen map[[32]byte]int64) (events.BatchLineV1, bool) {
	maxErrs := s.cfg.MaxErrors
	var in api.InputLine
	if err := json.Unmarshal(line, &in); err != nil {
		v.fail(maxErrs, api.CodeInvalidJSONL, fmt.Sprintf("Line %d is not a JSON object: %s.", lineNo, trimJSONErr(err)), "", lineNo)
		return events.BatchLineV1{}, false
	}
	if in.CustomID == "" {
		v.fail(maxErrs, api.CodeMissingCustomID, fmt.Sprintf("Line %d has no custom_id.", lineNo), "custom_id", lineNo)
		return events.BatchLineV1{}, false
	}
	sum := sha256.Sum256([]byte(in.CustomID))
	if first, dup := seen[sum]; dup {
		v.fail(maxErrs, api.CodeDuplicateCustomID, fmt.Sprintf("The custom_id of line %d is also the custom_id of line %d; each must be unique.", lineNo, first), "custom_id", lineNo)
		return events.BatchLineV1{}, false
	}
	seen[sum] = lineNo
	if in.Method != "POST" {
		v.fail(maxErrs, api.CodeInvalidMethod, fmt.Sprintf("Line %d: method must be POST.", lineNo), "method", lineNo)
		return events.BatchLineV1{}, false
	}
	if !slices.Contains(api.Endpoints, in.URL) {
		v.fail(maxErrs, api.CodeInvalidURL, fmt.Sprintf("Line %d: url must be one of %v.", lineNo, api.Endpoints), "url", lineNo)
		return events.BatchLineV1{}, false
	}
	if in.URL != rec.Endpoint {
		v.fail(maxErrs, api.CodeMismatchedURL, fmt.Sprintf("Line %d: url %s is not the batch's endpoint %s.", lineNo, in.URL, rec.Endpoint), "url", lineNo)
		return events.BatchLineV1{}, false
	}
	var body struct {
		Model               *string `json:"model"`
		MaxTokens           int64   `json:"max_tokens"`
		MaxCompletionTokens int64   `json:"max_completion_tokens"`
		MaxOutputTokens     int64   `json:"max_output_tokens"`
	}
	if b := bytes.TrimSpace(in.Body); len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &body) != nil {
		v.fail(maxErrs, api.CodeInvalidBody, fmt.Sprintf("Line %d: body must be a JSON object.", lineNo), "body", lineNo)
		return events.BatchLineV1{}, false
	}
	if body.Model == nil || *body.Model == "" {
		v.fail(maxErrs, api.CodeMissingModel, fmt.Sprintf("Line %d: body.model is required.", lineNo), "body.model", lineNo)
		return events.BatchLineV1{}, false
	}
	if in.URL == api.EndpointResponses {
		if _, _, err := contracts.ResponsesToChat(in.Body); err != nil {
			var re *contracts.ResponsesError
			param := "body"
			if errors.As(err, &re) {
				param = "body." + re.Param
			}
			code := api.CodeInvalidBody
			if errors.Is(err, contracts.ErrResponsesFileSearch) {
				code = api.CodeUnsupported
			}
			v.fail(maxErrs, code, fmt.Sprintf("Line %d: %s.", lineNo, err), param, lineNo)
			return events.BatchLineV1{}, false
		}
	}
	if v.model == "" {
		v.model = *body.Model
	} else if *body.Model != v.model {
		v.fail(maxErrs, api.CodeInvalidBody, fmt.Sprintf("Line %d: every line of a batch must use the same model; this one uses '%s', earlier lines '%s'.", lineNo, *body.Model, v.model), "body.model", lineNo)
		return events.BatchLineV1{}, false
	}
	est := int64(len(in.Body))/4 + max(body.MaxTokens, body.MaxCompletionTokens, body.MaxOutputTokens)
	v.tokens += est
	return events.BatchLineV1{BatchID: rec.ID, Tenant: rec.Tenant, KeyID: rec.KeyID, CustomID: in.CustomID, URL: in.URL,
		Model: *body.Model, Body: in.Body, EstimatedTokens: est}, true
}

func trimJSONErr(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return err.Error()
}

// validate checks a validating batch's input file and enqueues its lines,
// or fails it.
func (r *runner) validate(rec api.Record) error {
	v, err := r.s.scan(r.ctx, rec, nil)
	if err != nil {
		return err
	}
	if r.record().Status == api.StatusCancelling {
		return nil // the run loop takes it straight to cancelled
	}
	if len(v.errs) > 0 {
		r.log.Info("batch: validation failed", "errors", len(v.errs))
		return r.finish(api.StatusFailed, nil, nil, api.RequestCounts{}, &api.Errors{Object: "list", Data: v.errs})
	}
	if err := r.enqueue(rec, v.lines); err != nil {
		return err
	}
	exp := r.s.expiry(rec)
	return r.write(func(cur *api.Record) error {
		if cur.Status != api.StatusValidating {
			return kv.ErrNoChange
		}
		cur.Status = api.StatusInProgress
		cur.InProgressAt = unixNow()
		cur.Models = []string{v.model}
		cur.Model = v.model
		cur.RequestCounts = api.RequestCounts{Total: v.lines}
		cur.EstimatedTokens = v.tokens
		cur.Expiry = exp
		e := exp.Unix()
		cur.ExpiresAt = &e
		return nil
	})
}

// enqueue publishes every line of a validated input file, unless a
// validation before a crash did (each line's envelope id is its LineID,
// so one published again within the stream's duplicate window is stored
// once).
func (r *runner) enqueue(rec api.Record, lines int64) error {
	info, err := r.s.stream.Info(r.ctx, jetstream.WithSubjectFilter(events.BatchLinesOf(rec.ID)))
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	var have uint64
	for _, n := range info.State.Subjects {
		have += n
	}
	if have >= uint64(lines) {
		return nil
	}
	start := time.Now()
	var pending []jetstream.PubAckFuture
	v, err := r.s.scan(r.ctx, rec, func(l events.BatchLineV1) error {
		f, err := r.s.publishAsync(l, events.LineID(l.BatchID, l.Index), l.Tenant)
		if err != nil {
			return fmt.Errorf("publish line %d: %w", l.Index, err)
		}
		pending = append(pending, f)
		if len(pending) >= publishWindow {
			if err := waitAcks(r.ctx, pending); err != nil {
				return err
			}
			pending = pending[:0]
		}
		return nil
	})
	if err == nil {
		err = waitAcks(r.ctx, pending)
	}
	if err != nil {
		return err
	}
	if v.lines != lines || len(v.errs) > 0 {
		return fmt.Errorf("the input file changed between its two reads (%d lines, then %d)", lines, v.lines)
	}
	r.log.Info("batch: lines enqueued", "lines", lines, "took", time.Since(start))
	return nil
}
