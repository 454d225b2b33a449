package usage

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/events"
)

// Request sends req on events.UsageQuery and returns the usage service's
// reply body (an OpenAI page, an audit, a ledger dump, prices or an
// ErrorReply), waiting until ctx ends.
//
// Use it rather than nc.Request: events.UsageQuery lies under
// events.UsageAll, the subjects of the USAGE stream, so JetStream also
// stores each query and answers it with a publish acknowledgement
// ({"stream":"USAGE","seq":N}), usually before the service does. Request
// skips every reply without the service's reply header.
func Request(ctx context.Context, nc *nats.Conn, req QueryRequest) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("usage: query: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	m := nats.NewMsg(events.UsageQuery)
	m.Reply = inbox
	m.Data = body
	if err := nc.PublishMsg(m); err != nil {
		return nil, fmt.Errorf("usage: query: %w", err)
	}
	for {
		r, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("usage: query %s: %w", req.Op, err)
		}
		if r.Header.Get(replyHeader) != "" {
			return r.Data, nil
		}
	}
}
