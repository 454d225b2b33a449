package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
)

// Stored responses live in events.BucketResponses, one record per
// response under "r.<tenant>.<response id>", created with the edge's
// retention as its TTL (jetstream.KeyTTL). A record carries the response
// object as it was answered, the request's own input items (with ids, for
// GET /v1/responses/{id}/input_items) and the conversation before it (the
// input and output of every earlier response of a previous_response_id
// chain, without instructions, which OpenAI does not carry forward), so
// that chaining onto it reads one record. A record larger than
// chunkBytes is written as chunks "r.<tenant>.<id>.<n>" first, then the
// head naming how many there are; a head whose chunks are gone reads as
// not found. Nothing is ever cut: a record over MaxRecordBytes is refused.

// DefaultRetention is how long a stored response is kept unless the edge
// is configured otherwise.
const DefaultRetention = 30 * 24 * time.Hour

// MaxRecordBytes bounds one stored response (its input, output and the
// conversation before it).
const MaxRecordBytes = 64 << 20

// chunkBytes is the largest value written to the bucket (NATS' default
// payload limit is 1 MiB).
var chunkBytes = 512 << 10

// storedItem is one input or output message of a conversation.
type storedItem struct {
	ID      string `json:"id"`
	Role    string `json:"role"`
	Content string `json:"content"`
}

// record is one stored response.
type record struct {
	ID        string `json:"id"`
	CreatedAt int64  `json:"created_at"`
	// Response is the response object as it was answered.
	Response json.RawMessage `json:"response"`
	// Input is this request's input items (prompt template messages
	// first).
	Input []storedItem `json:"input"`
	// Context is the conversation before this request: the input and
	// output of the responses it chains onto, oldest first.
	Context []storedItem `json:"context,omitempty"`
	// Output is the assistant messages this response answered.
	Output []storedItem `json:"output"`
}

// conversation is what a response chaining onto r sends the model before
// its own input.
func (r *record) conversation() []storedItem {
	out := make([]storedItem, 0, len(r.Context)+len(r.Input)+len(r.Output))
	out = append(out, r.Context...)
	out = append(out, r.Input...)
	return append(out, r.Output...)
}

// head is the value under a record's key: the record inline, or the number
// of its chunks.
type head struct {
	Record json.RawMessage `json:"record,omitempty"`
	Chunks int             `json:"chunks,omitempty"`
	Bytes  int             `json:"bytes,omitempty"`
}

var responseIDRe = regexp.MustCompile(`^resp_[A-Za-z0-9]{1,64}$`)

// validResponseID reports whether id can name a stored response (any other
// is answered as not found without a bucket read).
func validResponseID(id string) bool { return responseIDRe.MatchString(id) }

func recordKey(tenant, id string) string { return "r." + events.Token(tenant) + "." + id }

// errRecordTooLarge refuses a record over MaxRecordBytes.
var errRecordTooLarge = errors.New("the response with its conversation is over the stored size limit")

// store keeps and reads stored responses.
type store struct {
	kv  jetstream.KeyValue
	ttl time.Duration
}

// put stores rec for tenant.
func (s *store) put(ctx context.Context, tenant string, rec *record) error {
	blob, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if len(blob) > MaxRecordBytes {
		return fmt.Errorf("%w (%d bytes, limit %d)", errRecordTooLarge, len(blob), MaxRecordBytes)
	}
	key := recordKey(tenant, rec.ID)
	h := head{Record: blob}
	if len(blob) > chunkBytes {
		h = head{Bytes: len(blob)}
		for off := 0; off < len(blob); off += chunkBytes {
			end := min(off+chunkBytes, len(blob))
			if _, err := s.kv.Create(ctx, key+"."+strconv.Itoa(h.Chunks), blob[off:end], jetstream.KeyTTL(s.ttl)); err != nil {
				return fmt.Errorf("chunk %d: %w", h.Chunks, err)
			}
			h.Chunks++
		}
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return err
	}
	_, err = s.kv.Create(ctx, key, hb, jetstream.KeyTTL(s.ttl))
	return err
}

// get reads tenant's response id; ok is false when there is none (never
// stored, deleted, expired, another tenant's).
func (s *store) get(ctx context.Context, tenant, id string) (*record, bool, error) {
	if !validResponseID(id) {
		return nil, false, nil
	}
	key := recordKey(tenant, id)
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var h head
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return nil, false, fmt.Errorf("stored response %s: %w", id, err)
	}
	blob := []byte(h.Record)
	if h.Chunks > 0 {
		if h.Bytes > MaxRecordBytes {
			return nil, false, fmt.Errorf("stored response %s: %d bytes", id, h.Bytes)
		}
		blob = make([]byte, 0, h.Bytes)
		for i := range h.Chunks {
			c, err := s.kv.Get(ctx, key+"."+strconv.Itoa(i))
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return nil, false, nil // expired with its head about to follow
			}
			if err != nil {
				return nil, false, err
			}
			blob = append(blob, c.Value()...)
		}
		if len(blob) != h.Bytes {
			return nil, false, fmt.Errorf("stored response %s: %d of %d bytes", id, len(blob), h.Bytes)
		}
	}
	var rec record
	if err := json.Unmarshal(blob, &rec); err != nil {
		return nil, false, fmt.Errorf("stored response %s: %w", id, err)
	}
	return &rec, true, nil
}

// delete removes tenant's response id; false when there was none.
func (s *store) delete(ctx context.Context, tenant, id string) (bool, error) {
	if !validResponseID(id) {
		return false, nil
	}
	key := recordKey(tenant, id)
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var h head
	_ = json.Unmarshal(e.Value(), &h)
	// The head first: from then on the response is gone, whatever
	// happens to its chunks (they expire with their TTL anyway).
	if err := s.kv.Purge(ctx, key, jetstream.PurgeTTL(time.Minute)); err != nil {
		return false, err
	}
	for i := range h.Chunks {
		_ = s.kv.Purge(ctx, key+"."+strconv.Itoa(i), jetstream.PurgeTTL(time.Minute))
	}
	return true, nil
}
