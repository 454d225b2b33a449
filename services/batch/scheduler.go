package batch

import (
	"time"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/services/batch/fairshare"
)

// Admission is one line admitted by the scheduler: whose, of which model
// and pool, on which flavor (worker class).
type Admission = fairshare.Admission

// Scheduler is the fair-share scheduler as the dispatcher uses it
// (services/batch/fairshare implements it): the dispatcher tells it the
// configuration, the capacity of each model's flavors and each tenant
// queue's waiting lines, and admits lines in the order it picks. It must be
// safe for concurrent use.
type Scheduler interface {
	SetConfig(pools []api.Pool, cohorts []api.Cohort, queues []api.Queue)
	PoolOf(model string) string
	SetCapacity(model, flavor string, slots int64)
	SetWaiting(tenant, model string, n int64)
	Admit(now time.Time) (Admission, bool)
	Release(a Admission, tokens int64, dispatched bool, now time.Time)
	Status(now time.Time) api.QueuesReply
}

var _ Scheduler = (*fairshare.Scheduler)(nil)
