package batch

import (
	"errors"
	"fmt"
)

// The scheduler's configuration follows Kueue's model, without Kubernetes:
//
//   - a Flavor is a worker class (registry.Engine.Class): the replicas of a
//     class are one kind of capacity;
//   - a Pool (Kueue's ClusterQueue) serves some models with a nominal quota
//     per flavor, in concurrent lines and tokens per second;
//   - pools in one Cohort lend their idle quota to each other, each within
//     its BorrowingLimit and LendingLimit;
//   - a Queue (Kueue's LocalQueue) is a tenant's queue in a pool, with a
//     Weight: among queues with waiting lines, the next line comes from the
//     queue whose dominant resource share (in use plus decayed history, over
//     its fair portion) divided by its weight is lowest.
//
// Every entity is one key in events.BucketBatchQueues. A model in no pool
// has an implicit pool named after it whose quota is its serving replicas'
// slots; a tenant with no queue in a pool has one of weight 1.

// Key prefixes in events.BucketBatchQueues.
const (
	FlavorPrefix = "flavor."
	PoolPrefix   = "pool."
	CohortPrefix = "cohort."
	QueuePrefix  = "queue."
)

// FlavorKey, PoolKey, CohortKey and QueueKey are the entities' keys.
func FlavorKey(name string) string        { return FlavorPrefix + name }
func PoolKey(name string) string          { return PoolPrefix + name }
func CohortKey(name string) string        { return CohortPrefix + name }
func QueueKey(pool, tenant string) string { return QueuePrefix + pool + "." + tenant }

// Flavor is a worker class.
type Flavor struct {
	Name string `json:"name"`
	// Description says what the class is ("H100 80GB", "CPU, experts
	// streamed from NVMe").
	Description string `json:"description,omitempty"`
}

// Quota is a pool's nominal quota of one flavor. Zero Lines means the
// flavor's serving slots; zero TokensPerSecond means no token quota.
// BorrowingLimit and LendingLimit bound, in lines, what the pool may take
// from its cohort beyond its nominal quota and lend of it (nil: no limit).
type Quota struct {
	Flavor          string `json:"flavor"`
	Lines           int64  `json:"lines"`
	TokensPerSecond int64  `json:"tokens_per_second,omitempty"`
	BorrowingLimit  *int64 `json:"borrowing_limit,omitempty"`
	LendingLimit    *int64 `json:"lending_limit,omitempty"`
}

// Pool serves models with quotas.
type Pool struct {
	Name   string   `json:"name"`
	Models []string `json:"models"`
	Cohort string   `json:"cohort,omitempty"`
	Quotas []Quota  `json:"quotas"`
	// GroupSize is how many lines of one model are dispatched together to
	// one worker replica (batch-union: an expert-streaming engine reads
	// each expert once per group). 0: the replica's free slots.
	GroupSize int `json:"group_size,omitempty"`
	// Weight is the pool's weight in its cohort's fair sharing (0: 1).
	Weight float64 `json:"weight,omitempty"`
}

// Cohort groups pools that lend and borrow idle quota.
type Cohort struct {
	Name string `json:"name"`
	// Description is free text.
	Description string `json:"description,omitempty"`
}

// Queue is a tenant's queue in a pool.
type Queue struct {
	Pool   string `json:"pool"`
	Tenant string `json:"tenant"`
	// Weight is the queue's fair-sharing weight (0: 1).
	Weight float64 `json:"weight,omitempty"`
	// MaxEnqueuedLines and MaxEnqueuedTokens bound the tenant's lines and
	// estimated tokens not yet finished in all its batches: a create past
	// them is refused with 429 (0: the batch service's defaults).
	MaxEnqueuedLines  int64 `json:"max_enqueued_lines,omitempty"`
	MaxEnqueuedTokens int64 `json:"max_enqueued_tokens,omitempty"`
}

// EffectiveWeight is the weight, 1 when unset.
func (q Queue) EffectiveWeight() float64 {
	if q.Weight <= 0 {
		return 1
	}
	return q.Weight
}

// Validate checks a pool.
func (p Pool) Validate() error {
	var errs []error
	if p.Name == "" {
		errs = append(errs, errors.New("name is required"))
	}
	if p.Weight < 0 || p.GroupSize < 0 {
		errs = append(errs, errors.New("weight and group_size must not be negative"))
	}
	seen := map[string]bool{}
	for i, q := range p.Quotas {
		if seen[q.Flavor] {
			errs = append(errs, fmt.Errorf("quotas[%d]: flavor %q appears twice", i, q.Flavor))
		}
		seen[q.Flavor] = true
		if q.Lines < 0 || q.TokensPerSecond < 0 || (q.BorrowingLimit != nil && *q.BorrowingLimit < 0) || (q.LendingLimit != nil && *q.LendingLimit < 0) {
			errs = append(errs, fmt.Errorf("quotas[%d]: quotas and limits must not be negative", i))
		}
	}
	return errors.Join(errs...)
}

// Validate checks a queue.
func (q Queue) Validate() error {
	var errs []error
	if q.Pool == "" || q.Tenant == "" {
		errs = append(errs, errors.New("pool and tenant are required"))
	}
	if q.Weight < 0 || q.MaxEnqueuedLines < 0 || q.MaxEnqueuedTokens < 0 {
		errs = append(errs, errors.New("weight and limits must not be negative"))
	}
	return errors.Join(errs...)
}

// Query kinds on events.BatchQuery.
const (
	// QueryQueues asks for the scheduler's state: QueuesReply.
	QueryQueues = "queues"
)

// QueryRequest is a batch scheduler query.
type QueryRequest struct {
	Kind string `json:"kind"`
}

// QueuesReply is the scheduler's state.
type QueuesReply struct {
	Pools  []PoolStatus  `json:"pools"`
	Queues []QueueStatus `json:"queues"`
	At     int64         `json:"at"`
	Error  string        `json:"error,omitempty"`
}

// PoolStatus is one pool's quota and use, per flavor.
type PoolStatus struct {
	Name    string         `json:"name"`
	Cohort  string         `json:"cohort,omitempty"`
	Models  []string       `json:"models"`
	Flavors []FlavorStatus `json:"flavors"`
	// Implicit is true for a pool made for a model in no configured pool.
	Implicit bool `json:"implicit,omitempty"`
}

// FlavorStatus is a pool's nominal quota of one flavor and what it uses,
// borrows and lends of it now.
type FlavorStatus struct {
	Flavor   string `json:"flavor"`
	Nominal  int64  `json:"nominal"`
	InUse    int64  `json:"in_use"`
	Borrowed int64  `json:"borrowed"`
	Lent     int64  `json:"lent"`
	// TokensPerSecond is the token quota (0: none) and TokensUsed the
	// current rate.
	TokensPerSecond int64   `json:"tokens_per_second,omitempty"`
	TokensRate      float64 `json:"tokens_rate,omitempty"`
}

// QueueStatus is one tenant queue's fair-sharing state.
type QueueStatus struct {
	Pool   string  `json:"pool"`
	Tenant string  `json:"tenant"`
	Weight float64 `json:"weight"`
	// Share is the queue's weighted dominant resource share (what
	// admission orders by); Admitted its lines in flight; Borrowed how
	// many of them run on quota borrowed from the cohort.
	Share    float64 `json:"share"`
	Admitted int64   `json:"admitted"`
	Borrowed int64   `json:"borrowed"`
	// Waiting counts lines enqueued and not yet dispatched, Completed
	// lines finished since the batch service started.
	Waiting   int64 `json:"waiting"`
	Completed int64 `json:"completed"`
	// Held is true while the queue is over its share and gets no new
	// lines (its lines in flight finish).
	Held bool `json:"held,omitempty"`
}
