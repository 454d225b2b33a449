package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
		{Bucket: BucketResponses, Description: "stored responses per tenant: the response, its input items, the conversation before it; a TTL per key", History: 1, Storage: jetstream.FileStorage, Replicas: o.Replicas, LimitMarkerTTL: time.Minute},
		mk(BucketPrompts, "prompt templates per tenant: versions and labels (production, staging, A/B weights)"),
		mk(BucketUploads, "model upload sessions in progress: expected files and parts received"),
		mk(BucketTenantBuckets, "tenant model buckets: the S3 prefix the guardian watches, credentials sealed"),
		mk(BucketTenantBucketFolders, "folders of tenant model buckets: the manifest ETag imported or rejected, the catalog version"),
		{Bucket: BucketPulls, Description: "hub pulls: their commit, catalog version or failure, kept a week", History: 1, Storage: jetstream.FileStorage, Replicas: o.Replicas, TTL: 7 * 24 * time.Hour},
		{Bucket: BucketBudgets, Description: "spend and reservations per key or tenant and period", History: 1, Storage: jetstream.FileStorage, Replicas: o.Replicas},
		{Bucket: BucketWorkers, Description: "worker replicas: engine health, verified upstream, slots, last error", History: 1, Storage: jetstream.MemoryStorage, Replicas: o.Replicas, TTL: WorkerStateTTL, LimitMarkerTTL: WorkerStateTTL},
		{Bucket: BucketRateLimits, Description: "requests and tokens per key and minute", History: 1, Storage: jetstream.FileStorage, Replicas: o.Replicas, TTL: 3 * time.Minute},
	}
}

// Ensure creates or updates every stream and bucket. It is idempotent and is
// called by every service at start, so start order does not matter.
//
// Streams are brought to the settings Streams declares. A bucket that
// exists keeps its settings except its replicas, and with them how it is
// read (directGets), which Ensure brings to o.Replicas (up or down: nats-server moves a stream between R1 and R3
// keeping its messages), so an R1 bus provisioned before a cluster became
// R3 is fixed by provisioning again. Nothing that already matches is
// updated.
//
// Under least privilege (pkg/busauth) only the admin identity may create or
// change streams and buckets; a service identity may only read their
// configuration, so for a service Ensure is a check that passes when the
// bus was provisioned with the same StreamOptions (`aiforge nats
// provision`, or `aiforge run nats` and `aiforge up`, which provision as
// admin at start) and fails, naming each stream and bucket that differs
// and how, when it was not.
func Ensure(ctx context.Context, js jetstream.JetStream, o StreamOptions) error {
	changes := plan(ctx, js, o)
	var errs []error
	refused := false
	for _, c := range changes {
		if refused {
			errs = append(errs, fmt.Errorf("%s (%s): not changed", c.what, c.diff))
			continue
		}
		if err := c.apply(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", c.what, c.diff, err))
			// A refused JetStream API request is never answered: it ends
			// the context, and every later request would wait for nothing.
			refused = errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
		}
	}
	if err := errors.Join(errs...); err != nil {
		if refused {
			return fmt.Errorf("events: ensure streams (missing or different, and this NATS identity may not be allowed to create or change them: provision as admin with `aiforge nats provision`, with the same stream options): %w", err)
		}
		return fmt.Errorf("events: ensure streams: %w", err)
	}
	return nil
}

// change is one stream or bucket that differs from its declaration.
type change struct {
	what, diff string
	apply      func(context.Context) error
}

// plan reads every stream and bucket (stream info only, which every
// identity may read) and returns what differs from the declaration.
func plan(ctx context.Context, js jetstream.JetStream, o StreamOptions) []change {
	var out []change
	for _, sc := range Streams(o) {
		// Update only what differs: every service calls Ensure at start, and
		// a needless stream update racing a consumer being created is both
		// wasted work and a path nats-server does not serialise.
		diff := "missing"
		if cur, err := js.Stream(ctx, sc.Name); err == nil {
			if sameStream(cur.CachedInfo().Config, sc) {
				continue
			}
			diff = streamDiff(cur.CachedInfo().Config, sc)
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			diff = "unreadable: " + err.Error()
		}
		out = append(out, change{what: "stream " + sc.Name, diff: diff, apply: func(ctx context.Context) error {
			_, err := js.CreateOrUpdateStream(ctx, sc)
			return err
		}})
	}
	for _, kc := range Buckets(o) {
		direct := directGets(kc.Replicas)
		create := func(ctx context.Context) error {
			kv, err := js.CreateOrUpdateKeyValue(ctx, kc)
			if err != nil || direct {
				return err
			}
			// nats.go creates every bucket with direct gets; a replicated
			// one is then made to read from its leader.
			st, err := js.Stream(ctx, "KV_"+kv.Bucket())
			if err != nil {
				return err
			}
			cfg := st.CachedInfo().Config
			cfg.AllowDirect = false
			_, err = js.UpdateStream(ctx, cfg)
			return err
		}
		cur, err := js.Stream(ctx, "KV_"+kc.Bucket)
		switch {
		case err == nil && cur.CachedInfo().Config.Replicas == kc.Replicas && cur.CachedInfo().Config.AllowDirect == direct:
			// Buckets keep the shape they were created with; only their
			// replicas, and with them how they are read, follow the
			// deployment.
		case err == nil:
			cfg := cur.CachedInfo().Config
			var diff []string
			if cfg.Replicas != kc.Replicas {
				diff = append(diff, fmt.Sprintf("replicas %d, declared %d", cfg.Replicas, kc.Replicas))
			}
			if cfg.AllowDirect != direct {
				diff = append(diff, fmt.Sprintf("direct gets %t, declared %t", cfg.AllowDirect, direct))
			}
			cfg.Replicas, cfg.AllowDirect = kc.Replicas, direct
			out = append(out, change{what: "bucket " + kc.Bucket, diff: strings.Join(diff, ", "), apply: func(ctx context.Context) error {
				_, err := js.UpdateStream(ctx, cfg)
				return err
			}})
		case errors.Is(err, jetstream.ErrStreamNotFound):
			out = append(out, change{what: "bucket " + kc.Bucket, diff: "missing", apply: create})
		default:
			out = append(out, change{what: "bucket " + kc.Bucket, diff: "unreadable: " + err.Error(), apply: create})
		}
	}
	return out
}

// directGets reports whether a bucket of this many replicas is read with
// direct gets. A direct get is answered by any replica that is nearly caught
// up (nats-server enables it on a follower at 90% synchronised), not by the
// leader, so on a replicated bucket it can miss a write that was already
// acknowledged (TestReplicatedBucketReadsItsWrites: a file recorded through
// one node was not found through another). A replicated bucket is
// therefore read through its leader (STREAM.MSG.GET), which has applied
// every acknowledged write; a bucket of one replica has only the leader.
func directGets(replicas int) bool { return replicas <= 1 }

// sameStream reports whether the settings Streams declares are already in
// force.
func sameStream(cur, want jetstream.StreamConfig) bool {
	return streamDiff(cur, want) == ""
}

// streamDiff names the declared settings cur does not have, "" when none.
func streamDiff(cur, want jetstream.StreamConfig) string {
	var d []string
	if cur.Replicas != want.Replicas {
		d = append(d, fmt.Sprintf("replicas %d, declared %d", cur.Replicas, want.Replicas))
	}
	if cur.MaxAge != want.MaxAge {
		d = append(d, fmt.Sprintf("max age %s, declared %s", cur.MaxAge, want.MaxAge))
	}
	if cur.Duplicates != want.Duplicates {
		d = append(d, fmt.Sprintf("duplicate window %s, declared %s", cur.Duplicates, want.Duplicates))
	}
	for _, f := range []struct {
		name string
		same bool
	}{
		{"subject list", slices.Equal(cur.Subjects, want.Subjects)},
		{"deny delete", cur.DenyDelete == want.DenyDelete},
		{"deny purge", cur.DenyPurge == want.DenyPurge},
		{"description", cur.Description == want.Description},
		{"retention", cur.Retention == want.Retention},
		{"storage", cur.Storage == want.Storage},
	} {
		if !f.same {
			d = append(d, f.name+" differs")
		}
	}
	return strings.Join(d, "; ")
}
