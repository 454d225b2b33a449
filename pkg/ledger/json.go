package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// snapshotVersion is the version of the JSON form; Unmarshal refuses others.
const snapshotVersion = 1

type wireLedger struct {
	Version int      `json:"version"`
	LastSeq uint64   `json:"last_seq"`
	Applied uint64   `json:"applied"`
	Buckets []Bucket `json:"buckets"`
	// Seen is every remembered event ID (16 bytes each), sorted and
	// concatenated; JSON carries it as base64.
	Seen []byte `json:"seen"`
}

// MarshalJSON writes the whole state: buckets (in bucket order), seen ids
// (sorted) and the last sequence, so equal ledgers give equal bytes.
func (l *Ledger) MarshalJSON() ([]byte, error) {
	w := wireLedger{Version: snapshotVersion, LastSeq: l.lastSeq, Applied: l.applied, Buckets: make([]Bucket, 0, l.nb)}
	l.Range(time.Time{}, time.Time{}, func(b Bucket) bool {
		w.Buckets = append(w.Buckets, b)
		return true
	})
	ids := make([]ID, 0, len(l.seen))
	for id := range l.seen {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b ID) int { return bytes.Compare(a[:], b[:]) })
	w.Seen = make([]byte, 0, len(ids)*len(ID{}))
	for _, id := range ids {
		w.Seen = append(w.Seen, id[:]...)
	}
	return json.Marshal(w)
}

// UnmarshalJSON replaces l with the state written by MarshalJSON.
func (l *Ledger) UnmarshalJSON(b []byte) error {
	var w wireLedger
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("ledger: decode: %w", err)
	}
	if w.Version != snapshotVersion {
		return fmt.Errorf("ledger: snapshot version %d, want %d", w.Version, snapshotVersion)
	}
	if len(w.Seen)%len(ID{}) != 0 {
		return errors.New("ledger: seen ids are not a whole number of 16-byte ids")
	}
	n := New()
	n.lastSeq, n.applied = w.LastSeq, w.Applied
	for _, bk := range w.Buckets {
		if bk.Start%60 != 0 {
			return fmt.Errorf("ledger: bucket start %d is not a whole minute", bk.Start)
		}
		n.add(bk.Start/60, bk.Dims, bk.Counters)
	}
	n.seen = make(map[ID]struct{}, len(w.Seen)/len(ID{}))
	for i := 0; i < len(w.Seen); i += len(ID{}) {
		n.seen[ID(w.Seen[i:i+len(ID{})])] = struct{}{}
	}
	*l = *n
	return nil
}
