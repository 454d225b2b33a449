// Package events is the bus contract of aiforge, defined once: subject names,
// streams, KV buckets, the CloudEvents-style envelope and the versioned event
// types every service publishes or consumes.
//
// Every subject, stream and bucket is named in this file. Subjects follow one
// scheme: aiforge.<domain>.<event>.v<N>[.<token>]. A durable event's type
// name is the first four levels ("aiforge.usage.recorded.v2"), and the event
// is published on its type name plus one token, the tenant or model it
// concerns (Subject). Each event type computes that subject from its own
// fields (Event.Subject), and Publish takes no other, so an event cannot go
// out on another event's subject. Consumers filter with the named wildcards
// below: the ...All constants match every version of an event (a consumer
// keeps reading v1 after v2 ships, and learns v2 from its registry), and
// UsageOfTenant and DeadLetterOf narrow to one tenant or one stream.
//
// Parameters go through Token so that user-chosen names (models, tenants)
// can never add or remove subject levels.
package events

import (
	"fmt"
	"strings"
	"time"
)

// Event type names, by domain. The type name of an event is the root of its
// subject: Subject(type, key).
const (
	// TypeUsageRecordedV1 is UsageRecordedV1, keyed by tenant.
	TypeUsageRecordedV1 = "aiforge.usage.recorded.v1"
	// TypeUsageRecordedV2 is UsageRecordedV2, keyed by tenant. Before v2
	// had its own subject, v2 events were published on v1's; the USAGE
	// stream still holds those, and readers tell them by ce-type.
	TypeUsageRecordedV2 = "aiforge.usage.recorded.v2"
	// TypeUsageRecordedV3 is UsageRecordedV3, keyed by tenant: a batch
	// line's usage.
	TypeUsageRecordedV3 = "aiforge.usage.recorded.v3"
	// TypeUsageCorrectedV1 is UsageCorrectedV1, keyed by tenant.
	TypeUsageCorrectedV1 = "aiforge.usage.corrected.v1"
	// TypeBudgetAlertV1 is BudgetAlertV1, keyed by tenant.
	TypeBudgetAlertV1 = "aiforge.budget.alert.v1"

	// TypeDocIngestRequestedV1 is DocIngestRequestedV1, keyed by tenant.
	TypeDocIngestRequestedV1 = "aiforge.docs.ingest.requested.v1"
	// TypeDocChunkedV1 is DocChunkedV1, keyed by tenant.
	TypeDocChunkedV1 = "aiforge.docs.chunked.v1"
	// TypeDocEmbeddedV1 is DocEmbeddedV1, keyed by tenant.
	TypeDocEmbeddedV1 = "aiforge.docs.embedded.v1"
	// TypeDocIndexedV1 is DocIndexedV1, keyed by tenant.
	TypeDocIndexedV1 = "aiforge.docs.indexed.v1"
	// TypeDocFailedV1 is DocFailedV1, keyed by tenant.
	TypeDocFailedV1 = "aiforge.docs.failed.v1"
	// TypeDocRemovedV1 is DocRemovedV1, keyed by tenant.
	TypeDocRemovedV1 = "aiforge.docs.removed.v1"

	// TypeModelUploadedV1 is ModelUploadedV1, keyed by model name.
	TypeModelUploadedV1 = "aiforge.models.uploaded.v1"
	// TypeModelVerdictV1 is ModelVerdictV1, keyed by model name.
	TypeModelVerdictV1 = "aiforge.models.verdict.v1"
	// TypeModelVerdictV2 is ModelVerdictV2, keyed by model name.
	TypeModelVerdictV2 = "aiforge.models.verdict.v2"
	// TypeModelPullRequestedV1 is ModelPullRequestedV1, keyed by model
	// name. It never carries a hub token.
	TypeModelPullRequestedV1 = "aiforge.models.pull.requested.v1"

	// TypeUsageRecordedV4 is UsageRecordedV4, keyed by tenant: a request
	// with an admission verdict, a route class or a cache hit.
	TypeUsageRecordedV4 = "aiforge.usage.recorded.v4"
	// TypeUsageRecordedV5 is UsageRecordedV5, keyed by tenant: a request
	// made from a stored prompt template (the prompt and version used).
	TypeUsageRecordedV5 = "aiforge.usage.recorded.v5"

	// TypeSandboxUsageV1 is SandboxUsageV1, keyed by tenant: the seconds
	// and memory one sandbox exec used.
	TypeSandboxUsageV1 = "aiforge.usage.sandbox.v1"

	// TypeAdmissionVerdictV1 is AdmissionVerdictV1, keyed by tenant.
	TypeAdmissionVerdictV1 = "aiforge.admission.verdict.v1"

	// TypeBatchLineV1 is BatchLineV1, keyed by batch id: one request line
	// of a validated batch, durable work for the batch dispatcher.
	TypeBatchLineV1 = "aiforge.batch.line.v1"
	// TypeBatchResultV1 is BatchResultV1, keyed by batch id: one line's
	// outcome, read back when the batch's output and error files are
	// written.
	TypeBatchResultV1 = "aiforge.batch.result.v1"
	// TypeBatchFinishedV1 is BatchFinishedV1, keyed by tenant: a batch
	// reached a final status (its webhook is delivered from it).
	TypeBatchFinishedV1 = "aiforge.batch.finished.v1"
)

// Subject returns the subject an event of type typ concerning key (a tenant
// or a model name) is published on: typ.Token(key). Event.Subject is this
// applied to the event's own type and key; call it directly only to read
// one subject back (the last verdict of a model, say).
func Subject(typ, key string) string { return typ + "." + Token(key) }

// Filters of durable events: each matches every version of one event, for
// every key.
const (
	UsageRecordedAll  = "aiforge.usage.recorded.*.*"
	UsageCorrectedAll = "aiforge.usage.corrected.*.*"
	UsageSandboxAll   = "aiforge.usage.sandbox.*.*"
	BudgetAlertAll    = "aiforge.budget.alert.*.*"

	DocsIngestRequestedAll = "aiforge.docs.ingest.requested.*.*"
	DocsChunkedAll         = "aiforge.docs.chunked.*.*"
	DocsEmbeddedAll        = "aiforge.docs.embedded.*.*"
	DocsIndexedAll         = "aiforge.docs.indexed.*.*"
	DocsFailedAll          = "aiforge.docs.failed.*.*"
	DocsRemovedAll         = "aiforge.docs.removed.*.*"

	ModelsUploadedAll      = "aiforge.models.uploaded.*.*"
	ModelsVerdictAll       = "aiforge.models.verdict.*.*"
	ModelsPullRequestedAll = "aiforge.models.pull.requested.*.*"

	AdmissionVerdictAll = "aiforge.admission.verdict.*.*"

	BatchLinesAll    = "aiforge.batch.line.*.*"
	BatchResultsAll  = "aiforge.batch.result.*.*"
	BatchFinishedAll = "aiforge.batch.finished.*.*"
)

// BatchLinesOf matches the request lines of one batch, of every version.
func BatchLinesOf(batch string) string { return "aiforge.batch.line.*." + Token(batch) }

// BatchResultsOf matches the results of one batch, of every version.
func BatchResultsOf(batch string) string { return "aiforge.batch.result.*." + Token(batch) }

// UsageOfTenant matches every usage event of one tenant, of every kind and
// version (aiforge.usage.<event>.v<N>.<tenant>): recorded v1 and v2 and
// corrections.
func UsageOfTenant(tenant string) string { return "aiforge.usage.*.*." + Token(tenant) }

// Streams, one per domain, and the subjects each captures.
const (
	StreamUsage = "USAGE"
	// UsageAll matches every usage event.
	UsageAll = "aiforge.usage.>"

	StreamBudget = "BUDGET"
	// BudgetAll matches every budget alert.
	BudgetAll = "aiforge.budget.>"

	// StreamDocs holds the document flow's events.
	StreamDocs = "DOCS"
	// DocsAll matches every document event.
	DocsAll = "aiforge.docs.>"

	// StreamModels holds the model flow's events.
	StreamModels = "MODELS"
	// ModelsAll matches every model event.
	ModelsAll = "aiforge.models.>"

	// StreamBatch holds the batch flow: request lines, results, final
	// statuses. Lines and results of a batch are purged once its files
	// are written.
	StreamBatch = "BATCH"
	// BatchAll matches every batch event.
	BatchAll = "aiforge.batch.>"

	// StreamAdmission holds admission verdicts (categories and scores,
	// never prompt text).
	StreamAdmission = "ADMISSION"
	// AdmissionAll matches every admission event.
	AdmissionAll = "aiforge.admission.>"

	StreamDeadLetter = "DEADLETTER"
	// DeadLetterAll matches every dead letter.
	DeadLetterAll = "aiforge.deadletter.>"
)

// DeadLetter is where a consumer's durable copies what it gave up on
// (aiforge.deadletter.<stream>.<durable>); ConsumerConfig.Validate keeps
// both names single tokens.
func DeadLetter(stream, durable string) string {
	return "aiforge.deadletter." + stream + "." + durable
}

// DeadLetterOf matches the dead letters of every consumer of one stream.
func DeadLetterOf(stream string) string { return DeadLetter(stream, "*") }

// Core NATS request/reply subjects, outside every stream's subjects.
const (
	// UsageQuery is the subject of usage reports, audits and ledger dumps,
	// answered by the usage service. It lies outside aiforge.usage.> so the
	// USAGE stream never captures a query.
	UsageQuery = "aiforge.query.usage.v1"
	// RetrieverQuery is the subject of vector store searches, answered by
	// the retriever service.
	RetrieverQuery = "aiforge.query.retriever.v1"
	// BatchQuery is the subject of batch scheduler queries (queue shares,
	// borrowed quota, waiting lines), answered by the batch service.
	BatchQuery = "aiforge.query.batch.v1"
)

// Agent code sandboxes over core NATS request/reply (pkg/sandbox). Create
// and list go to any sandbox replica (queue group SandboxQueue); a
// container's calls go to the replica that runs it, which alone subscribes
// to SandboxContainer(id, "*"). Only the edge may publish on
// aiforge.sandbox.v1.>.

// SandboxAll matches every sandbox request.
const SandboxAll = "aiforge.sandbox.v1.>"

// ModelBucketNotify (core NATS, not a stream: a lost one costs a poll
// interval) tells the guardian that an S3 event notification for a
// tenant's model bucket reached the edge, so it lists that bucket now
// instead of at its next poll. The message carries no data.
func ModelBucketNotify(tenant string) string { return "aiforge.notify.modelbucket.v1." + Token(tenant) }

// ModelBucketNotifyAll matches ModelBucketNotify of every tenant.
const ModelBucketNotifyAll = "aiforge.notify.modelbucket.v1.*"

// SandboxQueue is the queue group of sandbox replicas.
const SandboxQueue = "sandbox"

// SandboxRequest is where a create or list goes (op is pkg/sandbox's
// OpCreate or OpList).
func SandboxRequest(op string) string { return "aiforge.sandbox.v1." + Token(op) }

// SandboxContainer is where an operation on one container goes.
func SandboxContainer(id, op string) string {
	return "aiforge.sandbox.v1.c." + Token(id) + "." + Token(op)
}

// SandboxContainerAll matches every operation on one container: what the
// replica running it subscribes to.
func SandboxContainerAll(id string) string { return "aiforge.sandbox.v1.c." + Token(id) + ".*" }

// SandboxReplies is where a streamed exec's chunks go: a namespace under
// the caller's inbox prefix that sandbox replicas may publish to (see
// BridgeReplies for why a grant and not allow_responses).
func SandboxReplies(inboxPrefix string) string { return inboxPrefix + ".sandbox" }

// Real-time inference over core NATS request/reply. Workers of one model
// share Infer(model) through the queue group InferQueue(model); the reply
// subject is under the caller's BridgeReplies.

// BridgeReplies is where a bridge client (the edge, the embedder, the
// retriever) receives a worker's frames: a namespace under the client's
// inbox prefix (nats.CustomInboxPrefix; "_INBOX" without one) that workers
// may publish to. A grant, not allow_responses: the server remembers an
// allowed response subject until it expires, and a streamed answer has no
// message limit, so every request would hold server memory for the whole
// expiry. The last token under it (one per request) is unguessable.
func BridgeReplies(inboxPrefix string) string { return inboxPrefix + ".bridge" }

// Infer is where requests for a model are published.
func Infer(model string) string { return "aiforge.infer.v1." + Token(model) }

// InferQueue is the queue group shared by the workers of one model.
func InferQueue(model string) string { return "worker." + Token(model) }

// InferDirect addresses one worker replica of a model (failover).
func InferDirect(model, worker string) string { return Infer(model) + ".w." + worker }

// InferPing is answered by every worker replica of a model (not a queue
// group) with its id; the edge uses it to find another replica.
func InferPing(model string) string { return Infer(model) + ".ping" }

// Internal embedding calls (the embedder's document chunks, the retriever's
// search queries) have their own family, served by the same workers with
// the same queue group (InferQueue) and the same control subject
// (InferControl), so that the bus can let those services embed without
// letting them publish inference: only the edge may publish on Infer, and
// a worker answers nothing but embeddings on Embed.

// Embed is where internal embedding requests for a model are published.
func Embed(model string) string { return "aiforge.embed.v1." + Token(model) }

// EmbedDirect addresses one worker replica of a model on the embedding
// family (failover).
func EmbedDirect(model, worker string) string { return Embed(model) + ".w." + worker }

// EmbedPing is answered by every worker replica of a model with its id, on
// the embedding family.
func EmbedPing(model string) string { return Embed(model) + ".ping" }

// Internal rerank calls (the edge's rerank stage of vector store search
// and file_search, a retriever that reranks) have a family of their own,
// like embeddings: same queue group (InferQueue) and control subject
// (InferControl), and a worker answers nothing but rerank on it.

// Rerank is where internal rerank requests for a model are published.
func Rerank(model string) string { return "aiforge.rerank.v1." + Token(model) }

// RerankDirect addresses one worker replica of a model on the rerank
// family (failover).
func RerankDirect(model, worker string) string { return Rerank(model) + ".w." + worker }

// RerankPing is answered by every worker replica of a model with its id,
// on the rerank family.
func RerankPing(model string) string { return Rerank(model) + ".ping" }

// Batch lines are served by the same workers as real-time requests, on a
// family of their own so that a worker knows them for what they are (a
// real-time request wins a worker's next free slot over any batch line)
// and the bus can let the batch service publish batch work without letting
// it publish real-time inference. Same queue group (InferQueue) and
// control subject (InferControl).

// BatchInfer is where batch lines for a model are published.
func BatchInfer(model string) string { return "aiforge.infer.batch.v1." + Token(model) }

// BatchInferDirect addresses one worker replica of a model on the batch
// family.
func BatchInferDirect(model, worker string) string { return BatchInfer(model) + ".w." + worker }

// BatchInferPing is answered by every worker replica of a model with its
// id, on the batch family.
func BatchInferPing(model string) string { return BatchInfer(model) + ".ping" }

// InferControl carries cancel and flow-control credits from an edge to the
// worker serving a request.
func InferControl(worker string) string { return "aiforge.infer.ctl.v1." + worker }

// KV buckets holding shared state. Every edge replica watches them.
const (
	BucketTenants = "aiforge_tenants"
	BucketKeys    = "aiforge_keys"
	// BucketContainers holds agent code containers per tenant
	// (pkg/sandbox.Record), written by the sandbox replica running each.
	BucketContainers = "aiforge_containers"
	BucketModels     = "aiforge_models"
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
	// BucketCatalog holds the catalog: model name -> versions.
	BucketCatalog = "aiforge_catalog"
	// BucketDeployments holds which catalog version each served model name
	// runs, with its history (rollback is one call).
	BucketDeployments = "aiforge_deployments"
	// BucketUploads holds upload sessions in progress (resumable multipart
	// uploads of model files).
	BucketUploads = "aiforge_uploads"
	// BucketPulls holds the state of hub pulls, so a client that requested
	// one can follow it to its catalog version (or its failure).
	BucketPulls = "aiforge_model_pulls"
	// BucketTenantBuckets holds each tenant's model bucket: the S3 prefix
	// the guardian watches for model folders (pkg/tenantbucket.Config; the
	// credentials sealed), written by the edge's admin API.
	BucketTenantBuckets = "aiforge_tenant_buckets"
	// BucketTenantBucketFolders holds the guardian's record of each folder
	// of a tenant's model bucket: the manifest ETag last imported or
	// rejected, so a restart neither imports twice nor misses one.
	BucketTenantBucketFolders = "aiforge_tenant_bucket_folders"
	// BucketWorkers holds what each worker replica reports about itself
	// and its engine (registry.WorkerState), refreshed while it runs and
	// expiring when it stops reporting.
	BucketWorkers = "aiforge_workers"
	// BucketBatches holds Batch API batches (pkg/batch.Record) by tenant
	// and id, and the Idempotency-Key of each create.
	BucketBatches = "aiforge_batches"
	// BucketBatchQueues holds the batch scheduler's configuration: worker
	// classes, pools with their quotas, cohorts and tenant queues
	// (pkg/batch.QueueConfig).
	BucketBatchQueues = "aiforge_batch_queues"
	// BucketRouters holds routers (registry.Router): model names whose
	// requests go to the model or tool of their route class.
	BucketRouters = "aiforge_routers"
	// BucketSemanticCache holds cached answers of the models that opted in
	// (registry.CachePolicy), keyed by tenant and model first, each with
	// its own TTL.
	BucketSemanticCache = "aiforge_semantic_cache"
	// BucketResponses holds stored Responses API responses per tenant
	// (the response object, its input items and the conversation before
	// it, for previous_response_id), each with its own TTL (the edge's
	// retention), large ones split in chunks.
	BucketResponses = "aiforge_responses"
	// BucketPrompts holds prompt templates per tenant: each prompt with
	// its labels (production, staging, weighted for A/B tests) and each of
	// its versions.
	BucketPrompts = "aiforge_prompts"
)

// WorkerStateTTL is how long a worker replica's state lives in
// BucketWorkers without a refresh: a replica that stops reporting (killed,
// partitioned) disappears from routing and status within it.
const WorkerStateTTL = 15 * time.Second

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
