package enginesim

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// appendStreamPrefix appends the part shared by every SSE chunk of g, up to
// and including `"choices":[`.
func (g *gen) appendStreamPrefix(b []byte) []byte {
	if g.ep == epChat {
		b = append(b, `data: {"id":"chatcmpl-sim-`...)
		b = strconv.AppendUint(b, g.id, 10)
		b = append(b, `","object":"chat.completion.chunk","created":`...)
	} else {
		b = append(b, `data: {"id":"cmpl-sim-`...)
		b = strconv.AppendUint(b, g.id, 10)
		b = append(b, `","object":"text_completion","created":`...)
	}
	b = strconv.AppendInt(b, g.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, g.model)
	return append(b, `,"choices":[`...)
}

// appendChunkEnd closes a chunk whose choice has been appended.
func (g *gen) appendChunkEnd(b []byte) []byte {
	if g.zeroUsage {
		return append(b, zeroUsageEnd...)
	}
	if g.includeUsage {
		return append(b, "],\"usage\":null}\n\n"...)
	}
	return append(b, "]}\n\n"...)
}

func (g *gen) appendUsage(b []byte) []byte {
	c := g.completionTokens()
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(g.promptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(c), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(g.promptTokens+c), 10)
	return append(b, '}')
}

// appendTokenChoice appends the choice object carrying token tok (i is its
// position).
func (g *gen) appendTokenChoice(b []byte, i int, tok string) []byte {
	switch {
	case g.ep == epCompletions:
		b = append(b, `{"text":`...)
		b = appendJSONString(b, tok)
		return append(b, `,"index":0,"logprobs":null,"finish_reason":null}`...)
	case g.tool != "":
		b = append(b, `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":`...)
		b = appendJSONString(b, tok)
		return append(b, `}}]},"logprobs":null,"finish_reason":null}`...)
	case i == 0:
		b = append(b, `{"index":0,"delta":{"role":"assistant","content":`...)
	default:
		b = append(b, `{"index":0,"delta":{"content":`...)
	}
	b = appendJSONString(b, tok)
	return append(b, `},"logprobs":null,"finish_reason":null}`...)
}

func (g *gen) appendToolHeaderChoice(b []byte) []byte {
	b = append(b, `{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_sim_0","type":"function","function":{"name":`...)
	b = appendJSONString(b, g.tool)
	return append(b, `,"arguments":""}}]},"logprobs":null,"finish_reason":null}`...)
}

func (g *gen) appendFinalChoice(b []byte) []byte {
	if g.ep == epCompletions {
		b = append(b, `{"text":"","index":0,"logprobs":null,"finish_reason":"`...)
	} else {
		b = append(b, `{"index":0,"delta":{},"logprobs":null,"finish_reason":"`...)
	}
	b = append(b, g.finishReason()...)
	return append(b, `"}`...)
}

// send writes one batch of SSE events and flushes it; false means the
// client is gone.
func send(w http.ResponseWriter, rc *http.ResponseController, b []byte) bool {
	if _, err := w.Write(b); err != nil {
		return false
	}
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return false
	}
	return true
}

func (s *Sim) serveStream(w http.ResponseWriter, r *http.Request, g *gen, f Failure, failing bool) {
	if failing && (f.Mode == FailBeforeFirstToken || f.Mode == FailHang) {
		s.failNonStream(w, r, f)
		return
	}
	ctx := r.Context()
	ttft, interval := s.timing()
	h := w.Header()
	h["Content-Type"] = hdrSSE
	h["Cache-Control"] = hdrNoCache
	rc := http.NewResponseController(w)
	var tm *time.Timer
	defer func() {
		if tm != nil {
			tm.Stop()
		}
	}()
	usageLast := s.usageLast
	if usageLast {
		g.includeUsage = false // no "usage":null on every chunk
	}
	g.zeroUsage = s.zeroUsage && g.includeUsage
	if ttft > 0 || s.splitWrites {
		// Like real engines, answer with headers at once and make the client
		// wait for the first token.
		w.WriteHeader(http.StatusOK)
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			s.canceled.Add(1)
			return
		}
		if !sleepCtx(ctx, &tm, ttft) {
			s.canceled.Add(1)
			return
		}
	} else if ctx.Err() != nil {
		s.canceled.Add(1)
		return
	}

	bp := getBuf()
	defer putBuf(bp)
	buf := g.appendStreamPrefix((*bp)[:0])
	pre := len(buf)
	defer func() { *bp = buf }() // keep a grown buffer for the pool

	total := g.completionTokens()
	limit := total
	if failing {
		after := max(f.AfterTokens, 1)
		if f.Mode == FailErrorLine || f.Mode == FailErrorEvent {
			after = max(f.AfterTokens, 0)
		}
		limit = min(after, total)
	}
	var pieces [3]string
	if g.tool != "" {
		pieces = g.toolPieces()
	}
	rng := g.seed
	start := time.Now()
	for i := 0; i < limit; i++ {
		if i > 0 && interval > 0 {
			if !sleepCtx(ctx, &tm, time.Until(start.Add(time.Duration(i)*interval))) {
				s.canceled.Add(1)
				return
			}
		} else if i > 0 && ctx.Err() != nil {
			s.canceled.Add(1)
			return
		}
		buf = buf[:pre]
		var tok string
		if g.tool != "" {
			if i == 0 {
				buf = append(buf, buf[:pre]...)
				buf = g.appendToolHeaderChoice(buf)
				buf = g.appendChunkEnd(buf)
			}
			tok = pieces[i]
		} else {
			tok = g.token(i, &rng)
		}
		buf = append(buf, buf[:pre]...)
		buf = g.appendTokenChoice(buf, i, tok)
		buf = g.appendChunkEnd(buf)
		if !send(w, rc, buf[pre:]) {
			s.canceled.Add(1)
			return
		}
		s.tokensSent.Add(1)
	}

	if failing {
		switch f.Mode {
		case FailAfterFirstToken, FailErrorLine, FailErrorEvent:
			buf = s.appendErrorEvent(buf[:pre], f.Mode, s.injected(f, g))
			_ = send(w, rc, buf[pre:])
			return
		case FailDisconnect:
			abortConn(w)
			return
		}
	}

	buf = buf[:pre]
	buf = append(buf, buf[:pre]...)
	buf = g.appendFinalChoice(buf)
	if usageLast {
		// llama-server's layout: usage and timings on the last chunk.
		buf = append(buf, `],"usage":`...)
		buf = g.appendUsage(buf)
		buf = append(buf, `,"timings":{"prompt_n":`...)
		buf = strconv.AppendInt(buf, int64(g.promptTokens), 10)
		buf = append(buf, `,"prompt_ms":0.1,"predicted_n":`...)
		buf = strconv.AppendInt(buf, int64(g.completionTokens()), 10)
		buf = append(buf, `,"predicted_ms":0.1}}`+"\n\n"...)
	} else {
		buf = g.appendChunkEnd(buf)
	}
	if g.includeUsage {
		buf = append(buf, buf[:pre]...)
		buf = append(buf, `],"usage":`...)
		buf = g.appendUsage(buf)
		buf = append(buf, "}\n\n"...)
	}
	buf = append(buf, "data: [DONE]\n\n"...)
	if !send(w, rc, buf[pre:]) {
		s.canceled.Add(1)
		return
	}
	s.completed.Add(1)
}

func (s *Sim) serveNonStream(w http.ResponseWriter, r *http.Request, g *gen) {
	ttft, interval := s.timing()
	n := g.completionTokens()
	d := ttft
	if interval > 0 && n > 1 {
		d += time.Duration(n-1) * interval
	}
	if d > 0 {
		var tm *time.Timer
		ok := sleepCtx(r.Context(), &tm, d)
		tm.Stop()
		if !ok {
			s.canceled.Add(1)
			return
		}
	} else if r.Context().Err() != nil {
		s.canceled.Add(1)
		return
	}

	bp := getBuf()
	b := (*bp)[:0]
	if g.ep == epChat {
		b = append(b, `{"id":"chatcmpl-sim-`...)
		b = strconv.AppendUint(b, g.id, 10)
		b = append(b, `","object":"chat.completion","created":`...)
	} else {
		b = append(b, `{"id":"cmpl-sim-`...)
		b = strconv.AppendUint(b, g.id, 10)
		b = append(b, `","object":"text_completion","created":`...)
	}
	b = strconv.AppendInt(b, g.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, g.model)
	switch {
	case g.ep == epCompletions:
		b = append(b, `,"choices":[{"text":`...)
		b = g.appendText(b)
		b = append(b, `,"index":0,"logprobs":null,"finish_reason":"`...)
	case g.tool != "":
		b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_sim_0","type":"function","function":{"name":`...)
		b = appendJSONString(b, g.tool)
		b = append(b, `,"arguments":`...)
		b = appendJSONString(b, g.toolArguments())
		b = append(b, `}}]},"logprobs":null,"finish_reason":"`...)
	default:
		b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
		b = g.appendText(b)
		b = append(b, `},"logprobs":null,"finish_reason":"`...)
	}
	b = append(b, g.finishReason()...)
	b = append(b, `"}],"usage":`...)
	b = g.appendUsage(b)
	b = append(b, '}')
	s.writeJSON(w, http.StatusOK, b)
	*bp = b
	putBuf(bp)
	s.tokensSent.Add(int64(n))
	s.completed.Add(1)
}

// appendText appends the whole generated text as a JSON string.
func (g *gen) appendText(b []byte) []byte {
	rng := g.seed
	if g.reply != nil { // a fixed reply may need escaping
		var sb strings.Builder
		for i := 0; i < g.maxTokens; i++ {
			sb.WriteString(g.token(i, &rng))
		}
		return appendJSONString(b, sb.String())
	}
	b = append(b, '"')
	for i := 0; i < g.maxTokens; i++ {
		b = append(b, g.token(i, &rng)...) // words need no escaping
	}
	return append(b, '"')
}
