// Package batches serves OpenAI's Batch API: create, get, list and cancel.
// The edge writes a batch record twice at most, both times by
// compare-and-set: it creates it (status validating) and moves it to
// cancelling. The batch service, which watches the bucket, does the rest:
// validation, the lines' dispatch, counts, the output and error files and
// the final status (package pkg/batch holds the record they share).
//
// Beyond OpenAI: an Idempotency-Key header makes a create safe to retry,
// and a tenant's enqueued lines and tokens are bounded up front, so a batch
// past the bound is refused with 429 before anything is written rather
// than failing hours later.
package batches

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/contracts"
	pkgfiles "github.com/aiforge/aiforge/pkg/files"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// Files loads a tenant's file records (the Files API).
type Files interface {
	Load(ctx context.Context, tenant, id string) (*pkgfiles.Record, error)
}

// Deps are what the Batch API needs.
type Deps struct {
	// Batches is events.BucketBatches, Queues events.BucketBatchQueues.
	Batches jetstream.KeyValue
	Queues  jetstream.KeyValue
	Files   Files
	Keys    httpapi.Keys
	// Storage is false when the edge has no object store: batch input
	// files cannot exist, so the API answers 503 storage_unavailable.
	Storage bool
	Logger  *slog.Logger
	// Window is how long a batch has before its unfinished lines expire
	// (Record.Expiry); the batch service must use the same. Default 24h.
	Window time.Duration
	// MaxEnqueuedLines and MaxEnqueuedTokens bound a tenant's unfinished
	// lines and estimated tokens when none of its queues sets a bound.
	// 0: unlimited.
	MaxEnqueuedLines  int64
	MaxEnqueuedTokens int64
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Service is the Batch API.
type Service struct {
	d   Deps
	log *slog.Logger
}

// New builds the Batch API.
func New(d Deps) *Service {
	if d.Window <= 0 {
		d.Window = 24 * time.Hour
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{d: d, log: d.Logger}
}

// Routes mounts the Batch API.
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/batches", s.tenantAPI(s.create))
	mux.HandleFunc("GET /v1/batches", s.tenantAPI(s.list))
	mux.HandleFunc("GET /v1/batches/{id}", s.tenantAPI(s.get))
	mux.HandleFunc("POST /v1/batches/{id}/cancel", s.tenantAPI(s.cancel))
}

func (s *Service) tenantAPI(h func(http.ResponseWriter, *http.Request, *registry.Key)) http.HandlerFunc {
	return httpapi.TenantAPI(s.d.Keys, s.d.Storage, h)
}

// IdempotencyHeader is the header that makes a create safe to retry.
const IdempotencyHeader = "Idempotency-Key"

// maxIdempotencyKey bounds the header's length.
const maxIdempotencyKey = 256

// createRequest is the body of POST /v1/batches. Pointers tell a missing
// field from an empty one.
type createRequest struct {
	InputFileID        *string           `json:"input_file_id"`
	Endpoint           *string           `json:"endpoint"`
	CompletionWindow   *string           `json:"completion_window"`
	Metadata           map[string]string `json:"metadata"`
	OutputExpiresAfter *struct {
		Anchor  string `json:"anchor"`
		Seconds int64  `json:"seconds"`
	} `json:"output_expires_after"`
}

// validate checks the request as OpenAI does: required fields first, then
// their values, then metadata's bounds.
func (q createRequest) validate() *contracts.Error {
	for _, f := range []struct {
		name string
		v    *string
	}{{"input_file_id", q.InputFileID}, {"endpoint", q.Endpoint}, {"completion_window", q.CompletionWindow}} {
		if f.v == nil || *f.v == "" {
			return contracts.ErrBadRequest(f.name, contracts.CodeMissingParam, fmt.Sprintf("Missing required parameter: '%s'.", f.name))
		}
	}
	if !slices.Contains(batch.Endpoints, *q.Endpoint) {
		return invalidValue("endpoint", *q.Endpoint, batch.Endpoints)
	}
	if *q.CompletionWindow != batch.CompletionWindow {
		return invalidValue("completion_window", *q.CompletionWindow, []string{batch.CompletionWindow})
	}
	if len(q.Metadata) > batch.MaxMetadataPairs {
		return contracts.ErrBadRequest("metadata", contracts.CodeTooManyProperties,
			fmt.Sprintf("Invalid 'metadata': too many properties. Expected an object with at most %d properties, but got an object with %d properties instead.", batch.MaxMetadataPairs, len(q.Metadata)))
	}
	keys := make([]string, 0, len(q.Metadata))
	for k := range q.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if n := utf8.RuneCountInString(k); n > batch.MaxMetadataKey {
			return contracts.ErrBadRequest("metadata", contracts.CodeStringTooLong,
				fmt.Sprintf("Invalid 'metadata': key %q is too long. Expected a string with maximum length %d, but got a string with length %d instead.", httpapi.Bounded(k, 80), batch.MaxMetadataKey, n))
		}
		if n := utf8.RuneCountInString(q.Metadata[k]); n > batch.MaxMetadataValue {
			return contracts.ErrBadRequest("metadata."+httpapi.Bounded(k, 64), contracts.CodeStringTooLong,
				fmt.Sprintf("Invalid 'metadata.%s': string too long. Expected a string with maximum length %d, but got a string with length %d instead.", httpapi.Bounded(k, 64), batch.MaxMetadataValue, n))
		}
	}
	if e := q.OutputExpiresAfter; e != nil {
		if e.Anchor != "created_at" {
			return invalidValue("output_expires_after.anchor", e.Anchor, []string{"created_at"})
		}
		if e.Seconds < 3600 || e.Seconds > 2592000 {
			return contracts.ErrBadRequest("output_expires_after.seconds", contracts.CodeInvalidValue,
				fmt.Sprintf("Invalid 'output_expires_after.seconds': %d. Expected a value from 3600 (1 hour) to 2592000 (30 days).", e.Seconds))
		}
	}
	return nil
}

func invalidValue(param, got string, want []string) *contracts.Error {
	quoted := make([]string, len(want))
	for i, w := range want {
		quoted[i] = "'" + w + "'"
	}
	return contracts.ErrBadRequest(param, contracts.CodeInvalidValue,
		fmt.Sprintf("Invalid value for '%s': '%s'. Supported values are: %s.", param, httpapi.Bounded(got, 64), strings.Join(quoted, ", ")))
}

// fingerprint is the hash an Idempotency-Key is bound to: the request as
// decoded, so that whitespace and key order do not make a retry differ.
func (q createRequest) fingerprint() string {
	b, _ := json.Marshal(q)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// noRetry marks an answer that the official SDKs must not retry by
// themselves (they retry 409 and 429): the same request would get the
// same answer.
func noRetry(w http.ResponseWriter) { w.Header().Set("X-Should-Retry", "false") }

func (s *Service) create(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	var req createRequest
	if !httpapi.Decode(w, r, &req) {
		return
	}
	if e := req.validate(); e != nil {
		contracts.Write(w, e)
		return
	}
	idemKey := r.Header.Get(IdempotencyHeader)
	if len(idemKey) > maxIdempotencyKey {
		contracts.Write(w, contracts.ErrBadRequest(IdempotencyHeader, contracts.CodeInvalidRequest,
			fmt.Sprintf("The %s header may be at most %d characters.", IdempotencyHeader, maxIdempotencyKey)))
		return
	}
	ctx := r.Context()
	id := httpapi.SortableID("batch_")
	var idem *batch.Idempotency
	if idemKey != "" {
		rec, existing, err := s.claimIdempotency(ctx, k.Tenant, idemKey, batch.Idempotency{BatchID: id, RequestSHA256: req.fingerprint(), CreatedAt: s.d.Now().UTC()})
		if err != nil {
			s.internal(w, r, "claim idempotency key", err)
			return
		}
		if existing {
			if rec.RequestSHA256 != req.fingerprint() {
				noRetry(w)
				contracts.Write(w, &contracts.Error{Status: http.StatusConflict, Type: contracts.TypeInvalidRequest, Param: IdempotencyHeader,
					Code: contracts.CodeIdempotencyKeyReused, Message: "This Idempotency-Key was already used for a batch created with another request body; use a new key for a new batch."})
				return
			}
			// The same request again: answer its batch. A first request
			// that stopped between the key and the batch left no batch;
			// this one creates it, under the id the key names.
			b, _, err := kv.Get[batch.Record](ctx, s.d.Batches, batch.Key(k.Tenant, rec.BatchID))
			if err == nil {
				httpapi.WriteJSON(w, http.StatusOK, b.Batch)
				return
			}
			if !errors.Is(err, kv.ErrNotFound) {
				s.internal(w, r, "read batch", err)
				return
			}
		}
		idem, id = &rec, rec.BatchID
	}
	file, apiErr := s.inputFile(ctx, k.Tenant, *req.InputFileID)
	if apiErr != nil {
		s.releaseIdempotency(ctx, k.Tenant, idemKey, idem)
		contracts.Write(w, apiErr)
		return
	}
	if apiErr := s.checkEnqueued(ctx, k.Tenant, file); apiErr != nil {
		s.releaseIdempotency(ctx, k.Tenant, idemKey, idem)
		noRetry(w)
		contracts.Write(w, apiErr)
		return
	}
	now := s.d.Now()
	expiry := now.Add(s.d.Window)
	expiresAt := expiry.Unix()
	rec := batch.Record{
		Batch: batch.Batch{
			ID: id, Object: "batch", Endpoint: *req.Endpoint, InputFileID: file.ID, CompletionWindow: *req.CompletionWindow,
			Status: batch.StatusValidating, CreatedAt: now.Unix(), ExpiresAt: &expiresAt, Metadata: req.Metadata,
		},
		Tenant: k.Tenant, KeyID: k.ID, InputObjectKey: file.ObjectKey, EstimatedTokens: estimateTokens(file.Bytes),
		Expiry: expiry.UTC(),
	}
	if _, err := kv.Create(ctx, s.d.Batches, batch.Key(k.Tenant, id), rec); err != nil {
		if errors.Is(err, kv.ErrExists) && idem != nil {
			// A retry of the same request won the race: answer its batch.
			if b, _, err := kv.Get[batch.Record](ctx, s.d.Batches, batch.Key(k.Tenant, id)); err == nil {
				httpapi.WriteJSON(w, http.StatusOK, b.Batch)
				return
			}
		}
		s.releaseIdempotency(ctx, k.Tenant, idemKey, idem)
		s.internal(w, r, "create batch", err)
		return
	}
	s.log.Info("batch created", "tenant", k.Tenant, "batch_id", id, "input_file_id", file.ID, "lines", file.Lines, "endpoint", rec.Endpoint)
	httpapi.WriteJSON(w, http.StatusOK, rec.Batch)
}

// claimIdempotency stores want under the tenant's key unless the key is
// already there: then it returns what is stored, and existing is true.
func (s *Service) claimIdempotency(ctx context.Context, tenant, key string, want batch.Idempotency) (batch.Idempotency, bool, error) {
	bk := batch.IdempotencyKey(tenant, key)
	for range 3 {
		_, err := kv.Create(ctx, s.d.Batches, bk, want)
		if err == nil {
			return want, false, nil
		}
		if !errors.Is(err, kv.ErrExists) {
			return batch.Idempotency{}, false, err
		}
		got, _, err := kv.Get[batch.Idempotency](ctx, s.d.Batches, bk)
		if err == nil {
			return got, true, nil
		}
		if !errors.Is(err, kv.ErrNotFound) {
			return batch.Idempotency{}, false, err
		}
		// Released between the create and the read: try again.
	}
	return batch.Idempotency{}, false, fmt.Errorf("idempotency key %s: created and released concurrently", bk)
}

// releaseIdempotency frees a key whose create was refused, so that the same
// request can be tried again once the refusal no longer holds. It deletes
// the key only if it still names this create's batch and that batch does
// not exist.
func (s *Service) releaseIdempotency(ctx context.Context, tenant, key string, idem *batch.Idempotency) {
	if idem == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if _, _, err := kv.Get[batch.Record](ctx, s.d.Batches, batch.Key(tenant, idem.BatchID)); !errors.Is(err, kv.ErrNotFound) {
		return
	}
	bk := batch.IdempotencyKey(tenant, key)
	e, err := s.d.Batches.Get(ctx, bk)
	if err != nil {
		return
	}
	var cur batch.Idempotency
	if json.Unmarshal(e.Value(), &cur) != nil || cur.BatchID != idem.BatchID {
		return
	}
	if err := s.d.Batches.Delete(ctx, bk, jetstream.LastRevision(e.Revision())); err != nil {
		s.log.Warn("release idempotency key", "tenant", tenant, "err", err)
	}
}

// estimateTokens is the tokens a batch is taken to spend before its lines
// are read: a byte of JSONL per quarter token.
func estimateTokens(bytes int64) int64 { return (bytes + 3) / 4 }

// inputFile loads the tenant's input file and checks its purpose.
func (s *Service) inputFile(ctx context.Context, tenant, id string) (*pkgfiles.Record, *contracts.Error) {
	f, err := s.d.Files.Load(ctx, tenant, id)
	if errors.Is(err, kv.ErrNotFound) {
		return nil, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Param: "input_file_id", Code: contracts.CodeNotFound,
			Message: fmt.Sprintf("No such File object: %s", httpapi.Bounded(id, 128))}
	}
	if err != nil {
		s.log.Error("load batch input file", "tenant", tenant, "file_id", id, "err", err)
		return nil, httpapi.StoreError(ctx, err, "file store", "The file store could not be read.")
	}
	if f.Purpose != pkgfiles.PurposeBatch {
		return nil, contracts.ErrBadRequest("input_file_id", contracts.CodeInvalidFilePurpose,
			fmt.Sprintf("The file %s has purpose '%s'; a batch's input file must be uploaded with purpose 'batch'.", f.ID, f.Purpose))
	}
	if f.Bytes > batch.MaxFileBytes {
		return nil, contracts.ErrBadRequest("input_file_id", contracts.CodeInvalidRequest,
			fmt.Sprintf("The file %s holds %d bytes; a batch's input file may hold at most %d bytes (200 MB).", f.ID, f.Bytes, batch.MaxFileBytes))
	}
	return f, nil
}

// limits are a tenant's bounds on enqueued work: 0 is unlimited.
type limits struct{ lines, tokens int64 }

// tenantLimits are the smallest bounds the tenant's queues set, each
// falling back to the edge's default when none of them sets it.
func (s *Service) tenantLimits(ctx context.Context, tenant string) (limits, error) {
	l := limits{}
	if s.d.Queues != nil {
		qs, err := kv.List[batch.Queue](ctx, s.d.Queues, batch.QueuePrefix+">")
		if err != nil {
			return l, err
		}
		for _, e := range qs {
			q := e.Value
			if q.Tenant != tenant {
				continue
			}
			if q.MaxEnqueuedLines > 0 && (l.lines == 0 || q.MaxEnqueuedLines < l.lines) {
				l.lines = q.MaxEnqueuedLines
			}
			if q.MaxEnqueuedTokens > 0 && (l.tokens == 0 || q.MaxEnqueuedTokens < l.tokens) {
				l.tokens = q.MaxEnqueuedTokens
			}
		}
	}
	if l.lines == 0 {
		l.lines = s.d.MaxEnqueuedLines
	}
	if l.tokens == 0 {
		l.tokens = s.d.MaxEnqueuedTokens
	}
	return l, nil
}

// enqueued is what a tenant's unfinished batches still have to run: the
// lines not yet completed or failed and their share of the estimated
// tokens. A batch still validating counts its input file's lines.
func (s *Service) enqueued(ctx context.Context, tenant string) (lines, tokens int64, err error) {
	bs, err := kv.List[batch.Record](ctx, s.d.Batches, batch.TenantPrefix(tenant)+">")
	if err != nil {
		return 0, 0, err
	}
	for _, e := range bs {
		b := e.Value
		if batch.Final(b.Status) {
			continue
		}
		total := b.RequestCounts.Total
		if total == 0 && b.Status == batch.StatusValidating {
			if f, err := s.d.Files.Load(ctx, tenant, b.InputFileID); err == nil {
				total = f.Lines
			}
		}
		left := max(0, total-b.RequestCounts.Completed-b.RequestCounts.Failed)
		lines += left
		if total > 0 {
			tokens += b.EstimatedTokens * left / total
		} else {
			tokens += b.EstimatedTokens
		}
	}
	return lines, tokens, nil
}

// checkEnqueued refuses a batch that would take its tenant past its
// enqueued limits.
func (s *Service) checkEnqueued(ctx context.Context, tenant string, f *pkgfiles.Record) *contracts.Error {
	l, err := s.tenantLimits(ctx, tenant)
	if err != nil {
		s.log.Error("read batch queues", "tenant", tenant, "err", err)
		return httpapi.StoreError(ctx, err, "batch configuration", "The batch queue configuration could not be read.")
	}
	if l.lines <= 0 && l.tokens <= 0 {
		return nil
	}
	lines, tokens, err := s.enqueued(ctx, tenant)
	if err != nil {
		s.log.Error("read batches", "tenant", tenant, "err", err)
		return httpapi.StoreError(ctx, err, "batch store", "The batch store could not be read.")
	}
	newTokens := estimateTokens(f.Bytes)
	refuse := func(what string, limit, have, add int64) *contracts.Error {
		return &contracts.Error{Status: http.StatusTooManyRequests, Type: contracts.TypeRateLimit, Param: "input_file_id", Code: contracts.CodeBatchEnqueuedLimit,
			Message: fmt.Sprintf("Enqueued %s limit reached for tenant %s: limit %s enqueued %s, %s already enqueued in unfinished batches, this batch adds %s. Retry once earlier batches have finished.",
				what, tenant, group(limit), what, group(have), group(add))}
	}
	if l.lines > 0 && lines+f.Lines > l.lines {
		return refuse("lines", l.lines, lines, f.Lines)
	}
	if l.tokens > 0 && tokens+newTokens > l.tokens {
		return refuse("tokens", l.tokens, tokens, newTokens)
	}
	return nil
}

// group writes n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func (s *Service) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	s.log.Error("batch store", "op", what, "err", err)
	var de *kv.DecodeError
	if errors.As(err, &de) {
		contracts.Write(w, contracts.ErrInternal("A stored batch record could not be read."))
		return
	}
	contracts.Write(w, httpapi.StoreError(r.Context(), err, "batch store", "The batch store could not be reached."))
}

// validID reports whether id can be a batch id (and a key token).
func validID(id string) bool {
	return strings.HasPrefix(id, "batch_") && len(id) <= 128 && !strings.ContainsAny(id, ".*> \t\r\n")
}

func notFound(w http.ResponseWriter, id string) {
	contracts.Write(w, &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Param: "batch_id", Code: contracts.CodeNotFound,
		Message: fmt.Sprintf("No such Batch object: %s", httpapi.Bounded(id, 128))})
}

func (s *Service) load(w http.ResponseWriter, r *http.Request, k *registry.Key) (batch.Record, bool) {
	id := r.PathValue("id")
	if !validID(id) {
		notFound(w, id)
		return batch.Record{}, false
	}
	b, _, err := kv.Get[batch.Record](r.Context(), s.d.Batches, batch.Key(k.Tenant, id))
	if errors.Is(err, kv.ErrNotFound) {
		notFound(w, id)
		return batch.Record{}, false
	}
	if err != nil {
		s.internal(w, r, "get batch", err)
		return batch.Record{}, false
	}
	return b, true
}

func (s *Service) get(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	if b, ok := s.load(w, r, k); ok {
		httpapi.WriteJSON(w, http.StatusOK, b.Batch)
	}
}

// list pages through the tenant's batches, newest first: OpenAI's cursor
// page with after and limit (1 to 100, default 20). Batch ids sort in
// creation order, so after works even for a batch no longer there.
func (s *Service) list(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			contracts.Write(w, contracts.ErrBadRequest("limit", contracts.CodeInvalidValue, "Invalid 'limit': expected an integer from 1 to 100."))
			return
		}
		limit = n
	}
	after := q.Get("after")
	entries, err := kv.List[batch.Record](r.Context(), s.d.Batches, batch.TenantPrefix(k.Tenant)+">")
	if err != nil {
		s.internal(w, r, "list batches", err)
		return
	}
	all := make([]batch.Batch, 0, len(entries))
	for _, e := range entries {
		if after == "" || e.Value.ID < after {
			all = append(all, e.Value.Batch)
		}
	}
	slices.SortFunc(all, func(a, b batch.Batch) int { return strings.Compare(b.ID, a.ID) })
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ListPageOptionalCursors(all, more, func(b batch.Batch) string { return b.ID }))
}

// cancel moves a validating or in-progress batch to cancelling; the batch
// service stops dispatching its lines, lets those in flight finish and
// writes the partial results. A batch already cancelling is answered as
// it is; a finalizing or final one cannot be cancelled (409).
func (s *Service) cancel(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	id := r.PathValue("id")
	if !validID(id) {
		notFound(w, id)
		return
	}
	var refused string
	b, _, err := kv.Update(r.Context(), s.d.Batches, batch.Key(k.Tenant, id), func(b *batch.Record, exists bool) error {
		refused = ""
		if !exists {
			return kv.ErrNotFound
		}
		switch b.Status {
		case batch.StatusValidating, batch.StatusInProgress:
			now := s.d.Now().Unix()
			b.Status, b.CancellingAt = batch.StatusCancelling, &now
			return nil
		case batch.StatusCancelling:
			return kv.ErrNoChange
		default:
			refused = b.Status
			return kv.ErrNoChange
		}
	})
	if errors.Is(err, kv.ErrNotFound) {
		notFound(w, id)
		return
	}
	if err != nil {
		s.internal(w, r, "cancel batch", err)
		return
	}
	if refused != "" {
		noRetry(w)
		contracts.Write(w, &contracts.Error{Status: http.StatusConflict, Type: contracts.TypeInvalidRequest, Param: "batch_id", Code: contracts.CodeBatchNotCancellable,
			Message: fmt.Sprintf("Cannot cancel a batch with status '%s'.", refused)})
		return
	}
	s.log.Info("batch cancel requested", "tenant", k.Tenant, "batch_id", id, "status", b.Status)
	httpapi.WriteJSON(w, http.StatusOK, b.Batch)
}
