package ledger

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// The set agrees with a map through adds, deletes, growth, shrinking and
// wrap-around (clustered ids collide and wrap in a small table).
func TestIDSetAgreesWithAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for _, clustered := range []bool{false, true} {
		var s idSet
		ref := map[ID]bool{}
		var live []ID
		newID := func() ID {
			var id ID
			binary.LittleEndian.PutUint64(id[:8], r.Uint64())
			binary.LittleEndian.PutUint64(id[8:], r.Uint64())
			if clustered { // homes in the last few slots: probes wrap
				binary.LittleEndian.PutUint64(id[:8], ^uint64(0)-uint64(r.IntN(1<<20))<<40)
			}
			if r.IntN(500) == 0 {
				id = ID{}
			}
			return id
		}
		steps := 100_000
		if clustered {
			steps = 20_000
		}
		for step := range steps {
			// grow to ~3000 members, shrink to ~10, and again
			target := 3000
			if clustered {
				target = 300
			}
			if (step/(steps/10))%2 == 1 {
				target = 10
			}
			if len(live) < target && r.IntN(3) > 0 || len(live) == 0 {
				id := newID()
				if got, want := s.add(id), !ref[id]; got != want {
					t.Fatalf("step %d: add = %v, want %v", step, got, want)
				}
				if !ref[id] {
					ref[id] = true
					live = append(live, id)
				}
			} else {
				k := r.IntN(len(live))
				id := live[k]
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
				delete(ref, id)
				s.del(id)
				if id := newID(); !ref[id] {
					s.del(id) // absent: no change
				}
				s.shrink()
			}
			if s.len() != len(ref) {
				t.Fatalf("step %d: len %d, want %d", step, s.len(), len(ref))
			}
			if step%499 == 0 {
				for _, id := range live {
					if !s.has(id) {
						t.Fatalf("step %d: member %x lost", step, id)
					}
				}
				if id := newID(); s.has(id) != ref[id] {
					t.Fatalf("step %d: has(%x) = %v", step, id, s.has(id))
				}
				n := 0
				s.each(func(id ID) {
					if !ref[id] {
						t.Fatalf("step %d: each yields %x, not a member", step, id)
					}
					n++
				})
				if n != len(ref) {
					t.Fatalf("step %d: each yields %d, want %d", step, n, len(ref))
				}
			}
		}
		if len(s.slots) > 4*minIDSetSlots {
			t.Fatalf("after shrinking to %d members the table has %d slots", len(ref), len(s.slots))
		}
	}
}
