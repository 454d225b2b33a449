package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamOptions tune stream definitions per deployment: replicas are 1 on a
// laptop and 3 on a cluster.
type StreamOptions struct {
	Replicas int
	// UsageMaxAge bounds how long raw usage events are kept; 0 keeps them
	// forever (the audit replays them).
	UsageMaxAge time.Duration
	// DuplicateWindow is how long JetStream remembers Nats-Msg-Id values.
	DuplicateWindow time.Duration
}

// Streams returns every stream definition of the bus contract.
func Streams(o StreamOptions) []jetstream.StreamConfig {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = 10 * time.Minute
	}
	return []jetstream.StreamConfig{
		{
			Name:        StreamUsage,
			Description: "every token spent: the record the usage ledgers fold and the audit replays",
			Subjects:    []string{UsageAll},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			MaxAge:      o.UsageMaxAge,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
			DenyDelete:  true,
			DenyPurge:   true,
		},
		{
			Name:        StreamDocs,
			Description: "the document flow: ingest requested, chunked, embedded, indexed, failed, removed",
			Subjects:    []string{DocsAll},
			Storage:     jetstream.FileStorage,
			MaxAge:      30 * 24 * time.Hour,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
		},
		{
			Name:        StreamModels,
			Description: "the model flow: uploads and hub pulls, the guardian's verdicts",
			Subjects:    []string{ModelsAll},
			Storage:     jetstream.FileStorage,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
		},
		{
			Name:        StreamBudget,
			Description: "budget alerts: a soft budget crossed, once per period",
			Subjects:    []string{BudgetAll},
			Storage:     jetstream.FileStorage,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
		},
		{
			Name:        StreamBatch,
			Description: "the batch flow: request lines, their results, final statuses",
			Subjects:    []string{BatchAll},
			Storage:     jetstream.FileStorage,
			MaxAge:      30 * 24 * time.Hour,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
		},
		{
			Name:        StreamAdmission,
			Description: "admission verdicts: action, category, score, never prompt text",
			Subjects:    []string{AdmissionAll},
			Storage:     jetstream.FileStorage,
			MaxAge:      30 * 24 * time.Hour,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
		},
		{
			Name:        StreamDeadLetter,
			Description: "messages a consumer gave up on after its delivery limit",
			Subjects:    []string{DeadLetterAll},
			Storage:     jetstream.FileStorage,
			MaxAge:      30 * 24 * time.Hour,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
		},
	}
}

// Buckets returns the KV buckets of the bus contract.
func Buckets(o StreamOptions) []jetstream.KeyValueConfig {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	mk := func(name, desc string) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{Bucket: name, Description: desc, History: 5, Storage: jetstream.FileStorage, Replicas: o.Replicas}
	}
	return []jetstream.KeyValueConfig{
		mk(BucketTenants, "tenants by id"),
		mk(BucketKeys, "API keys by id: hashes only, never secrets"),
		mk(BucketModels, "served models by name: engine bindings"),
		mk(BucketPrices, "price history per model, never deleted"),
		mk(BucketFiles, "files per tenant: metadata of uploaded files"),
		mk(BucketVectorStores, "vector stores per tenant"),
		mk(BucketVectorStoreFiles, "files of vector stores with their processing status"),
		mk(BucketCatalog, "the model catalog: versions, files, verdicts, licences"),
		mk(BucketDeployments, "the catalog version each served model runs, with its history"),
		mk(BucketBatches, "Batch API batches per tenant: status, counts, files; idempotency keys"),
		mk(BucketBatchQueues, "batch scheduler configuration: worker classes, pools, cohorts, tenant queues"),
		mk(BucketContainers, "agent code containers per tenant: status, expiry, files, the replica running each"),
		mk(BucketRouters, "routers: route classes with their examples and the model or tool of each"),
		{Bucket: BucketSemanticCache, Description: "cached answers per tenant and model, each with its own TTL", History: 1, Storage: jetstream.FileStorage, Replicas: o.Replicas, TTL: 7 * 24 * time.Hour, LimitMarkerTTL: time.Minute},
		mk(BucketUploads, "model upload sessions in progress: expected files and parts received"),
		{Bucket: BucketPulls, Description: "hub pulls: their commit, catalog version or failure, kept a week", History: 1, Storage: jetstream.FileStorage, Replicas: o.Replicas, TTL: 7 * 24 * time.Hour},
		{Bucket: BucketBudgets, Description: "spend and reservations per key or tenant and period", History: 1, Storage: jetstream.FileStorage, Replicas: o.Replicas},
		{Bucket: BucketWorkers, Description: "worker replicas: engine health, verified upstream, slots, last error", History: 1, Storage: jetstream.MemoryStorage, Replicas: o.Replicas, TTL: WorkerStateTTL, LimitMarkerTTL: WorkerStateTTL},
		{Bucket: BucketRateLimits, Description: "requests and tokens per key and minute", History: 1, Storage: jetstream.FileStorage, Replicas: o.Replicas, TTL: 3 * time.Minute},
	}
}

// Ensure creates or updates every stream and bucket. It is idempotent and is
// called by every service at start, so start order does not matter.
//
// Under least privilege (pkg/busauth) only the admin identity may create or
// change streams and buckets; a service identity may only read their
// configuration, so for a service Ensure is a check that passes when the
// bus was provisioned with the same StreamOptions (`aiforge nats
// provision`, or `aiforge run nats` and `aiforge up`, which provision as
// admin at start) and fails, naming the stream, when it was not.
func Ensure(ctx context.Context, js jetstream.JetStream, o StreamOptions) error {
	var errs []error
	for _, sc := range Streams(o) {
		// Update only what differs: every service calls Ensure at start, and
		// a needless stream update racing a consumer being created is both
		// wasted work and a path nats-server does not serialise.
		if cur, err := js.Stream(ctx, sc.Name); err == nil && sameStream(cur.CachedInfo().Config, sc) {
			continue
		}
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", sc.Name, err))
		}
	}
	for _, kc := range Buckets(o) {
		if _, err := js.KeyValue(ctx, kc.Bucket); err == nil {
			continue // buckets never change shape after creation
		}
		if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
			errs = append(errs, fmt.Errorf("bucket %s: %w", kc.Bucket, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			// A refused JetStream API request is never answered.
			return fmt.Errorf("events: ensure streams (missing or different, and this NATS identity may not be allowed to create or change them: provision as admin with `aiforge nats provision`, with the same stream options): %w", err)
		}
		return fmt.Errorf("events: ensure streams: %w", err)
	}
	return nil
}

// sameStream reports whether the settings Streams declares are already in
// force.
func sameStream(cur, want jetstream.StreamConfig) bool {
	return slices.Equal(cur.Subjects, want.Subjects) && cur.MaxAge == want.MaxAge && cur.Duplicates == want.Duplicates &&
		cur.Replicas == want.Replicas && cur.DenyDelete == want.DenyDelete && cur.DenyPurge == want.DenyPurge &&
		cur.Description == want.Description && cur.Retention == want.Retention && cur.Storage == want.Storage
}
