package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	pkgfiles "github.com/aiforge/aiforge/pkg/files"
	"github.com/aiforge/aiforge/pkg/kv"
)

// OutputFileID and ErrorFileID are a batch's output and error file ids:
// derived from the batch id, so files written again after a crash replace
// themselves.
func OutputFileID(batchID string) string {
	return "file-" + strings.TrimPrefix(batchID, "batch_") + "-output"
}

// ErrorFileID is the batch's error file id.
func ErrorFileID(batchID string) string {
	return "file-" + strings.TrimPrefix(batchID, "batch_") + "-errors"
}

// spooled is where one line of the files is in the spool.
type spooled struct {
	off, n int64
	ok     bool
	set    bool
}

// writeFiles reads the batch's results back (the first per line) and
// writes the output file (2xx answers) and the error file (the rest) in
// input order. A file that would be empty is not written (nil id). The
// lines are spooled to a temporary file, so memory holds only their
// offsets whatever the answers weigh.
func (s *Service) writeFiles(ctx context.Context, rec api.Record, usage *api.Usage) (out, errFile *string, counts api.RequestCounts, err error) {
	total := rec.RequestCounts.Total
	counts.Total = total
	spool, err := os.CreateTemp(s.cfg.TempDir, "aiforge-batch-*.jsonl")
	if err != nil {
		return nil, nil, counts, fmt.Errorf("spool: %w", err)
	}
	defer func() {
		_ = spool.Close()
		_ = os.Remove(spool.Name())
	}()
	lines := make([]spooled, total)
	var off, okBytes, errBytes int64
	err = s.readSubject(ctx, events.BatchResultsOf(rec.ID), s.resultReg, func(ev events.Event) error {
		res := ev.(*events.BatchResultV1)
		if res.Index < 0 || res.Index >= total || lines[res.Index].set {
			return nil
		}
		b, err := s.outputLine(ctx, res, usage)
		if err != nil {
			return err
		}
		if _, err := spool.Write(b); err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		ok := res.Succeeded()
		lines[res.Index] = spooled{off: off, n: int64(len(b)), ok: ok, set: true}
		off += int64(len(b))
		switch {
		case ok:
			okBytes += int64(len(b))
			counts.Completed++
		default:
			errBytes += int64(len(b))
			if countsAsFailed(res) {
				counts.Failed++
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, counts, err
	}
	put := func(id, kind string, size int64, ok bool) (*string, error) {
		if size == 0 {
			return nil, nil
		}
		readers := make([]io.Reader, 0, total)
		for _, l := range lines {
			if l.set && l.ok == ok {
				readers = append(readers, io.NewSectionReader(spool, l.off, l.n))
			}
		}
		key := pkgfiles.ObjectKey(rec.Tenant, id)
		info, err := s.deps.Objects.Put(ctx, key, io.MultiReader(readers...), size, "application/jsonl")
		if err != nil {
			return nil, fmt.Errorf("%s file: %w", kind, err)
		}
		_, _, err = kv.Update(ctx, s.files, pkgfiles.Key(rec.Tenant, id), func(f *pkgfiles.Record, exists bool) error {
			created := time.Now().Unix()
			if exists {
				created = f.CreatedAt
			}
			*f = pkgfiles.Record{File: pkgfiles.File{ID: id, Object: "file", Bytes: info.Size, CreatedAt: created,
				Filename: rec.ID + "_" + kind + ".jsonl", Purpose: pkgfiles.PurposeBatchOutput, Status: pkgfiles.StatusProcessed,
				SHA256: info.SHA256}, Tenant: rec.Tenant, ObjectKey: key}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s file record: %w", kind, err)
		}
		return &id, nil
	}
	if out, err = put(OutputFileID(rec.ID), "output", okBytes, true); err != nil {
		return nil, nil, counts, err
	}
	if errFile, err = put(ErrorFileID(rec.ID), "error", errBytes, false); err != nil {
		return nil, nil, counts, err
	}
	return out, errFile, counts, nil
}

// outputLine is a result as a line of the output or error file.
func (s *Service) outputLine(ctx context.Context, res *events.BatchResultV1, usage *api.Usage) ([]byte, error) {
	ol := api.OutputLine{ID: "batch_req_" + digest(res.RequestID), CustomID: res.CustomID}
	if res.StatusCode != 0 {
		body := res.Body
		if res.BodyObject != "" {
			rc, _, err := s.deps.Objects.Get(ctx, res.BodyObject)
			if err != nil {
				return nil, fmt.Errorf("answer body %s: %w", res.BodyObject, err)
			}
			body, err = io.ReadAll(io.LimitReader(rc, maxAnswerBytes+1))
			_ = rc.Close()
			if err != nil {
				return nil, fmt.Errorf("answer body %s: %w", res.BodyObject, err)
			}
		}
		if len(body) == 0 || !json.Valid(body) {
			body = json.RawMessage("null")
		}
		ol.Response = &api.OutputResponse{StatusCode: res.StatusCode, RequestID: res.RequestID, Body: body}
		if res.Succeeded() && usage != nil {
			usage.AddAnswer(body)
		}
	} else {
		ol.Error = &api.OutputError{Code: res.ErrorCode, Message: res.ErrorMessage}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ol); err != nil {
		return nil, errors.Join(errors.New("encode an output line"), err)
	}
	return buf.Bytes(), nil
}
