package usage

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/events"
)

// decoder reads USAGE stream messages into reused values, so folding
// allocates only the strings of each event. The event it returns is valid
// until the next call. It knows the usage event types the ledger folds:
// UsageRecordedV1, V2, V3 (batch lines), V4 (with an admission verdict,
// a route class or a cache hit: folded exactly as V3, which it extends),
// V5 (V4 with the prompt template used: folded as V3 too),
// UsageCorrectedV1 and SandboxUsageV1; any other type is ignored.
type decoder struct {
	rec events.UsageRecordedV3 // V1 and V2 decode into its embedded parts; V4 into it and ext
	ext v4Fields
	cor events.UsageCorrectedV1
	sbx events.SandboxUsageV1
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
	case events.TypeUsageRecordedV1, events.TypeUsageRecordedV2, events.TypeUsageRecordedV3, events.TypeUsageRecordedV4, events.TypeUsageRecordedV5:
		res := d.rec.Reservations[:0]
		reset := func() { d.rec = events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{Reservations: res}} }
		reset()
		version := 1
		var target any = &d.rec.UsageRecordedV1
		ev = &d.rec.UsageRecordedV1
		switch typ {
		case events.TypeUsageRecordedV2:
			version, target, ev = 2, &d.rec.UsageRecordedV2, &d.rec.UsageRecordedV2
		case events.TypeUsageRecordedV3:
			version, target, ev = 3, &d.rec, &d.rec
		case events.TypeUsageRecordedV4:
			version, ev = 4, &d.rec
		case events.TypeUsageRecordedV5:
			version, ev = 5, &d.rec
		}
		d.ext = v4Fields{}
		if !fastDecodeRecorded(data, &d.rec, version, &d.in, &d.ext) {
			reset()
			d.ext = v4Fields{}
			if version >= 4 {
				var v5 events.UsageRecordedV5
				if err := json.Unmarshal(data, &v5); err != nil {
					return id, nil, decodedInvalid, fmt.Errorf("%s: %w", typ, err)
				}
				v4 := v5.UsageRecordedV4
				d.rec = v4.UsageRecordedV3
				d.ext = v4Fields{AdmissionAction: v4.AdmissionAction, AdmissionCategory: v4.AdmissionCategory, AdmissionScore: v4.AdmissionScore,
					Router: v4.Router, RouteClass: v4.RouteClass, Cache: v4.Cache}
				if version == 5 {
					d.ext.PromptID, d.ext.PromptVersion = v5.PromptID, v5.PromptVersion
				}
			} else if err := json.Unmarshal(data, target); err != nil {
				return id, nil, decodedInvalid, fmt.Errorf("%s: %w", typ, err)
			}
		}
		switch version {
		case 4:
			// V4's own checks; the fold then reads it as the V3 it extends.
			if err := d.ext.v4(d.rec).Validate(); err != nil {
				return id, nil, decodedInvalid, fmt.Errorf("%s: %w", typ, err)
			}
		case 5:
			if err := (events.UsageRecordedV5{UsageRecordedV4: d.ext.v4(d.rec), PromptID: d.ext.PromptID, PromptVersion: d.ext.PromptVersion}).Validate(); err != nil {
				return id, nil, decodedInvalid, fmt.Errorf("%s: %w", typ, err)
			}
		}
	case events.TypeUsageCorrectedV1:
		d.cor = events.UsageCorrectedV1{}
		if err := json.Unmarshal(data, &d.cor); err != nil {
			return id, nil, decodedInvalid, fmt.Errorf("%s: %w", typ, err)
		}
		ev = &d.cor
	case events.TypeSandboxUsageV1:
		d.sbx = events.SandboxUsageV1{}
		if err := json.Unmarshal(data, &d.sbx); err != nil {
			return id, nil, decodedInvalid, fmt.Errorf("%s: %w", typ, err)
		}
		ev = &d.sbx
	default:
		return id, nil, decodedIgnored, nil
	}
	if err := ev.Validate(); err != nil {
		return id, nil, decodedInvalid, fmt.Errorf("%s: %w", typ, err)
	}
	return id, ev, decodedEvent, nil
}
