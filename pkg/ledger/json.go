package ledger

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unsafe"
)

// Snapshot versions. Version 1 (read only) held every id ever applied, with
// no minute; version 2 holds the ids remembered within the dedup horizon,
// grouped by the minute they are remembered at, and the clock; version 3 is
// version 2 whose buckets may be batch buckets ("batch":true). A ledger is
// written in version 2 while it has no batch bucket (byte for byte as
// before batch usage existed, so a binary of that time still reads it) and
// in version 3 once it has one, which such a binary refuses rather than
// folding batch buckets into real-time ones. Version 4 is version 3 whose
// buckets may be sandbox buckets (EndpointSandbox, with the sandbox_*
// counters): a ledger is written in version 4 once it has one, so a binary
// that knows no sandbox counters refuses it rather than dropping them; a
// ledger without sandbox buckets is written exactly as before.
const (
	snapshotV1 = 1
	snapshotV2 = 2
	snapshotV3 = 3
	snapshotV4 = 4
)

// isSandbox reports whether a bucket needs version 4: a sandbox bucket, or
// any bucket with sandbox counters.
func isSandbox(b Bucket) bool { return b.Endpoint == EndpointSandbox || b.HasSandbox() }

// The JSON form, version 2 to 4:
//
//	{"version":2,"last_seq":N,"applied":N,"beyond_horizon":N,"clock":M,
//	 "buckets":[Bucket...],
//	 "seen":[{"minute":M,"ids":"<base64 of the 16-byte ids, concatenated>"}...]}
//
// clock (the newest event minute applied, a unix minute) is absent before
// any event; seen groups are in ascending minute order and their ids in the
// order they were applied. A version 3 or 4 bucket has "batch":true when it
// is a batch bucket (the field is absent otherwise); a version 4 bucket
// has its sandbox_* counters when they are not 0. Version 1 had no beyond_horizon or clock and its
// seen was one base64 string of every id, sorted.
type wireLedger struct {
	Version       int      `json:"version"`
	LastSeq       uint64   `json:"last_seq"`
	Applied       uint64   `json:"applied"`
	BeyondHorizon uint64   `json:"beyond_horizon"`
	Clock         *int64   `json:"clock"`
	Buckets       []Bucket `json:"buckets"`
	Seen          wireSeen `json:"seen"`
}

// wireSeen is the seen field of either version: a string (version 1) or an
// array of groups (version 2), decoded as it is read.
type wireSeen struct {
	str    bool        // a string
	arr    bool        // an array
	ids    wireIDs     // version 1
	groups []wireGroup // version 2
}

func (w *wireSeen) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		return nil
	case b[0] == '"':
		w.str = true
		return w.ids.UnmarshalJSON(b)
	}
	w.arr = true
	if g, ok := parseGroups(b); ok {
		w.groups = g
		return nil
	}
	return json.Unmarshal(b, &w.groups)
}

// parseGroups reads the groups in exactly the layout MarshalJSON writes,
// without another pass of encoding/json over the ids; anything else (or
// anything wrong) is left to encoding/json (ok false).
func parseGroups(b []byte) (groups []wireGroup, ok bool) {
	p, ok := bytes.CutPrefix(b, []byte("["))
	if !ok {
		return nil, false
	}
	if string(p) == "]" {
		return nil, true
	}
	for {
		if p, ok = bytes.CutPrefix(p, []byte(`{"minute":`)); !ok {
			return nil, false
		}
		i := 0
		for i < len(p) && (p[i] == '-' || '0' <= p[i] && p[i] <= '9') {
			i++
		}
		m, err := strconv.ParseInt(string(p[:i]), 10, 64)
		if err != nil {
			return nil, false
		}
		if p, ok = bytes.CutPrefix(p[i:], []byte(`,"ids":"`)); !ok {
			return nil, false
		}
		j := bytes.IndexByte(p, '"')
		if j < 0 {
			return nil, false
		}
		ids, err := decodeIDs(p[:j])
		if err != nil {
			return nil, false
		}
		groups = append(groups, wireGroup{Minute: m, IDs: ids})
		if p, ok = bytes.CutPrefix(p[j+1:], []byte("}")); !ok {
			return nil, false
		}
		if p, ok = bytes.CutPrefix(p, []byte(",")); !ok {
			return groups, string(p) == "]"
		}
	}
}

type wireGroup struct {
	Minute int64   `json:"minute"`
	IDs    wireIDs `json:"ids"`
}

// wireIDs is a base64 string of concatenated ids, decoded straight into the
// ids' memory.
type wireIDs []ID

func (w *wireIDs) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' || bytes.IndexByte(b, '\\') >= 0 {
		var raw []byte // not a plain string: let encoding/json say why
		if err := json.Unmarshal(b, &raw); err != nil {
			return err
		}
		return w.set(raw)
	}
	ids, err := decodeIDs(b[1 : len(b)-1])
	if err != nil {
		return err
	}
	*w = ids
	return nil
}

// decodeIDs decodes base64 (without JSON escapes) into ids.
func decodeIDs(src []byte) (wireIDs, error) {
	if bytes.IndexByte(src, '\\') >= 0 {
		return nil, errors.New("ledger: seen ids: escaped")
	}
	n := base64.StdEncoding.DecodedLen(len(src))
	ids := make([]ID, (n+len(ID{})-1)/len(ID{}))
	got, err := base64.StdEncoding.Decode(idBytes(ids), src)
	if err != nil {
		return nil, fmt.Errorf("ledger: seen ids: %w", err)
	}
	if got%len(ID{}) != 0 {
		return nil, errors.New("ledger: seen ids are not a whole number of 16-byte ids")
	}
	return ids[:got/len(ID{})], nil
}

func (w *wireIDs) set(raw []byte) error {
	if len(raw)%len(ID{}) != 0 {
		return errors.New("ledger: seen ids are not a whole number of 16-byte ids")
	}
	ids := make([]ID, len(raw)/len(ID{}))
	copy(idBytes(ids), raw)
	*w = ids
	return nil
}

// idBytes is the memory of ids as bytes (an ID is a [16]byte, so a []ID is
// contiguous bytes).
func idBytes(ids []ID) []byte {
	if len(ids) == 0 {
		return nil
	}
	return unsafe.Slice(&ids[0][0], len(ids)*len(ID{}))
}

// MarshalJSON writes the whole state (see wireLedger): buckets in bucket
// order, remembered ids by minute, so ledgers that folded the same stream
// give equal bytes. The ids are base64-encoded straight from memory; call it
// directly rather than through json.Marshal, which would copy and re-scan
// the result.
func (l *Ledger) MarshalJSON() ([]byte, error) {
	buckets := make([]Bucket, 0, l.nb)
	version := snapshotV2
	l.Range(time.Time{}, time.Time{}, func(b Bucket) bool {
		buckets = append(buckets, b)
		switch {
		case isSandbox(b):
			version = snapshotV4
		case b.Batch:
			version = max(version, snapshotV3)
		}
		return true
	})
	bj, err := json.Marshal(buckets)
	if err != nil {
		return nil, err
	}
	size := len(bj) + 160
	for _, g := range l.groups {
		size += base64.StdEncoding.EncodedLen(len(g.ids)*len(ID{})) + 40
	}
	out := make([]byte, 0, size)
	out = append(out, `{"version":`...)
	out = strconv.AppendInt(out, int64(version), 10)
	out = append(out, `,"last_seq":`...)
	out = strconv.AppendUint(out, l.lastSeq, 10)
	out = append(out, `,"applied":`...)
	out = strconv.AppendUint(out, l.applied, 10)
	out = append(out, `,"beyond_horizon":`...)
	out = strconv.AppendUint(out, l.beyond, 10)
	if l.hasClock {
		out = append(out, `,"clock":`...)
		out = strconv.AppendInt(out, l.clock, 10)
	}
	out = append(out, `,"buckets":`...)
	out = append(out, bj...)
	out = append(out, `,"seen":[`...)
	for i, g := range l.groups {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"minute":`...)
		out = strconv.AppendInt(out, g.minute, 10)
		out = append(out, `,"ids":"`...)
		out = base64.StdEncoding.AppendEncode(out, idBytes(g.ids))
		out = append(out, `"}`...)
	}
	out = append(out, "]}"...)
	return out, nil
}

// UnmarshalJSON replaces l's state with the state written by MarshalJSON
// (version 2, 3 or 4) or by earlier versions (version 1); l keeps its dedup horizon,
// and ids older than it are forgotten at once. Calling it directly rather
// than through json.Unmarshal spares a scan of the whole snapshot. The ids of a version 1
// snapshot, which have no minute, are remembered at its newest bucket
// minute: they are kept for the horizon from then, then forgotten.
func (l *Ledger) UnmarshalJSON(b []byte) error {
	var w wireLedger
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("ledger: decode: %w", err)
	}
	if w.Version < snapshotV1 || w.Version > snapshotV4 {
		return fmt.Errorf("ledger: snapshot version %d, want %d to %d", w.Version, snapshotV1, snapshotV4)
	}
	n := New()
	n.horizon = l.horizon
	n.lastSeq, n.applied = w.LastSeq, w.Applied
	for _, bk := range w.Buckets {
		if bk.Start%60 != 0 {
			return fmt.Errorf("ledger: bucket start %d is not a whole minute", bk.Start)
		}
		if bk.Batch && w.Version < snapshotV3 {
			return fmt.Errorf("ledger: a batch bucket in a version %d snapshot", w.Version)
		}
		if isSandbox(bk) && w.Version < snapshotV4 {
			return fmt.Errorf("ledger: a sandbox bucket in a version %d snapshot", w.Version)
		}
		n.add(bk.Start/60, bk.Dims, bk.Counters)
	}
	var groups []wireGroup
	switch w.Version {
	case snapshotV1:
		if w.Seen.arr {
			return errors.New("ledger: version 1 seen ids are not a string")
		}
		ids := w.Seen.ids
		if len(n.order) > 0 {
			n.clock, n.hasClock = n.order[len(n.order)-1], true
		} else if len(ids) > 0 {
			n.hasClock = true // ids without buckets: remembered at minute 0
		}
		if len(ids) > 0 {
			groups = []wireGroup{{Minute: n.clock, IDs: ids}}
		}
	case snapshotV2, snapshotV3, snapshotV4:
		n.beyond = w.BeyondHorizon
		if w.Clock != nil {
			n.clock, n.hasClock = *w.Clock, true
		}
		if w.Seen.str {
			return errors.New("ledger: version 2 seen ids are not groups")
		}
		groups = w.Seen.groups
	}
	total := 0
	for i, g := range groups {
		if i > 0 && g.Minute <= groups[i-1].Minute {
			return fmt.Errorf("ledger: seen minute %d after %d: not ascending", g.Minute, groups[i-1].Minute)
		}
		if !n.hasClock || g.Minute > n.clock {
			return fmt.Errorf("ledger: seen minute %d after the clock", g.Minute)
		}
		total += len(g.IDs)
	}
	n.seen = newIDSet(total)
	n.groups = make([]idGroup, 0, len(groups))
	for _, g := range groups {
		if len(g.IDs) == 0 {
			continue
		}
		for _, id := range g.IDs {
			if !n.seen.add(id) {
				return fmt.Errorf("ledger: seen id %x twice", id[:])
			}
		}
		n.groups = append(n.groups, idGroup{minute: g.Minute, ids: g.IDs})
	}
	n.prune(n.horizonMinutes())
	*l = *n
	return nil
}
