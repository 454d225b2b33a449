package usage

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/events"
)

// decoder reads USAGE stream messages into reused values, so folding
// allocates only the strings of each event. The event it returns is valid
// until the next call.
type decoder struct {
	v2  events.UsageRecordedV2
	cor events.UsageCorrectedV1
	in  interner
}

type decoded int

const (
	decodedEvent   decoded = iota // ev is a usage event
	decodedIgnored                // not a usage event (unknown or no type)
	decodedInvalid                // a usage event that does not decode or validate
)

// decode returns the envelope id and the event of a message. Like
// events.Registry.Decode it validates the event; unlike it, it allocates no
// new event value per message.
func (d *decoder) decode(h nats.Header, data []byte) (id string, ev events.Event, kind decoded, err error) {
	typ := h.Get(events.HeaderType)
	id = h.Get(events.HeaderID)
	if id == "" {
		id = h.Get(nats.MsgIdHdr)
	}
	switch typ {
	case events.TypeUsageRecordedV1, events.TypeUsageRecordedV2:
		isV2 := typ == events.TypeUsageRecordedV2
		res := d.v2.Reservations[:0]
		d.v2 = events.UsageRecordedV2{Reservations: res}
		var target any = &d.v2.UsageRecordedV1
		ev = &d.v2.UsageRecordedV1
		if isV2 {
			target, ev = &d.v2, &d.v2
		}
		if !fastDecodeRecorded(data, &d.v2, isV2, &d.in) {
			d.v2 = events.UsageRecordedV2{Reservations: res}
			if err := json.Unmarshal(data, target); err != nil {
				return id, nil, decodedInvalid, fmt.Errorf("%s: %w", typ, err)
			}
		}
	case events.TypeUsageCorrectedV1:
		d.cor = events.UsageCorrectedV1{}
		if err := json.Unmarshal(data, &d.cor); err != nil {
			return id, nil, decodedInvalid, fmt.Errorf("%s: %w", typ, err)
		}
		ev = &d.cor
	default:
		return id, nil, decodedIgnored, nil
	}
	if err := ev.Validate(); err != nil {
		return id, nil, decodedInvalid, fmt.Errorf("%s: %w", typ, err)
	}
	return id, ev, decodedEvent, nil
}
