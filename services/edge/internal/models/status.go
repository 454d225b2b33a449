package models

import (
	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/registry"
)

// Model states (Status.State) beyond the replica states of
// registry.WorkerState.
const (
	// StateUnknown: no worker replica reports on the model (none runs, or
	// its workers predate state reports, or they have not reported yet).
	// Such a model is listed by /v1/models: nothing says it cannot serve.
	StateUnknown = "unknown"
)

// unavailable orders the replica states of a model that none serves from
// the one that says most to an operator (a key or a name to fix) to the
// passing ones.
var unavailable = []string{
	registry.WorkerUnauthorized, registry.WorkerMisnamed, registry.WorkerUnreachable,
	registry.WorkerUnhealthy, registry.WorkerStarting, registry.WorkerDraining,
}

// Status is what the replicas of one served model report.
type Status struct {
	// State is "serving" when a replica serves; else the replicas' state
	// that says most (unauthorized, misnamed, unreachable, unhealthy,
	// starting, draining); "unknown" when no replica reports.
	State string `json:"state"`
	// Servable counts the replicas that take requests.
	Servable int `json:"servable_replicas"`
	// Replicas are every live replica's state, sorted by worker id.
	Replicas []registry.WorkerState `json:"replicas"`
}

// StatusOf is the status of the served model name from the directory's
// view of the worker replicas (a published adapter's are its base's).
func StatusOf(d *directory.View, name string) Status {
	rs := d.Workers(name)
	if rs == nil {
		rs = []registry.WorkerState{}
	}
	st := Status{State: StateUnknown, Replicas: rs}
	rank := len(unavailable)
	for _, r := range rs {
		if r.Servable() {
			st.Servable++
			st.State = registry.WorkerServing
			continue
		}
		if st.Servable > 0 {
			continue
		}
		for i, s := range unavailable[:rank] {
			if r.State == s {
				st.State, rank = s, i
				break
			}
		}
		if st.State == StateUnknown {
			st.State = r.State // a state this edge does not know
		}
	}
	return st
}

// Available reports whether clients are shown the model as servable: a
// replica serves it, or no replica reports on it (unknown is not
// unavailable: a model registered before its worker runs, or served by
// workers that do not report, is still listed).
func (s Status) Available() bool { return s.Servable > 0 || len(s.Replicas) == 0 }
