// Package events is the bus contract of aiforge, defined once: subject names,
// streams, KV buckets, the CloudEvents-style envelope and the versioned event
// types every service publishes or consumes.
//
// Subjects follow one scheme: aiforge.<domain>.<event>.v<N>[.<token>]. A
// constant names each fixed subject; a printf template ending in T names each
// parameterised one (the nats-server JSApiStreamCreate/JSApiStreamCreateT
// pattern). Parameters go through Token so that user-chosen names (models,
// tenants) can never add or remove subject levels.
package events

import (
	"fmt"
	"strings"
)

// Real-time inference over core NATS request/reply. Workers of one model
// share InferT through a queue group; the reply subject is the edge's inbox.
const (
	// InferT is where requests for a model are published; the argument is
	// Token(model). Workers of that model subscribe in queue group
	// InferQueue(model).
	InferT = "aiforge.infer.v1.%s"
	// InferDirectT addresses one worker replica of a model (failover):
	// Token(model), worker id.
	InferDirectT = "aiforge.infer.v1.%s.w.%s"
	// InferPingT is answered by every worker replica of a model (not a queue
	// group) with its id; the edge uses it to find another replica.
	InferPingT = "aiforge.infer.v1.%s.ping"
	// InferControlT carries cancel and flow-control credits from an edge to
	// the worker serving a request: worker id.
	InferControlT = "aiforge.infer.ctl.v1.%s"
)

// Durable events on JetStream.
const (
	// UsageRecordedT carries UsageRecordedV1 events: Token(tenant).
	UsageRecordedT = "aiforge.usage.recorded.v1.%s"
	// UsageAll matches every usage event.
	UsageAll = "aiforge.usage.>"
	// UsageQuery is the core NATS request/reply subject of usage reports,
	// audits and ledger dumps, answered by the usage service. It lies
	// outside aiforge.usage.> so the USAGE stream never captures a query.
	UsageQuery = "aiforge.query.usage.v1"
	// RetrieverQuery is the core NATS request/reply subject of vector store
	// searches, answered by the retriever service.
	RetrieverQuery = "aiforge.query.retriever.v1"
	// BudgetAll matches every budget alert.
	BudgetAll = "aiforge.budget.>"
	// DeadLetterT receives messages a consumer gave up on: stream, durable.
	DeadLetterT = "aiforge.deadletter.%s.%s"
	// DeadLetterAll matches every dead letter.
	DeadLetterAll = "aiforge.deadletter.>"
)

// Streams, one per domain.
const (
	StreamUsage      = "USAGE"
	StreamDeadLetter = "DEADLETTER"
	StreamBudget     = "BUDGET"
)

// KV buckets holding shared state. Every edge replica watches them.
const (
	BucketTenants = "aiforge_tenants"
	BucketKeys    = "aiforge_keys"
	BucketModels  = "aiforge_models"
	// BucketPrices holds each model's price history; prices outlive the
	// model binding so an audit can always recompute past costs.
	BucketPrices = "aiforge_prices"
	// BucketBudgets holds spend and reservations per key or tenant and
	// budget period (pkg/spend).
	BucketBudgets = "aiforge_budgets"
	// BucketRateLimits holds request and token counts per key and minute.
	BucketRateLimits = "aiforge_ratelimits"
	// BucketFiles, BucketVectorStores and BucketVectorStoreFiles hold the
	// Files and Vector stores APIs' records, keyed by tenant first.
	BucketFiles            = "aiforge_files"
	BucketVectorStores     = "aiforge_vector_stores"
	BucketVectorStoreFiles = "aiforge_vector_store_files"
)

// InferQueue is the queue group shared by the workers of one model.
func InferQueue(model string) string { return "worker." + Token(model) }

// Infer returns the request subject of a model.
func Infer(model string) string { return fmt.Sprintf(InferT, Token(model)) }

// Token turns an arbitrary name into one subject token. Characters NATS
// gives meaning to (".", "*", ">", whitespace), control characters and "%"
// itself are percent-encoded, so distinct names map to distinct tokens and a
// model called "meta-llama/Llama-3.1-8B" stays readable in subject lists.
// The empty name becomes a lone "%", which no encoding of a non-empty name
// produces (every "%" it writes is followed by two hex digits).
func Token(name string) string {
	if name == "" {
		return "%"
	}
	clean := true
	for i := 0; i < len(name); i++ {
		if needsEscape(name[i]) {
			clean = false
			break
		}
	}
	if clean {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if needsEscape(c) {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEscape(c byte) bool {
	switch c {
	case '.', '*', '>', '%', ' ', '\t', '\r', '\n':
		return true
	}
	return c < 0x20 || c == 0x7f
}
