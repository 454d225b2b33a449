package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/objstore"
)

// Metadata of a batch's line consumer, so that a consumer left behind is
// found and removed (cleanupOrphans).
const (
	metaBatchKey = "aiforge_batch_key"
	metaBatchID  = "aiforge_batch_id"
	metaTenant   = "aiforge_tenant"
)

var errGone = errors.New("batch: the batch record is gone")

// runner drives one batch from its current status to a final one. It
// resumes from whatever status it finds: every step is idempotent.
type runner struct {
	s      *Service
	key    string
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	rec    api.Record
	rev    uint64
	notify chan struct{}

	// The lines' state, once the batch is validated.
	total       int64
	done        []bool
	ndone       int64
	completed   int64
	failed      int64
	countsDirty bool
	allDone     chan struct{}
	// usage is the answered lines' usage, once the files are written.
	usage *api.Usage
}

func newRunner(s *Service, key string, rec api.Record, rev uint64) *runner {
	ctx, cancel := context.WithCancel(s.ctx)
	return &runner{s: s, key: key, rec: rec, rev: rev, ctx: ctx, cancel: cancel, notify: make(chan struct{}, 1),
		log: s.log.With("batch", rec.ID, "tenant", rec.Tenant)}
}

// update takes a newer revision of the record.
func (r *runner) update(rec api.Record, rev uint64) {
	r.mu.Lock()
	if rev > r.rev {
		r.rec, r.rev = rec, rev
	}
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *runner) record() api.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec
}

// write changes the record by compare-and-set (fn returns kv.ErrNoChange
// to leave it) and takes the stored result.
func (r *runner) write(fn func(*api.Record) error) error {
	_, _, err := kv.Update(r.ctx, r.s.batches, r.key, func(v *api.Record, exists bool) error {
		if !exists {
			return errGone
		}
		return fn(v)
	})
	if err != nil {
		return err
	}
	rec, rev, err := kv.Get[api.Record](r.ctx, r.s.batches, r.key)
	if err != nil {
		return err
	}
	r.update(rec, rev)
	return nil
}

func (r *runner) run() {
	defer r.cancel()
	backoff := time.Second
	for r.ctx.Err() == nil {
		rec := r.record()
		var err error
		switch {
		case api.Final(rec.Status):
			return
		case rec.Status == api.StatusValidating:
			err = r.validate(rec)
		case rec.Status == api.StatusCancelling && rec.InProgressAt == nil:
			// Cancelled before its lines were enqueued: straight to
			// cancelled, without files.
			err = r.finish(api.StatusCancelled, nil, nil, api.RequestCounts{}, nil)
		case rec.Status == api.StatusInProgress || rec.Status == api.StatusCancelling || rec.Status == api.StatusFinalizing:
			err = r.process(rec)
		default:
			r.log.Warn("batch: unknown status; left alone", "status", rec.Status)
			select {
			case <-r.notify:
			case <-r.ctx.Done():
			}
			continue
		}
		if err == nil {
			backoff = time.Second
			continue
		}
		if errors.Is(err, errGone) || r.ctx.Err() != nil {
			return
		}
		r.log.Error("batch: step failed; retrying", "status", rec.Status, "err", err, "in", backoff)
		if !sleepCtx(r.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// expiry is when the batch's unfinished lines expire: the record's Expiry
// or CreatedAt+Window, whichever is first.
func (s *Service) expiry(rec api.Record) time.Time {
	e := time.Unix(rec.CreatedAt, 0).Add(s.cfg.Window)
	if !rec.Expiry.IsZero() && rec.Expiry.Before(e) {
		e = rec.Expiry
	}
	return e
}

// initLines sets up the lines' state for total lines.
func (r *runner) initLines(total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total = total
	r.done = make([]bool, total)
	r.ndone, r.completed, r.failed = 0, 0, 0
	r.allDone = make(chan struct{})
	if total == 0 {
		close(r.allDone)
	}
}

// isDone reports whether line index has a result.
func (r *runner) isDone(index int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return index >= 0 && index < r.total && r.done[index]
}

// markDone records line index's first result; it reports whether it was
// the first.
func (r *runner) markDone(res *events.BatchResultV1) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := res.Index
	if i < 0 || i >= r.total || r.done[i] {
		return false
	}
	r.done[i] = true
	r.ndone++
	switch {
	case res.Succeeded():
		r.completed++
	case countsAsFailed(res):
		r.failed++
	}
	r.countsDirty = true
	if r.ndone == r.total {
		close(r.allDone)
	}
	return true
}

// countsAsFailed: a line that ran and did not succeed. Lines that never
// ran (expired, cancelled) are in the error file but not in the counts.
func countsAsFailed(res *events.BatchResultV1) bool {
	return !res.Succeeded() && res.ErrorCode != api.CodeBatchExpired && res.ErrorCode != api.CodeBatchCancelled
}

// flushCounts writes request_counts when they changed.
func (r *runner) flushCounts() {
	r.mu.Lock()
	if !r.countsDirty {
		r.mu.Unlock()
		return
	}
	r.countsDirty = false
	completed, failed := r.completed, r.failed
	r.mu.Unlock()
	err := r.write(func(v *api.Record) error {
		switch v.Status {
		case api.StatusInProgress, api.StatusCancelling, api.StatusFinalizing:
		default:
			return kv.ErrNoChange
		}
		if v.RequestCounts.Completed == completed && v.RequestCounts.Failed == failed {
			return kv.ErrNoChange
		}
		v.RequestCounts.Completed, v.RequestCounts.Failed = completed, failed
		return nil
	})
	if err != nil && r.ctx.Err() == nil {
		r.log.Warn("batch: write request counts", "err", err)
		r.mu.Lock()
		r.countsDirty = true
		r.mu.Unlock()
	}
}

// loadResults rebuilds the lines' state from the results on the stream.
func (r *runner) loadResults(id string) error {
	return r.s.readSubject(r.ctx, events.BatchResultsOf(id), r.s.resultReg, func(ev events.Event) error {
		r.markDone(ev.(*events.BatchResultV1))
		return nil
	})
}

// resyncInterval is how often a running batch looks for results it did
// not publish itself (another replica's).
const resyncInterval = 5 * time.Second

// resync reads the results back when the stream holds more than this
// runner has seen.
func (r *runner) resync(id string) error {
	info, err := r.s.stream.Info(r.ctx, jetstream.WithSubjectFilter(events.BatchResultsOf(id)))
	if err != nil {
		return err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	r.mu.Lock()
	seen := r.ndone
	r.mu.Unlock()
	if n <= uint64(seen) {
		return nil
	}
	return r.loadResults(id)
}

// process runs a validated batch: its lines until every one has a result,
// it expires or it is cancelled; then its files.
func (r *runner) process(rec api.Record) error {
	r.log.Debug("batch: process", "status", rec.Status, "total", rec.RequestCounts.Total)
	r.initLines(rec.RequestCounts.Total)
	if err := r.loadResults(rec.ID); err != nil {
		return err
	}
	r.mu.Lock()
	r.countsDirty = true
	r.mu.Unlock()
	select {
	case <-r.allDone:
		return r.finalize(api.StatusCompleted)
	default:
	}
	switch {
	case rec.Status == api.StatusCancelling:
		return r.windDown(api.StatusCancelled)
	case rec.Status == api.StatusFinalizing, !time.Now().Before(r.s.expiry(rec)):
		// Finalizing is written only once every line has a result; one
		// found without them had its results purged: what is left expires.
		return r.windDown(api.StatusExpired)
	}

	cons, err := r.s.stream.CreateOrUpdateConsumer(r.ctx, jetstream.ConsumerConfig{
		Durable:       consumerName(rec.ID),
		Description:   "the lines of batch " + rec.ID,
		FilterSubject: events.BatchLinesOf(rec.ID),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       r.s.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: r.s.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Metadata:      map[string]string{metaBatchKey: r.key, metaBatchID: rec.ID, metaTenant: rec.Tenant},
	})
	if err != nil {
		return fmt.Errorf("line consumer: %w", err)
	}
	model := ""
	if len(rec.Models) > 0 {
		model = rec.Models[0]
	}
	act := r.s.disp.add(r, rec, model, cons)
	expire := time.NewTimer(time.Until(r.s.expiry(rec)))
	defer expire.Stop()
	counts := time.NewTicker(r.s.cfg.CountsInterval)
	defer counts.Stop()
	resync := time.NewTicker(resyncInterval)
	defer resync.Stop()
	for {
		select {
		case <-r.ctx.Done():
			<-r.s.disp.stop(act, true)
			return r.ctx.Err()
		case <-r.allDone:
			<-r.s.disp.stop(act, true)
			return r.finalize(api.StatusCompleted)
		case <-expire.C:
			r.log.Info("batch: expired; letting the lines in flight finish")
			<-r.s.disp.stop(act, false)
			return r.windDown(api.StatusExpired)
		case <-resync.C:
			// Results another replica published for this batch.
			if err := r.resync(rec.ID); err != nil && r.ctx.Err() == nil {
				r.log.Warn("batch: read results back", "err", err)
			}
		case <-r.notify:
			if api.Final(r.record().Status) {
				<-r.s.disp.stop(act, true)
				return nil
			}
			if r.record().Status == api.StatusCancelling {
				r.log.Info("batch: cancelling; letting the lines in flight finish")
				<-r.s.disp.stop(act, false)
				return r.windDown(api.StatusCancelled)
			}
		case <-counts.C:
			r.flushCounts()
		}
	}
}

// windDown gives every line without a result one saying why it did not
// run (batch_expired, batch_cancelled), then writes the files.
func (r *runner) windDown(status string) error {
	rec := r.record()
	code, msg := api.CodeBatchExpired, "This request could not be executed before the completion window expired."
	if status == api.StatusCancelled {
		code, msg = api.CodeBatchCancelled, "This request was not executed because the batch was cancelled."
	}
	var pending []jetstream.PubAckFuture
	err := r.s.readSubject(r.ctx, events.BatchLinesOf(rec.ID), r.s.lineReg, func(ev events.Event) error {
		l := ev.(*events.BatchLineV1)
		if r.isDone(l.Index) {
			return nil
		}
		res := &events.BatchResultV1{BatchID: rec.ID, Tenant: rec.Tenant, Index: l.Index, CustomID: l.CustomID,
			RequestID: events.LineID(rec.ID, l.Index), ErrorCode: code, ErrorMessage: msg, FinishedAt: time.Now().UTC()}
		f, err := r.s.publishAsync(res, resultMsgID(rec.ID, l.Index), rec.Tenant)
		if err != nil {
			return err
		}
		pending = append(pending, f)
		if len(pending) >= publishWindow {
			if err := waitAcks(r.ctx, pending); err != nil {
				return err
			}
			pending = pending[:0]
		}
		r.markDone(res)
		return nil
	})
	if err == nil {
		err = waitAcks(r.ctx, pending)
	}
	if err != nil {
		return fmt.Errorf("results of the lines left: %w", err)
	}
	return r.finalize(status)
}

// finalize writes the files from the results and the final status.
func (r *runner) finalize(status string) error {
	rec := r.record()
	if status == api.StatusCompleted {
		if rec.Status == api.StatusCancelling {
			status = api.StatusCancelled // every line finished while it was being cancelled
		} else if rec.Status != api.StatusFinalizing {
			err := r.write(func(v *api.Record) error {
				if v.Status != api.StatusInProgress {
					return kv.ErrNoChange
				}
				v.Status = api.StatusFinalizing
				v.FinalizingAt = unixNow()
				return nil
			})
			if err != nil {
				return err
			}
			if r.record().Status == api.StatusCancelling {
				status = api.StatusCancelled
			}
		}
	}
	var usage api.Usage
	out, errFile, counts, err := r.s.writeFiles(r.ctx, rec, &usage)
	if err != nil {
		return fmt.Errorf("files: %w", err)
	}
	r.mu.Lock()
	r.usage = &usage
	r.mu.Unlock()
	return r.finish(status, out, errFile, counts, nil)
}

// finish publishes the batch's final status (the webhook's event, first:
// a service stopped between the two publishes it again, stored once),
// writes it and removes the batch's lines, results and consumer.
func (r *runner) finish(status string, out, errFile *string, counts api.RequestCounts, errs *api.Errors) error {
	rec := r.record()
	ev := events.BatchFinishedV1{BatchID: rec.ID, Tenant: rec.Tenant, Status: status, Completed: counts.Completed, Failed: counts.Failed, At: time.Now().UTC()}
	if _, err := events.Publish(r.ctx, r.s.deps.JS, ev, events.Envelope{ID: rec.ID + "-" + status, Source: r.s.cfg.Source, Tenant: rec.Tenant}); err != nil {
		return err
	}
	err := r.write(func(v *api.Record) error {
		if api.Final(v.Status) {
			return kv.ErrNoChange
		}
		now := unixNow()
		v.Status = status
		switch status {
		case api.StatusCompleted:
			v.CompletedAt = now
		case api.StatusFailed:
			v.FailedAt = now
			v.Errors = errs
		case api.StatusExpired:
			v.ExpiredAt = now
		case api.StatusCancelled:
			v.CancelledAt = now
		}
		v.OutputFileID, v.ErrorFileID = out, errFile
		r.mu.Lock()
		v.Usage = r.usage
		r.mu.Unlock()
		if status != api.StatusFailed {
			v.RequestCounts.Completed, v.RequestCounts.Failed = counts.Completed, counts.Failed
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.s.m.finished.WithLabelValues(status).Inc()
	r.log.Info("batch: finished", "status", status, "completed", counts.Completed, "failed", counts.Failed)
	r.s.cleanup(r.ctx, rec.ID, rec.Tenant)
	return nil
}

// cleanup removes a final batch's lines, results, consumer and spilled
// answer bodies. Each step is idempotent.
func (s *Service) cleanup(ctx context.Context, id, tenant string) {
	for _, subj := range []string{events.BatchLinesOf(id), events.BatchResultsOf(id)} {
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil && ctx.Err() == nil {
			s.log.Warn("batch: purge", "batch", id, "subject", subj, "err", err)
			return
		}
	}
	if tenant != "" {
		prefix := bodyPrefix(tenant, id)
		for info, err := range s.deps.Objects.List(ctx, prefix) {
			if err != nil {
				break
			}
			_ = s.deps.Objects.Delete(ctx, info.Key)
		}
	}
	if err := s.stream.DeleteConsumer(ctx, consumerName(id)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && ctx.Err() == nil {
		s.log.Warn("batch: delete line consumer", "batch", id, "err", err)
	}
}

// resultMsgID is the envelope id of a line's result: its LineID with a
// suffix, because the line itself is stored under its LineID in the same
// stream, whose duplicate detection spans every subject.
func resultMsgID(batch string, index int64) string { return events.LineID(batch, index) + "-result" }

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// consumerName is the durable of a batch's lines.
func consumerName(id string) string { return "batch-lines-" + unsafeName.ReplaceAllString(id, "_") }

// bodyPrefix is where answer bodies too large for one message are kept
// until the batch's files are written.
func bodyPrefix(tenant, id string) string {
	return objstore.TenantPrefix(tenant) + "batches/" + unsafeName.ReplaceAllString(id, "_") + "/bodies/"
}

func unixNow() *int64 {
	t := time.Now().Unix()
	return &t
}

// sleepCtx waits d or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
