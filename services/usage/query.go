package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/query"
)

func (s *Service) onQuery(ctx context.Context) nats.MsgHandler {
	return func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		select {
		case s.querySem <- struct{}{}:
		default:
			s.m.queries.WithLabelValues("unknown", "503").Inc()
			s.respond(m, "unknown", query.NewErrorReply(&contracts.Error{Status: http.StatusServiceUnavailable, Type: contracts.TypeServer,
				Code: contracts.CodeOverloaded, Message: "The usage service is answering too many queries. Retry shortly."}))
			return
		}
		s.qmu.Lock()
		defer s.qmu.Unlock()
		if s.qclosed {
			<-s.querySem
			return
		}
		s.qwg.Add(1)
		go func() {
			defer s.qwg.Done()
			defer func() { <-s.querySem }()
			var req query.UsageRequest
			if len(m.Data) > maxQueryRequestBytes {
				s.respond(m, "unknown", query.NewErrorReply(contracts.ErrBodyTooLarge(maxQueryRequestBytes)))
				return
			}
			if err := json.Unmarshal(m.Data, &req); err != nil {
				s.respond(m, "unknown", query.NewErrorReply(contracts.ErrBadRequest("", contracts.CodeInvalidJSON,
					"The usage query is not valid JSON: "+err.Error())))
				return
			}
			s.respond(m, req.Op, s.Answer(ctx, req))
		}()
	}
}

// respond sends v as JSON with the reply header that tells it from the
// USAGE stream's publish acknowledgement (see Request).
func (s *Service) respond(m *nats.Msg, op string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		body, _ = json.Marshal(query.NewErrorReply(contracts.ErrInternal("could not encode the reply")))
	}
	status := http.StatusOK
	if e, ok := v.(query.ErrorReply); ok {
		status = e.Status
	}
	if limit := s.deps.NC.MaxPayload(); int64(len(body)) > limit-1024 {
		param := "limit"
		if op == query.OpLedger || op == query.OpAudit {
			param = "from"
		}
		e := query.NewErrorReply(contracts.ErrBadRequest(param, contracts.CodeInvalidRequest,
			fmt.Sprintf("The answer (%d bytes) exceeds the bus message limit (%d bytes): narrow the range, lower limit or group less.", len(body), limit)))
		status = e.Status
		body, _ = json.Marshal(e)
	}
	switch op {
	case query.OpCompletions, query.OpEmbeddings, query.OpCodeInterpreterSessions, query.OpCosts, query.OpAudit, query.OpLedger, query.OpPrices:
	default:
		op = "unknown" // bounded label values
	}
	s.m.queries.WithLabelValues(op, fmt.Sprint(status)).Inc()
	r := nats.NewMsg(m.Reply)
	r.Header.Set(query.UsageReplyHeader, "1")
	r.Data = body
	if err := s.deps.NC.PublishMsg(r); err != nil {
		s.log.Warn("usage query reply not sent", "op", op, "err", err)
	}
}

// Answer answers one query: the value to send as JSON (an query.ErrorReply on
// failure).
func (s *Service) Answer(ctx context.Context, req query.UsageRequest) any {
	switch req.Op {
	case query.OpCompletions, query.OpEmbeddings, query.OpCodeInterpreterSessions, query.OpCosts:
		q, perr := ledger.ParseQuery(ledger.Report(req.Op), req.Query, s.now())
		if perr != nil {
			return query.NewErrorReply(perr)
		}
		s.mu.RLock()
		defer s.mu.RUnlock()
		body, err := s.led.ReportJSON(q, req.Scope)
		if err != nil {
			return query.NewErrorReply(contracts.ErrInternal(err.Error()))
		}
		return json.RawMessage(body)
	case query.OpLedger:
		from, to, perr := s.span(req)
		if perr != nil {
			return query.NewErrorReply(perr)
		}
		s.mu.RLock()
		defer s.mu.RUnlock()
		data := s.led.Buckets(from, to, req.Scope)
		if data == nil {
			data = []ledger.Bucket{}
		}
		return query.LedgerReply{Object: "list", From: from.Unix(), To: to.Unix(), LastSeq: s.led.LastSeq(), Data: data}
	case query.OpPrices:
		pb := s.prices.Load()
		return query.PricesReply{Object: "list", Data: pb.Histories(), Discounts: pb.Discounts()}
	case query.OpAudit:
		if req.From == 0 {
			return query.NewErrorReply(contracts.ErrBadRequest("from", contracts.CodeMissingParam, "Missing required parameter: 'from'."))
		}
		from, to, perr := s.span(req)
		if perr != nil {
			return query.NewErrorReply(perr)
		}
		select {
		case s.auditSem <- struct{}{}:
			defer func() { <-s.auditSem }()
		case <-ctx.Done():
			return query.NewErrorReply(contracts.ErrShuttingDown())
		}
		rep, err := s.Audit(ctx, from, to, req.Scope)
		if err != nil {
			s.m.audits.WithLabelValues("error").Inc()
			s.log.Warn("audit failed", "from", from, "to", to, "err", err)
			return query.NewErrorReply(contracts.ErrInternal("The audit failed: " + err.Error()))
		}
		return rep
	}
	return query.NewErrorReply(contracts.ErrBadRequest("op", contracts.CodeInvalidRequest,
		fmt.Sprintf("Invalid 'op': %q. Supported values are completions, embeddings, code_interpreter_sessions, costs, audit, ledger, prices.", req.Op)))
}

func (s *Service) span(req query.UsageRequest) (from, to time.Time, perr *contracts.Error) {
	if req.From < 0 {
		return from, to, contracts.ErrBadRequest("from", contracts.CodeInvalidRequest, "Invalid 'from': must not be negative.")
	}
	to = s.now()
	if req.To != 0 {
		to = time.Unix(req.To, 0)
	}
	from = time.Unix(req.From, 0)
	if !to.After(from) {
		return from, to, contracts.ErrBadRequest("to", contracts.CodeInvalidRequest, "Invalid 'to': must be after 'from'.")
	}
	return from.UTC(), to.UTC(), nil
}

// Audit replays the raw USAGE stream from the first message stored at or
// after from − LateMargin up to the sequence the live ledger has folded,
// recomputes a ledger with the live price book, and compares the buckets
// whose minute starts in [from, to) (of tenant scope, when not empty).
func (s *Service) Audit(ctx context.Context, from, to time.Time, scope string) (query.AuditReply, error) {
	start := time.Now()
	s.mu.RLock()
	upTo := s.led.LastSeq()
	stored := s.led.Clone(from, to, scope, false)
	s.mu.RUnlock()
	pb := s.prices.Load()

	re := s.newLedger()
	n, err := replay(ctx, s.deps.JS, from.Add(-s.cfg.LateMargin), upTo, s.cfg.FetchBatch, s.cfg.AuditStallTimeout,
		func(seq uint64, id string, ev events.Event) {
			if ev != nil {
				re.Apply(seq, id, ev, pb)
			}
		})
	if err != nil {
		return query.AuditReply{}, err
	}
	took := time.Since(start)
	diffs, compared := ledger.Compare(stored, re.Clone(from, to, scope, false), from, to)
	if diffs == nil {
		diffs = []ledger.Difference{}
	}
	rep := query.AuditReply{
		From: from.Unix(), To: to.Unix(), LastSeq: upTo, EventsReplayed: n, BucketsCompared: compared,
		Differences: diffs, ReplaySeconds: took.Seconds(),
	}
	if took > 0 {
		rep.EventsPerSecond = float64(n) / took.Seconds()
	}
	result := "clean"
	if len(diffs) > 0 {
		result = "differences"
		s.log.Warn("audit found differences", "from", from, "to", to, "differences", len(diffs))
	}
	s.m.audits.WithLabelValues(result).Inc()
	s.m.auditDur.Observe(took.Seconds())
	return rep, nil
}

var errReplayStalled = errors.New("usage: replay stalled")

// replay reads the USAGE stream in order from the first message stored at
// or after startTime up to sequence upTo and calls fn for each message (ev
// nil for a message that is not a valid usage event). It returns how many
// messages it read.
func replay(ctx context.Context, js jetstream.JetStream, startTime time.Time, upTo uint64, batch int, stall time.Duration,
	fn func(seq uint64, id string, ev events.Event)) (int64, error) {
	if upTo == 0 {
		return 0, nil
	}
	st := startTime.UTC()
	cons, err := js.OrderedConsumer(ctx, events.StreamUsage, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &st,
	})
	if err != nil {
		return 0, fmt.Errorf("usage: replay consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(batch))
	if err != nil {
		return 0, fmt.Errorf("usage: replay: %w", err)
	}
	defer it.Stop()
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		return 0, nil // nothing stored since startTime
	}
	var dec decoder
	var n int64
	for {
		msg, err := it.Next(jetstream.NextMaxWait(stall))
		if err != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			if errors.Is(err, nats.ErrTimeout) {
				return n, fmt.Errorf("%w: no message for %s after %d messages", errReplayStalled, stall, n)
			}
			return n, fmt.Errorf("usage: replay: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return n, fmt.Errorf("usage: replay metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		if seq > upTo {
			return n, nil
		}
		n++
		id, ev, _, _ := dec.decode(msg.Headers(), msg.Data())
		fn(seq, id, ev)
		if seq == upTo || meta.NumPending == 0 {
			return n, nil
		}
	}
}
