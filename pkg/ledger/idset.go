package ledger

import (
	"encoding/binary"
	"math/bits"
)

// idSet is a set of IDs: open addressing with linear probing over a flat
// table, deleting by backward shift, so a set whose members are replaced
// all the time (the dedup horizon moving on) keeps no tombstones and never
// grows while its size is steady. IDs are SHA-256 prefixes, uniformly
// random, so their first 8 bytes are the hash. The zero ID marks an empty
// slot and is kept aside.
type idSet struct {
	slots []ID
	n     int // members in slots
	zero  bool
}

const minIDSetSlots = 64

func newIDSet(hint int) idSet {
	var s idSet
	s.resize(slotsFor(hint))
	return s
}

// slotsFor is a table size holding n members at a load of at most 1/2.
func slotsFor(n int) int { return max(minIDSetSlots, 2*n) }

func (s *idSet) len() int {
	if s.zero {
		return s.n + 1
	}
	return s.n
}

func (s *idSet) home(id *ID) int {
	hi, _ := bits.Mul64(binary.LittleEndian.Uint64(id[:8]), uint64(len(s.slots)))
	return int(hi)
}

// find returns the slot of id, or of the empty slot where it would go.
func (s *idSet) find(id *ID) (int, bool) {
	i := s.home(id)
	for {
		switch s.slots[i] {
		case *id:
			return i, true
		case ID{}:
			return i, false
		}
		if i++; i == len(s.slots) {
			i = 0
		}
	}
}

func (s *idSet) has(id ID) bool {
	if id == (ID{}) {
		return s.zero
	}
	if len(s.slots) == 0 {
		return false
	}
	_, ok := s.find(&id)
	return ok
}

// add adds id and reports whether it was new.
func (s *idSet) add(id ID) bool {
	if id == (ID{}) {
		had := s.zero
		s.zero = true
		return !had
	}
	if 4*(s.n+1) > 3*len(s.slots) {
		s.resize(slotsFor(s.n + 1))
	}
	i, ok := s.find(&id)
	if ok {
		return false
	}
	s.slots[i] = id
	s.n++
	return true
}

// del removes id, shifting back the members probed past its slot.
func (s *idSet) del(id ID) {
	if id == (ID{}) {
		s.zero = false
		return
	}
	if len(s.slots) == 0 {
		return
	}
	i, ok := s.find(&id)
	if !ok {
		return
	}
	j := i
	for {
		if j++; j == len(s.slots) {
			j = 0
		}
		if s.slots[j] == (ID{}) {
			break
		}
		// The member at j may move to i unless its home lies cyclically
		// in (i, j].
		k := s.home(&s.slots[j])
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		s.slots[i] = s.slots[j]
		i = j
	}
	s.slots[i] = ID{}
	s.n--
}

// shrink halves the table when it is at most 1/8 full, so a set that
// lost most of its members gives the memory back.
func (s *idSet) shrink() {
	if len(s.slots) > minIDSetSlots && 8*s.n <= len(s.slots) {
		s.resize(slotsFor(s.n))
	}
}

func (s *idSet) resize(size int) {
	old := s.slots
	s.slots = make([]ID, size)
	for i := range old {
		if old[i] != (ID{}) {
			j, _ := s.find(&old[i])
			s.slots[j] = old[i]
		}
	}
}

// each calls fn for every member.
func (s *idSet) each(fn func(ID)) {
	if s.zero {
		fn(ID{})
	}
	for _, id := range s.slots {
		if id != (ID{}) {
			fn(id)
		}
	}
}
