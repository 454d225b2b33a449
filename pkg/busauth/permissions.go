// Package busauth is who may do what on the bus: one identity per service,
// each with the publish and subscribe allow-lists its code needs and nothing
// more, and an admin identity for operators and provisioning.
//
// The table is derived from what each service does (events.Publish, its
// durable consumers, the KV buckets and object stores it opens, the core
// request/reply subjects it serves or calls). NATS enforces it, so a
// property such as "an inference request comes from the edge" holds on the
// bus itself: no identity but the edge (and admin) can publish on
// aiforge.infer.v1.>, and a stolen worker credential cannot write a key.
// The embedder and the retriever call embedding models on their own
// subject family, aiforge.embed.v1.>, where workers serve embeddings only.
//
// Streams and buckets are created by the admin identity (provisioning:
// `aiforge run nats` and the all-in-one process do it at start, `aiforge
// nats provision` against an external server). Services may read the
// configuration of every stream of the contract (events.Ensure checks it)
// but create nothing, except the usage service, which creates its own
// object store.
package busauth

import (
	"slices"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
)

// Identity names. A service's identity is its module name, except that
// "workers" (the supervisor) and "worker" (one sidecar) share Worker.
const (
	Admin     = "admin"
	Edge      = "edge"
	Worker    = "worker"
	Usage     = "usage"
	Ingest    = "ingest"
	Embedder  = "embedder"
	Retriever = "retriever"
	Guardian  = "guardian"
	Batch     = "batch"
	Sandbox   = "sandbox"
)

// Services lists every service identity, in a stable order.
var Services = []string{Batch, Edge, Embedder, Guardian, Ingest, Retriever, Sandbox, Usage, Worker}

// Identities are the services and admin.
func Identities() []string { return append(slices.Clone(Services), Admin) }

// ServiceOf is the identity a module of internal/app runs as ("" for
// modules that are not services).
func ServiceOf(module string) string {
	switch module {
	case "workers", "worker":
		return Worker
	case Edge, Usage, Ingest, Embedder, Retriever, Guardian, Batch, Sandbox:
		return module
	}
	return ""
}

// InboxPrefix is the inbox prefix of an identity's connection
// (nats.CustomInboxPrefix): replies to its requests, JetStream API answers
// and KV watch deliveries come there, and only it may subscribe to it.
func InboxPrefix(identity string) string { return "_INBOX_" + identity }

// Permissions are one identity's allow-lists. Responses, when set, lets it
// answer requests it received (publish to their reply subjects) without
// listing the requesters' inboxes.
type Permissions struct {
	Publish   []string
	Subscribe []string
	Responses *Responses
}

// Responses bound the answers to one request: MaxMsgs messages (-1: no
// limit, for streamed answers) within Expires.
type Responses struct {
	MaxMsgs int
	Expires time.Duration
}

// LedgerStore is the usage service's object store (its ledger snapshot).
const LedgerStore = "aiforge_ledgers"

// For returns the permissions of an identity.
func For(identity string) (Permissions, bool) {
	p, ok := table()[identity]
	return p, ok
}

// grant accumulates allow-lists.
type grant struct{ pub, sub []string }

func (g *grant) p(s ...string) *grant { g.pub = append(g.pub, s...); return g }
func (g *grant) s(s ...string) *grant { g.sub = append(g.sub, s...); return g }

const api = "$JS.API."

// streamInfo lets an identity read the configuration and state of every
// stream and bucket of the contract (no messages): events.Ensure, run by
// every process at start, checks them.
func (g *grant) streamInfo() *grant {
	for _, sc := range events.Streams(events.StreamOptions{}) {
		g.p(api + "STREAM.INFO." + sc.Name)
	}
	for _, kc := range events.Buckets(events.StreamOptions{}) {
		g.p(api + "STREAM.INFO.KV_" + kc.Bucket)
	}
	return g
}

// ordered lets an identity read a stream through ordered (ephemeral)
// consumers: KV watches, replays. Their names are random, so the grant is
// per stream.
func (g *grant) ordered(stream string) *grant {
	return g.p(api+"CONSUMER.CREATE."+stream, api+"CONSUMER.CREATE."+stream+".>",
		api+"CONSUMER.INFO."+stream+".>", api+"CONSUMER.DELETE."+stream+".>",
		api+"CONSUMER.MSG.NEXT."+stream+".>", "$JS.FC."+stream+".>",
		api+"STREAM.INFO."+stream)
}

// kvRead lets an identity get and watch a bucket.
func (g *grant) kvRead(buckets ...string) *grant {
	for _, b := range buckets {
		st := "KV_" + b
		g.ordered(st).p(api+"DIRECT.GET."+st, api+"DIRECT.GET."+st+".>", api+"STREAM.MSG.GET."+st)
	}
	return g
}

// kvWrite lets an identity read and write (put, create, update, delete,
// purge a key of) a bucket.
func (g *grant) kvWrite(buckets ...string) *grant {
	for _, b := range buckets {
		g.kvRead(b).p("$KV." + b + ".>")
	}
	return g
}

// durable lets an identity run the durable consumer name of stream: create
// and update it, pull, acknowledge, and copy what it gives up on to its
// dead-letter subject.
func (g *grant) durable(stream, name string) *grant {
	return g.p(api+"CONSUMER.CREATE."+stream+"."+name, api+"CONSUMER.CREATE."+stream+"."+name+".>",
		api+"CONSUMER.INFO."+stream+"."+name, api+"CONSUMER.MSG.NEXT."+stream+"."+name,
		"$JS.ACK."+stream+"."+name+".>", events.DeadLetter(stream, name))
}

// objectStore lets an identity create and use its own object store.
func (g *grant) objectStore(name string) *grant {
	st := "OBJ_" + name
	return g.ordered(st).p(api+"STREAM.CREATE."+st, api+"STREAM.UPDATE."+st, api+"STREAM.PURGE."+st,
		api+"DIRECT.GET."+st, api+"DIRECT.GET."+st+".>", api+"STREAM.MSG.GET."+st, "$O."+name+".>")
}

// inbox lets an identity receive on its own inbox prefix only.
func (g *grant) inbox(identity string) *grant { return g.s(InboxPrefix(identity) + ".>") }

// bridgeReplies is every bridge reply subject of an identity's clients.
func bridgeReplies(identity string) string {
	return events.BridgeReplies(InboxPrefix(identity)) + ".>"
}

// Event subjects, one per event type and every key.
func ev(typ string) string { return typ + ".*" }

// inferAll is every inference subject: requests, direct, ping.
const inferAll = "aiforge.infer.v1.>"

// embedAll is every internal embedding subject: requests, direct, ping.
const embedAll = "aiforge.embed.v1.>"

// rerankAll is every internal rerank subject: requests, direct, ping.
const rerankAll = "aiforge.rerank.v1.>"

// batchInferAll is every batch-line subject: requests, direct, ping.
const batchInferAll = "aiforge.infer.batch.v1.>"

// inferCtlAll is every worker's control subject.
const inferCtlAll = "aiforge.infer.ctl.v1.*"

func table() map[string]Permissions {
	t := map[string]Permissions{}
	put := func(name string, g *grant, r *Responses) {
		t[name] = Permissions{Publish: dedupe(g.pub), Subscribe: dedupe(g.sub), Responses: r}
	}
	registryBuckets := []string{events.BucketTenants, events.BucketKeys, events.BucketModels, events.BucketPrices}
	catalogBuckets := []string{events.BucketCatalog, events.BucketDeployments, events.BucketPulls}

	// The edge is the API: the only client that publishes inference
	// (the embedder and retriever embed on their own family, where
	// workers answer embeddings only), the caller of rerank models for
	// the rerank stage of searches (on the rerank family), the writer of the registry and
	// catalog, the caller of the usage and retriever queries.
	edge := (&grant{}).inbox(Edge).streamInfo().
		p(inferAll, rerankAll, inferCtlAll, events.UsageQuery, events.RetrieverQuery, events.BatchQuery, events.SandboxAll).
		p(ev(events.TypeUsageRecordedV2), ev(events.TypeUsageRecordedV4), ev(events.TypeUsageCorrectedV1)).
		p(ev(events.TypeAdmissionVerdictV1)).
		p(ev(events.TypeDocIngestRequestedV1), ev(events.TypeDocRemovedV1)).
		p(ev(events.TypeModelUploadedV1), ev(events.TypeModelPullRequestedV1)).
		kvWrite(registryBuckets...).kvWrite(catalogBuckets...).
		kvWrite(events.BucketUploads, events.BucketBudgets, events.BucketRateLimits, events.BucketFiles,
			events.BucketVectorStores, events.BucketVectorStoreFiles).
		kvWrite(events.BucketBatches, events.BucketBatchQueues).
		kvWrite(events.BucketRouters, events.BucketSemanticCache).
		kvWrite(events.BucketTenantBuckets).kvRead(events.BucketTenantBucketFolders).
		p(events.ModelBucketNotifyAll).
		kvWrite(events.BucketResponses, events.BucketPrompts).
		durable(events.StreamDocs, "edge-docs-status").durable(events.StreamDeadLetter, "edge-docs-dead").
		ordered(events.StreamUsage).
		kvRead(events.BucketWorkers, events.BucketContainers).
		// The console reads the newest dead letters by sequence, with
		// no consumer.
		p(api + "STREAM.MSG.GET." + events.StreamDeadLetter).
		// Sealing a binding stored before engine keys were sealed purges
		// the binding's older revisions, which hold the key in clear
		// (registry.SealLegacyEngineKeys). The edge may already delete any
		// binding, so purging that bucket's history grants nothing more.
		p(api + "STREAM.PURGE.KV_" + events.BucketModels)
	put(Edge, edge, nil)

	// Workers answer inference and internal embedding and rerank calls (every frame
	// goes to the request's reply subject, under the caller's
	// events.BridgeReplies: a grant, so that the server tracks no reply
	// subject per streamed request; pings are answered once, hence
	// Responses of one message), take credits and
	// cancels on their control subject, publish usage, and read the model
	// bindings and the catalog. The only bucket they write is their own
	// state (registry.WorkerState).
	worker := (&grant{}).inbox(Worker).streamInfo().
		s(inferAll, embedAll, rerankAll, batchInferAll, inferCtlAll).
		p(bridgeReplies(Edge), bridgeReplies(Embedder), bridgeReplies(Retriever), bridgeReplies(Batch)).
		p(ev(events.TypeUsageRecordedV2), ev(events.TypeUsageRecordedV3), ev(events.TypeUsageRecordedV4), ev(events.TypeUsageRecordedV5)).
		kvRead(events.BucketModels, events.BucketCatalog, events.BucketDeployments).
		kvWrite(events.BucketWorkers)
	put(Worker, worker, &Responses{MaxMsgs: 1, Expires: 2 * time.Minute})

	// The usage service folds USAGE, settles budgets, answers usage
	// queries, raises budget alerts and keeps its ledger snapshot.
	// Its fold reads USAGE through an ordered consumer, whose messages carry
	// a $JS.ACK reply subject: the grant to publish there (acks an
	// ordered consumer ignores; USAGE has no durable to spoof) keeps the
	// server from tracking each delivered event as an allowed response for
	// two minutes, which it would under Responses.
	usage := (&grant{}).inbox(Usage).streamInfo().
		s(events.UsageQuery).
		p(ev(events.TypeBudgetAlertV1)).
		ordered(events.StreamUsage).p("$JS.ACK."+events.StreamUsage+".>").
		kvWrite(events.BucketBudgets).
		kvRead(registryBuckets...).kvRead(events.BucketCatalog, events.BucketDeployments).
		objectStore(LedgerStore)
	put(Usage, usage, &Responses{MaxMsgs: 1, Expires: 2 * time.Minute})

	ingest := (&grant{}).inbox(Ingest).streamInfo().
		p(ev(events.TypeDocChunkedV1), ev(events.TypeDocFailedV1)).
		durable(events.StreamDocs, "ingest")
	put(Ingest, ingest, nil)

	// The embedder calls embedding models for document chunks, on the
	// embedding family only: never aiforge.infer.v1.>.
	embedder := (&grant{}).inbox(Embedder).streamInfo().
		p(embedAll, inferCtlAll).
		p(ev(events.TypeDocEmbeddedV1), ev(events.TypeDocFailedV1)).
		durable(events.StreamDocs, "embedder")
	put(Embedder, embedder, nil)

	// The retriever indexes embedded chunks, answers searches (embedding
	// the query through a worker, on the embedding family) and records
	// each file's status.
	retriever := (&grant{}).inbox(Retriever).streamInfo().
		s(events.RetrieverQuery).
		p(embedAll, inferCtlAll).
		p(ev(events.TypeDocIndexedV1), ev(events.TypeDocFailedV1)).
		durable(events.StreamDocs, "retriever").
		kvWrite(events.BucketVectorStoreFiles)
	put(Retriever, retriever, &Responses{MaxMsgs: 1, Expires: 2 * time.Minute})

	// The guardian scans uploads, mirrors hub pulls and writes verdicts
	// into the catalog.
	guardian := (&grant{}).inbox(Guardian).streamInfo().
		p(ev(events.TypeModelUploadedV1), ev(events.TypeModelVerdictV2)).
		durable(events.StreamModels, "guardian-scan").durable(events.StreamModels, "guardian-mirror").
		kvWrite(catalogBuckets...).
		// The tenants' model buckets: their configurations (read and
		// watched) and its record of each folder imported.
		kvRead(events.BucketTenantBuckets).kvWrite(events.BucketTenantBucketFolders).
		s(events.ModelBucketNotifyAll)
	put(Guardian, guardian, nil)

	// The batch service validates batches, enqueues their lines on the
	// BATCH stream, dispatches them to workers on the batch family only
	// (never aiforge.infer.v1.>), writes results and the output and error
	// files (records in the files bucket), updates the batch records and
	// answers scheduler queries. Its line consumers are one durable per
	// batch ("batch-lines-<id>", created, pulled, acknowledged, listed at
	// start to find those a stopped service left, deleted with the batch's
	// lines and results, which it purges), so its consumer grant covers
	// the BATCH stream, which only it reads; "batch-webhooks" delivers the
	// final statuses and dead-letters what its tenants' endpoints refuse.
	batch := (&grant{}).inbox(Batch).streamInfo().
		s(events.BatchQuery).
		p(batchInferAll, inferCtlAll).
		p(ev(events.TypeBatchLineV1), ev(events.TypeBatchResultV1), ev(events.TypeBatchFinishedV1)).
		ordered(events.StreamBatch).
		p(api+"CONSUMER.MSG.NEXT."+events.StreamBatch+".>", "$JS.ACK."+events.StreamBatch+".>",
			api+"STREAM.PURGE."+events.StreamBatch, api+"CONSUMER.LIST."+events.StreamBatch,
			events.DeadLetter(events.StreamBatch, "batch-webhooks")).
		kvWrite(events.BucketBatches, events.BucketFiles).
		kvRead(events.BucketBatchQueues, events.BucketWorkers, events.BucketModels, events.BucketTenants)
	put(Batch, batch, &Responses{MaxMsgs: 1, Expires: 2 * time.Minute})

	// The sandbox service runs agent code containers: it answers the
	// edge's container calls (aiforge.sandbox.v1.>; a streamed exec's
	// chunks go under the edge's events.SandboxReplies, a grant for the
	// same reason as the bridge's), keeps its containers' records, reads
	// the tenants' file records (file_ids copied into a container; their
	// content comes from the object store) and publishes what each exec
	// used.
	sandbox := (&grant{}).inbox(Sandbox).streamInfo().
		s(events.SandboxAll).
		p(events.SandboxReplies(InboxPrefix(Edge)) + ".>").
		p(ev(events.TypeSandboxUsageV1)).
		kvWrite(events.BucketContainers).
		kvRead(events.BucketFiles)
	put(Sandbox, sandbox, &Responses{MaxMsgs: 1, Expires: 2 * time.Minute})

	// Admin is for operators and provisioning: everything.
	put(Admin, (&grant{}).p(">").s(">"), nil)
	return t
}

func dedupe(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
