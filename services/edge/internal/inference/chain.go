package inference

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// Response headers that show how a request was routed.
const (
	// HeaderModelServed names the model that answered: the requested one
	// or one of its fallbacks.
	HeaderModelServed = "X-Aiforge-Model-Served"
	// HeaderAttempts lists every attempt in order, comma-separated:
	// "model;engine=ID;status=N;code=C" (engine when the model has an id
	// for it, code for failures).
	HeaderAttempts = "X-Aiforge-Attempts"
)

// attemptLog is the attempts of one request so far, for HeaderAttempts.
type attemptLog struct {
	entries []string
	// model and engine are the attempt in progress.
	model, engine string
}

func attemptEntry(model, engine string, status int, code string) string {
	var b strings.Builder
	b.WriteString(model)
	if engine != "" {
		b.WriteString(";engine=")
		b.WriteString(engine)
	}
	b.WriteString(";status=")
	b.WriteString(strconv.Itoa(status))
	if code != "" {
		b.WriteString(";code=")
		b.WriteString(code)
	}
	return b.String()
}

func (l *attemptLog) add(model, engine string, status int, code string) {
	l.entries = append(l.entries, attemptEntry(model, engine, status, code))
}

// setHeaders writes the routing headers: served, when a model answered,
// and the attempts, with the one in progress answered with status when
// status is positive.
func (l *attemptLog) setHeaders(h http.Header, served string, status int) {
	entries := l.entries
	if status > 0 && l.model != "" {
		entries = append(entries[:len(entries):len(entries)], attemptEntry(l.model, l.engine, status, ""))
	}
	if served != "" {
		h.Set(HeaderModelServed, served)
	}
	if len(entries) > 0 {
		h.Set(HeaderAttempts, strings.Join(entries, ", "))
	}
}

// chainResult is how a request's attempts ended.
type chainResult struct {
	res bridge.Result
	err error
	// adm is the reservation of the model of the last attempt: what the
	// caller still has to release if no usage event will settle it.
	adm     admitted
	retried bool
	// answeredBy is the model whose answer (or its engine's error) the
	// client gets; empty when no model answered.
	answeredBy string
}

// chain is the models a request for name is tried on: name, then its
// fallbacks in order (the fallbacks' own fallbacks are not followed).
func (s *Service) chain(name string) []string {
	out := []string{name}
	m, ok := s.d.Directory.Served(name)
	if !ok {
		return out
	}
	for _, f := range m.Fallbacks {
		if f != name && !contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// promptTokenEstimate estimates a prompt's tokens from its size: four
// bytes a token, as OpenAI's rule of thumb for English text. It decides
// context-window fallbacks only; budgets and rate limits count the bytes.
func promptTokenEstimate(p Request) int64 { return (p.InputBytes + 3) / 4 }

// promptParam names the request field holding the prompt.
func promptParam(endpoint string) string {
	switch endpoint {
	case events.EndpointCompletions:
		return "prompt"
	case events.EndpointEmbeddings:
		return "input"
	case events.EndpointRerank:
		return "documents"
	}
	return "messages"
}

// contextWindow is m's context length: the binding's ContextWindow, else
// the smallest one its servable replicas report; 0 when unknown.
func contextWindow(m registry.Model, states []registry.WorkerState) int64 {
	if m.ContextWindow > 0 {
		return int64(m.ContextWindow)
	}
	var w int64
	for _, st := range states {
		if st.Servable() && st.ContextWindow > 0 && (w == 0 || int64(st.ContextWindow) < w) {
			w = int64(st.ContextWindow)
		}
	}
	return w
}

// anyServable reports whether a replica of one of m's engines is servable.
func anyServable(m registry.Model, states []registry.WorkerState) bool {
	for _, st := range states {
		if _, known := m.EngineByID(st.EngineID); st.Servable() && (known || len(m.Engines) == 0) {
			return true
		}
	}
	return false
}

// replicas is the replica states of a registered model (adapters and
// models without reported states have none: they go to the queue group).
func (s *Service) replicas(name string) []registry.WorkerState {
	if _, ok := s.d.Directory.Model(name); !ok {
		return nil
	}
	all := s.d.Directory.Workers(name)
	out := all[:0]
	for _, st := range all {
		if st.Model == name {
			out = append(out, st)
		}
	}
	return out
}

// route sends the request to the models of its chain in turn until one
// answers or fails in a way no other model would fix. adm is the
// requested model's reservation; each fallback is reserved for when it is
// tried, under its own usage id (the request id and "-f<N>"), and a model
// given up on has its hold released (a usage event of it, if any, settles
// the same hold: releasing is idempotent).
func (s *Service) route(ctx context.Context, c Call, adm admitted, hdr nats.Header, flush func() error, sink func([]byte) error, served *string, log *attemptLog) chainResult {
	p := c.Request
	chain := s.chain(p.Model)
	var out chainResult
	for i, name := range chain {
		lastModel := i == len(chain)-1
		m, ok := s.d.Directory.Served(name)
		if i > 0 {
			if ctx.Err() != nil { // the client left, or the key was revoked
				if out.err == nil {
					out.err = context.Cause(ctx)
				}
				return out
			}
			if !ok {
				log.add(name, "", http.StatusNotFound, contracts.CodeModelNotFound)
				continue
			}
			if !s.d.Directory.Permits(c.Key, name) {
				log.add(name, "", http.StatusForbidden, contracts.CodeModelNotAllowed)
				continue
			}
		}
		states := s.replicas(name)
		if window := contextWindow(m, states); window > 0 {
			if need := promptTokenEstimate(p) + p.MaxTokens; need > window {
				if i == 0 && len(adm.reservations) > 0 {
					s.release(adm.id, adm.reservations)
				}
				e := &contracts.Error{Status: http.StatusBadRequest, Type: contracts.TypeInvalidRequest, Param: promptParam(c.Endpoint), Code: contracts.CodeContextLengthExceeded,
					Message: fmt.Sprintf("This model's maximum context length is %d tokens; the request needs about %d (prompt estimate plus max_tokens).", window, need)}
				log.add(name, "", e.Status, e.Code)
				out = chainResult{err: &bridge.Error{Status: e.Status, Code: e.Code, Message: e.Message, Body: e.Body()}}
				continue
			}
		}
		a := adm
		if i > 0 {
			var ref *refusal
			a, ref = s.reserve(ctx, c.Key, c.Endpoint, p, name, adm.id+"-f"+strconv.Itoa(i))
			if ref != nil {
				log.add(name, "", ref.Status, ref.Code)
				out = chainResult{err: &bridge.Error{Status: ref.Status, Code: ref.Code, Message: ref.Message, Body: ref.Body()}}
				continue
			}
		}
		r := s.tryModel(ctx, c, m, states, a, lastModel, hdr, flush, sink, served, log)
		out = chainResult{res: r.res, err: r.err, adm: a, retried: out.retried || r.retried}
		if r.answered {
			out.answeredBy = name
		}
		if r.done {
			return out
		}
		// Released before the next model reserves, so that its hold does
		// not count against the next one's.
		if len(a.reservations) > 0 {
			s.release(a.id, a.reservations)
		}
		out.adm = admitted{}
	}
	return out
}

// outcome is what the caller does after a failed attempt.
type outcome int

const (
	// answer: the error is the client's answer (data was sent, the client
	// left, or the request itself is at fault).
	answer outcome = iota
	// otherReplica: another replica of the model may serve it, else the
	// next model.
	otherReplica
	// nextModel: go on to the next model of the chain.
	nextModel
)

// classify says what follows a failed attempt, and whether the failure
// counts against the engine (cooldowns).
func classify(ctx context.Context, err error, targeted bool) (outcome, bool) {
	if ctx.Err() != nil {
		return answer, false
	}
	if errors.Is(err, bridge.ErrNoWorker) {
		return otherReplica, targeted
	}
	var be *bridge.Error
	if !errors.As(err, &be) || be.AfterData {
		return answer, false
	}
	code := be.Code
	if e, ok := contracts.ParseError(be.Status, be.Body); ok && e.Code != "" {
		code = e.Code
	}
	switch {
	case code == contracts.CodeContextLengthExceeded:
		return nextModel, false
	case code == contracts.CodeOverloaded || be.Status == http.StatusTooManyRequests:
		return otherReplica, false
	case be.Retryable:
		return otherReplica, true
	case code == contracts.CodeEngineTimeout || code == contracts.CodeWorkerLost || code == contracts.CodeUpstreamAuth || be.Status >= 500:
		// Not resent to the model (a lost worker may still be running
		// it; a timeout would likely repeat), but another model may serve.
		return nextModel, true
	}
	return answer, false
}

// modelResult is how the attempts on one model ended: done reports that
// the result is the request's answer.
type modelResult struct {
	res           bridge.Result
	err           error
	done, retried bool
	// answered: the model itself answered (a success, or an error of its
	// engine that is the client's answer), not a failure to reach it.
	answered bool
}

// tryModel sends the request to model m: to the replica the router picks
// among states, and once more to another one after a failure another
// replica may not have; with no states known, to the model's queue group
// as the bridge does (with its own retry), and so too when none of the
// reported replicas is servable. done reports that the result is
// the request's answer; otherwise the next model is tried.
func (s *Service) tryModel(ctx context.Context, c Call, m registry.Model, states []registry.WorkerState, a admitted, lastModel bool,
	hdr nats.Header, flush func() error, sink func([]byte) error, served *string, log *attemptLog) modelResult {
	p := c.Request
	var (
		res     bridge.Result
		err     error
		retried bool
	)
	body, berr := withCap(c.Body, a.capTokens)
	if berr != nil {
		return modelResult{res, &bridge.Error{Status: http.StatusBadRequest, Code: contracts.CodeInvalidJSON,
			Body: contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body must be a JSON object.").Body()}, true, false, false}
	}
	req := &bridge.OutRequest{
		Model: m.Name, ID: a.id, Tenant: c.Key.Tenant, KeyID: c.Key.ID, Endpoint: c.Endpoint,
		Stream: p.Stream, IncludeUsage: p.IncludeUsage, Body: body, Header: hdr,
		Reservations: a.reservations, Flush: flush,
	}
	*served = m.Name
	fail := func(engine string, err error) {
		e := s.mapError(ctx, err, m.Name)
		log.add(m.Name, engine, e.Status, e.Code)
	}
	queue := len(states) == 0
	if !queue {
		// Replicas that reported a state but none servable: the states may
		// lag (a worker that just started), so the queue group decides;
		// with no worker listening it answers at once.
		queue = !anyServable(m, states)
	}
	if queue {
		log.model, log.engine = m.Name, ""
		res, err = s.d.Client.Do(ctx, req, sink)
		if err == nil {
			return modelResult{res, nil, true, res.Retried, true}
		}
		fail("", err)
		o, _ := classify(ctx, err, false)
		return modelResult{res, err, lastModel || o == answer, res.Retried, o == answer && ctx.Err() == nil}
	}
	exclude := map[string]bool{}
	for try := 0; try < bridge.MaxAttempts; try++ {
		pk := s.router.pick(m, states, exclude, false)
		if !pk.ok && pk.cooling > 0 && lastModel {
			// Nothing else is left to try: an engine in cooldown is
			// better than no answer.
			pk = s.router.pick(m, states, exclude, true)
		}
		if !pk.ok {
			if try == 0 {
				msg := "every engine of this model is cooling down after failures"
				err = fmt.Errorf("%w: %w", bridge.ErrNoWorker, &bridge.Error{Status: http.StatusServiceUnavailable, Code: contracts.CodeNoWorker, Message: msg})
				fail("", err)
			}
			break
		}
		engine := pk.worker.EngineID
		req.Worker = pk.worker.WorkerID
		log.model, log.engine = m.Name, engine
		// Final (the worker records a failure) only when no retry can
		// follow under this usage id: a retry may also go to an engine
		// in cooldown when this is the last model.
		final := lastModel && (try == bridge.MaxAttempts-1 || (!pk.others && pk.cooling == 0))
		var first time.Duration
		t0 := time.Now()
		timed := func(b []byte) error {
			if first == 0 {
				first = max(time.Since(t0), time.Nanosecond)
			}
			return sink(b)
		}
		end := s.router.begin(m.Name, pk.worker)
		res, err = s.d.Client.Once(ctx, req, final, timed)
		end()
		retried = retried || try > 0
		if err == nil {
			if first == 0 {
				first = time.Since(t0)
			}
			s.router.succeeded(m.Name, engine, first)
			return modelResult{res, nil, true, retried, true}
		}
		o, fault := classify(ctx, err, true)
		if fault {
			if s.router.failed(m.Name, engine) {
				s.d.Metrics.cooldowns.WithLabelValues(m.Name, engine).Inc()
				s.log.Warn("engine in cooldown after failures", "model", m.Name, "engine_id", engine, "cooldown", s.router.cfg.Cooldown)
			}
		}
		fail(engine, err)
		switch o {
		case answer:
			return modelResult{res, err, true, retried, ctx.Err() == nil}
		case nextModel:
			return modelResult{res, err, lastModel, retried, false}
		}
		exclude[pk.worker.WorkerID] = true
	}
	return modelResult{res, err, lastModel, retried, false}
}
