package batch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
)

// publishWindow bounds the asynchronous publishes waiting for their
// acknowledgement.
const publishWindow = 512

// readStall bounds the wait for the next message of a read-back.
const readStall = 10 * time.Second

// readSubject calls fn with every event on subj in the BATCH stream, in
// stream order, as of the call (what is published during the read may be
// missed). Events of other types are skipped.
func (s *Service) readSubject(ctx context.Context, subj string, reg *events.Registry, fn func(events.Event) error) error {
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return fmt.Errorf("stream info %s: %w", subj, err)
	}
	var count uint64
	for _, n := range info.State.Subjects {
		count += n
	}
	s.log.Debug("batch: read back", "subject", subj, "count", count, "subjects", info.State.Subjects, "msgs", info.State.Msgs)
	if count == 0 {
		return nil
	}
	cons, err := s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		return fmt.Errorf("read %s: %w", subj, err)
	}
	var got uint64
	for got < count {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(readStall))
		if err != nil {
			return fmt.Errorf("read %s: %w", subj, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			got++
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			_, ev, err := reg.Decode(msg.Headers(), msg.Data())
			switch {
			case errors.Is(err, events.ErrUnknownType):
			case err != nil:
				s.log.Warn("batch: an event that does not decode; skipped", "subject", msg.Subject(), "seq", md.Sequence.Stream, "err", err)
			default:
				if err := fn(ev); err != nil {
					return err
				}
			}
			if md.NumPending == 0 {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("read %s: %w", subj, err)
		}
		if n == 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read %s: no message for %s with %d of %d read", subj, readStall, got, count)
		}
	}
	return nil
}

// publishAsync publishes ev with envelope id id without waiting.
func (s *Service) publishAsync(ev events.Event, id, tenant string) (jetstream.PubAckFuture, error) {
	m, err := events.Marshal(ev, events.Envelope{ID: id, Source: s.cfg.Source, Tenant: tenant})
	if err != nil {
		return nil, err
	}
	return s.deps.JS.PublishMsgAsync(m)
}

// waitAcks waits for every publish of fs to be acknowledged.
func waitAcks(ctx context.Context, fs []jetstream.PubAckFuture) error {
	for _, f := range fs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
