package vectorstores

import (
	"context"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/vectorstore"
)

// RunDocStatus follows the document flow and keeps each vector store file's
// status: completed when indexed, failed (with last_error) when any step
// gave up. Edge replicas share one durable consumer, so each event is
// applied once.
func (s *Service) RunDocStatus(ctx context.Context) error {
	reg := events.NewRegistry(
		func() events.Event { return &events.DocIndexedV1{} },
		func() events.Event { return &events.DocFailedV1{} },
	)
	c, err := events.NewConsumer(s.d.JS, reg, events.ConsumerConfig{
		Stream:         events.StreamDocs,
		Durable:        "edge-docs-status",
		FilterSubjects: []string{events.DocsIndexedAll, events.DocsFailedAll},
		Logger:         s.log,
	}, func(ctx context.Context, _ events.Envelope, ev events.Event) error {
		switch e := ev.(type) {
		case *events.DocIndexedV1:
			return s.setFileStatus(ctx, e.DocRef, vectorstore.StatusCompleted, nil)
		case *events.DocFailedV1:
			return s.setFileStatus(ctx, e.DocRef, vectorstore.StatusFailed, &vectorstore.LastError{Code: e.Code, Message: e.Message})
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A step that gave up (its consumer dead-lettered the message after
	// every retry) fails the file too: nothing stays in_progress.
	deadReg := events.NewRegistry(
		func() events.Event { return &events.DocIngestRequestedV1{} },
		func() events.Event { return &events.DocChunkedV1{} },
		func() events.Event { return &events.DocEmbeddedV1{} },
	)
	dead, err := events.NewConsumer(s.d.JS, deadReg, events.ConsumerConfig{
		Stream:         events.StreamDeadLetter,
		Durable:        "edge-docs-dead",
		FilterSubjects: []string{events.DeadLetterOf(events.StreamDocs)},
		Logger:         s.log,
	}, func(ctx context.Context, _ events.Envelope, ev events.Event) error {
		var ref events.DocRef
		switch e := ev.(type) {
		case *events.DocIngestRequestedV1:
			ref = e.DocRef
		case *events.DocChunkedV1:
			ref = e.DocRef
		case *events.DocEmbeddedV1:
			ref = e.DocRef
		}
		return s.setFileStatus(ctx, ref, vectorstore.StatusFailed, &vectorstore.LastError{Code: "server_error",
			Message: "Processing gave up after repeated failures (the object store, the bus or the embedding engine kept failing); add the file again to retry."})
	})
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- dead.Run(ctx) }()
	err = c.Run(ctx)
	if derr := <-errc; err == nil {
		err = derr
	}
	return err
}

// setFileStatus records the outcome of a file's processing by
// compare-and-set, so it never overwrites a concurrent change (a
// cancellation, new attributes). A file removed meanwhile, or cancelled, is
// left as it is.
func (s *Service) setFileStatus(ctx context.Context, ref events.DocRef, status string, lastErr *vectorstore.LastError) error {
	_, _, err := kv.Update(ctx, s.d.FilesKV, vectorstore.FileKey(ref.Tenant, ref.StoreID, ref.FileID),
		func(rec *vectorstore.FileRecord, exists bool) error {
			if !exists || rec.Status == vectorstore.StatusCancelled {
				return kv.ErrNoChange
			}
			rec.Status, rec.LastError = status, lastErr
			return nil
		})
	return err
}
