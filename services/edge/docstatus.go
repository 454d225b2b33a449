package edge

import (
	"context"
	"errors"
	"fmt"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// docStatus follows the document flow and keeps each vector store file's
// status: completed when indexed, failed (with last_error) when any step
// gave up. Edge replicas share one durable consumer, so each event is
// applied once.
func (s *Service) docStatus(ctx context.Context) error {
	reg := events.NewRegistry(
		func() events.Event { return &events.DocIndexedV1{} },
		func() events.Event { return &events.DocFailedV1{} },
	)
	c, err := events.NewConsumer(s.deps.JS, reg, events.ConsumerConfig{
		Stream:         events.StreamDocs,
		Durable:        "edge-docs-status",
		FilterSubjects: []string{fmt.Sprintf(events.DocsIndexedT, "*"), fmt.Sprintf(events.DocsFailedT, "*")},
		Logger:         s.log,
	}, func(ctx context.Context, _ events.Envelope, ev events.Event) error {
		switch e := ev.(type) {
		case *events.DocIndexedV1:
			return s.setFileStatus(ctx, e.DocRef, statusCompleted, nil)
		case *events.DocFailedV1:
			return s.setFileStatus(ctx, e.DocRef, statusFailed, &LastError{Code: e.Code, Message: e.Message})
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

func (s *Service) setFileStatus(ctx context.Context, ref events.DocRef, status string, lastErr *LastError) error {
	key := vsFileKey(ref.Tenant, ref.StoreID, ref.FileID)
	for {
		rec, rev, err := kvGet[vsFileRecord](ctx, s.vsFilesKV, key)
		if errors.Is(err, registry.ErrNotFound) {
			return nil // removed meanwhile
		}
		if err != nil {
			return err
		}
		if rec.Status == statusCancelled {
			return nil
		}
		rec.Status, rec.LastError = status, lastErr
		b, _ := jsonMarshal(rec)
		if _, err := s.vsFilesKV.Update(ctx, key, b, rev); err == nil {
			return nil
		} else if !isWrongLastSequence(err) {
			return err
		}
	}
}
