package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natsutil"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/query"
	"github.com/aiforge/aiforge/services/ingest"
	"github.com/aiforge/aiforge/services/usage"
)

// Service names of the scale report's rows.
const (
	ScaleUsageFold    = "usage fold"
	ScaleUsageQueries = "usage queries"
	ScaleIngest       = "ingest"
)

// ScaleOptions size a scale run.
type ScaleOptions struct {
	// Events is how many usage events are folded (default 100000).
	Events int
	// Docs is how many documents are ingested per replica count (default
	// 1500).
	Docs int
	// Queries is how many usage queries are answered per replica count
	// (default 5000).
	Queries int
	// Replicas are the replica counts measured, in order (default 1, 2,
	// 3); ratios are against the row with 1.
	Replicas []int
	// Progress receives one line per phase.
	Progress io.Writer
	// Timeout bounds each measurement (default 2 minutes).
	Timeout time.Duration
}

// ScaleRow is one measurement: Items handled by Replicas replicas of
// Service in Wall.
type ScaleRow struct {
	Service  string
	Replicas int
	Items    int
	Wall     time.Duration
	// Current is, for the usage fold, how long each replica took until its
	// ledger held every event.
	Current []time.Duration
	// Rejected is, for usage queries, how many answers were "overloaded"
	// and retried (not counted in Items).
	Rejected int
}

// PerSec is Items per second.
func (r ScaleRow) PerSec() float64 { return float64(r.Items) / r.Wall.Seconds() }

// ScaleReport holds the rows of a scale run.
type ScaleReport struct {
	Rows       []ScaleRow
	GOMAXPROCS int
	Servers    int
}

// Ratio is r's items/s over the same service's with one replica, 0 when
// the run has no such row.
func (rep ScaleReport) Ratio(r ScaleRow) float64 {
	for _, b := range rep.Rows {
		if b.Service == r.Service && b.Replicas == 1 {
			return r.PerSec() / b.PerSec()
		}
	}
	return 0
}

// Print writes the table and what each row means.
func (rep ScaleReport) Print(w io.Writer) {
	fmt.Fprintf(w, "scale-out against a %d-node JetStream cluster in process (R3 streams and buckets), GOMAXPROCS %d:\n", rep.Servers, rep.GOMAXPROCS)
	fmt.Fprintf(w, "every replica runs in this process, so all of them share its cores with the cluster\n\n")
	fmt.Fprintf(w, "%-14s %8s %8s %9s %11s %13s\n", "service", "replicas", "items", "seconds", "items/s", "vs 1 replica")
	for _, r := range rep.Rows {
		ratio := "-"
		if x := rep.Ratio(r); x > 0 {
			ratio = fmt.Sprintf("%.2fx", x)
		}
		fmt.Fprintf(w, "%-14s %8d %8d %9.3f %11.1f %13s\n", r.Service, r.Replicas, r.Items, r.Wall.Seconds(), r.PerSec(), ratio)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage fold: every replica folds the whole USAGE stream (an ordered consumer each, by design: each holds the")
	fmt.Fprintln(w, "  full ledger and answers any query); seconds is until every replica's ledger holds every event, so items/s")
	fmt.Fprintln(w, "  is the rate at which the service as a whole is current. Each replica until current:")
	for _, r := range rep.Rows {
		if r.Service != ScaleUsageFold {
			continue
		}
		var parts []string
		for i, d := range r.Current {
			parts = append(parts, fmt.Sprintf("r%d %.3fs (%.0f events/s)", i+1, d.Seconds(), float64(r.Items)/d.Seconds()))
		}
		fmt.Fprintf(w, "    %d replicas: %s\n", r.Replicas, strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "usage queries: completions reports answered by the replicas' queue group (shared), every replica current,\n")
	fmt.Fprintf(w, "  from %d clients per replica (its MaxConcurrentQueries); overloaded answers retried:", usage.DefaultMaxConcurrentQuery)
	for _, r := range rep.Rows {
		if r.Service == ScaleUsageQueries {
			fmt.Fprintf(w, " %d with %d,", r.Rejected, r.Replicas)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "ingest: documents from request to chunked (DocChunkedV1 on DOCS), the replicas sharing the durable consumer.")
}

// RunScale starts a 3-node JetStream cluster in process, provisions the
// streams and buckets with three replicas as the admin identity, publishes
// o.Events usage events, and for each replica count in o.Replicas starts
// that many usage replicas (the first settling, the others with settlement
// off, as deployed) and measures their fold and their queries, then that
// many ingest replicas and measures documents ingested. Every service
// connects with its own pkg/busauth identity.
func RunScale(ctx context.Context, o ScaleOptions) (ScaleReport, error) {
	if o.Events <= 0 {
		o.Events = 100_000
	}
	if o.Docs <= 0 {
		o.Docs = 1500
	}
	if o.Queries <= 0 {
		o.Queries = 5000
	}
	if len(o.Replicas) == 0 {
		o.Replicas = []int{1, 2, 3}
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	for _, n := range o.Replicas {
		if n < 1 {
			return ScaleReport{}, fmt.Errorf("bench: replica count %d: want at least 1", n)
		}
	}
	rep := ScaleReport{GOMAXPROCS: runtime.GOMAXPROCS(0), Servers: 3}
	dir, err := os.MkdirTemp("", "aiforge-bench-scale-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)

	b, err := startScaleBus(ctx, dir, rep.Servers, o.Progress)
	if err != nil {
		return rep, err
	}
	defer b.close()

	last, err := b.publishUsage(ctx, o.Events)
	if err != nil {
		return rep, err
	}
	objects, err := objstore.NewLocal(objstore.LocalConfig{Dir: filepath.Join(dir, "objects")})
	if err != nil {
		return rep, err
	}
	defer objects.Close()
	chunked, err := b.countChunked(ctx)
	if err != nil {
		return rep, err
	}
	defer chunked.stop()

	for _, n := range o.Replicas {
		fold, queries, err := b.measureUsage(ctx, n, last, o)
		if err != nil {
			return rep, fmt.Errorf("usage, %d replicas: %w", n, err)
		}
		rep.Rows = append(rep.Rows, fold, queries)
		row, err := b.measureIngest(ctx, n, objects, chunked, o)
		if err != nil {
			return rep, fmt.Errorf("ingest, %d replicas: %w", n, err)
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

// scaleBus is the cluster, its identities and the connections of the
// bench itself: admin (provisioning, counting) and edge (what the edge
// publishes and asks).
type scaleBus struct {
	url      string
	ids      map[string]busauth.Identity
	log      *slog.Logger
	progress io.Writer
	admin    *nats.Conn
	adminJS  jetstream.JetStream
	edge     *nats.Conn
	edgeJS   jetstream.JetStream
	close    func()
}

func startScaleBus(ctx context.Context, dir string, servers int, progress io.Writer) (*scaleBus, error) {
	ids, err := busauth.LoadOrCreate(filepath.Join(dir, "creds"))
	if err != nil {
		return nil, err
	}
	users, err := busauth.ServerUsers(ids)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "starting a %d-node JetStream cluster ...\n", servers)
	cluster, err := natsutil.StartCluster(natsutil.ClusterConfig{Servers: servers, StoreDir: filepath.Join(dir, "nats"), Users: users, Name: "aiforge-bench"})
	if err != nil {
		return nil, err
	}
	// Warnings and permission violations of the services show on the
	// progress stream: a run that is refused something says so.
	b := &scaleBus{url: natsutil.ClientURLs(cluster), ids: ids, progress: progress,
		log: slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	var conns []*nats.Conn
	b.close = func() {
		for _, nc := range conns {
			nc.Close()
		}
		natsutil.ShutdownCluster(cluster)
	}
	connect := func(identity string) (*nats.Conn, jetstream.JetStream, error) {
		nc, js, err := b.connect(identity, "bench-"+identity)
		if err == nil {
			conns = append(conns, nc)
		}
		return nc, js, err
	}
	if b.admin, b.adminJS, err = connect(busauth.Admin); err == nil {
		b.edge, b.edgeJS, err = connect(busauth.Edge)
	}
	if err != nil {
		b.close()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := events.Ensure(pctx, b.adminJS, events.StreamOptions{Replicas: servers}); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// connect opens a connection as identity to every server of the cluster.
func (b *scaleBus) connect(identity, name string) (*nats.Conn, jetstream.JetStream, error) {
	id, ok := b.ids[identity]
	if !ok {
		return nil, nil, fmt.Errorf("bench: no identity %q", identity)
	}
	nc, err := natsutil.Connect(b.url, name, id.Option(), natsutil.LogAsyncErrors(b.log.With("conn", name)))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// scaleTenants are the tenants of the usage events and documents.
var scaleTenants = []string{"t-alpha", "t-beta", "t-gamma", "t-delta", "t-eps", "t-zeta", "t-eta", "t-theta"}

// publishUsage publishes n valid UsageRecordedV2 events with distinct ids
// over two days, as the edge, and returns the USAGE stream's last
// sequence. It then reads the stream once, unmeasured, so the first fold
// measured does not pay for cold caches.
func (b *scaleBus) publishUsage(ctx context.Context, n int) (uint64, error) {
	fmt.Fprintf(b.progress, "publishing %d usage events to USAGE (R3) ...\n", n)
	base := time.Now().UTC().Truncate(time.Hour).Add(-48 * time.Hour)
	msgs := func(yield func(*nats.Msg, error) bool) {
		for i := range n {
			tenant := scaleTenants[i%len(scaleTenants)]
			at := base.Add(time.Duration(i%2880)*time.Minute + time.Duration(i%60)*time.Second)
			endpoint, model := events.EndpointChatCompletions, "m1"
			if i%5 == 3 {
				endpoint, model = events.EndpointCompletions, "m2"
			}
			u := events.UsageRecordedV1{
				RequestID: fmt.Sprintf("scale-%07d", i), Tenant: tenant, KeyID: fmt.Sprintf("key-%s-%d", tenant, i%3),
				Model: model, Endpoint: endpoint, PromptTokens: int64(50 + i%400), CachedPromptTokens: int64(i % 40),
				CompletionTokens: int64(10 + i%300), Status: events.UsageStatusOK, Reporter: "bench",
				StartedAt: at, FinishedAt: at.Add(800 * time.Millisecond),
			}
			if !yield(events.Marshal(events.UsageRecordedV2{UsageRecordedV1: u}, events.Envelope{ID: u.RequestID, Source: "bench", Tenant: tenant})) {
				return
			}
		}
	}
	t0 := time.Now()
	if err := publishAsync(ctx, b.edgeJS, msgs); err != nil {
		return 0, fmt.Errorf("publish usage: %w", err)
	}
	st, err := b.adminJS.Stream(ctx, events.StreamUsage)
	if err != nil {
		return 0, err
	}
	last := st.CachedInfo().State.LastSeq
	fmt.Fprintf(b.progress, "  %d events in %.2fs (%.0f/s), last sequence %d; reading them once to warm the stores ...\n",
		n, time.Since(t0).Seconds(), float64(n)/time.Since(t0).Seconds(), last)
	cons, err := b.adminJS.OrderedConsumer(ctx, events.StreamUsage, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(8192))
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			return 0, fmt.Errorf("warm-up read: %w", err)
		}
		if meta, err := m.Metadata(); err == nil && meta.Sequence.Stream >= last {
			return last, nil
		}
	}
}

// publishAsync publishes every message and waits for every ack.
func publishAsync(ctx context.Context, js jetstream.JetStream, msgs func(func(*nats.Msg, error) bool)) error {
	var futs []jetstream.PubAckFuture
	wait := func() error {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			}
		}
		futs = futs[:0]
		return nil
	}
	for m, err := range msgs {
		if err != nil {
			return err
		}
		f, err := js.PublishMsgAsync(m)
		for errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			if err := wait(); err != nil {
				return err
			}
			f, err = js.PublishMsgAsync(m)
		}
		if err != nil {
			return err
		}
		if futs = append(futs, f); len(futs) == 4000 {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// usageReplica is one running usage service.
type usageReplica struct {
	svc    *usage.Service
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

// measureUsage starts n usage replicas from empty ledgers and times until
// every one has folded the stream up to last, then has them answer
// o.Queries completions reports.
func (b *scaleBus) measureUsage(ctx context.Context, n int, last uint64, o ScaleOptions) (fold, queries ScaleRow, err error) {
	fold = ScaleRow{Service: ScaleUsageFold, Replicas: n, Items: o.Events}
	queries = ScaleRow{Service: ScaleUsageQueries, Replicas: n, Items: o.Queries}
	fmt.Fprintf(b.progress, "usage: %d replica(s) folding %d events ...\n", n, o.Events)
	var replicas []*usageReplica
	defer func() {
		for _, r := range replicas {
			r.cancel()
		}
		for _, r := range replicas {
			if rerr := <-r.done; rerr != nil && err == nil {
				err = fmt.Errorf("usage replica stopped: %w", rerr)
			}
			r.nc.Close()
		}
	}()
	for i := range n {
		name := fmt.Sprintf("bench-usage-n%d-r%d", n, i+1)
		nc, js, err := b.connect(busauth.Usage, name)
		if err != nil {
			return fold, queries, err
		}
		// Each replica starts from an empty ledger: a snapshot object of
		// its own, which no earlier round wrote. As deployed, one replica
		// settles budgets and the others fold and answer with settlement
		// off.
		cfg := usage.Config{Streams: events.StreamOptions{Replicas: 3}, SnapshotObject: name, DisableSettlement: i > 0}
		svc, err := usage.New(cfg, usage.Deps{NC: nc, JS: js, Logger: b.log, Registerer: prometheus.NewRegistry()})
		if err != nil {
			nc.Close()
			return fold, queries, err
		}
		replicas = append(replicas, &usageReplica{svc: svc, nc: nc, done: make(chan error, 1)})
	}
	t0 := time.Now()
	for _, r := range replicas {
		rctx, cancel := context.WithCancel(ctx)
		r.cancel = cancel
		go func() { r.done <- r.svc.Run(rctx) }()
	}
	fold.Current = make([]time.Duration, n)
	remaining := n
	err = poll(ctx, o.Timeout, func() (bool, error) {
		for i, r := range replicas {
			select {
			case err := <-r.done:
				r.done <- err
				return false, fmt.Errorf("replica %d stopped while folding: %v", i+1, err)
			default:
			}
			if fold.Current[i] == 0 && r.svc.FoldedSeq() >= last {
				fold.Current[i] = time.Since(t0)
				remaining--
			}
		}
		return remaining == 0, nil
	}, func() string {
		var s []string
		for _, r := range replicas {
			s = append(s, fmt.Sprint(r.svc.FoldedSeq()))
		}
		return fmt.Sprintf("folded %s of %d", strings.Join(s, ", "), last)
	})
	if err != nil {
		return fold, queries, err
	}
	fold.Wall = time.Since(t0)
	fmt.Fprintf(b.progress, "  every replica current after %.3fs\n", fold.Wall.Seconds())

	fmt.Fprintf(b.progress, "usage: %d replica(s) answering %d queries ...\n", n, o.Queries)
	from := time.Now().UTC().Truncate(24 * time.Hour).Add(-72 * time.Hour).Unix()
	q := fmt.Sprintf("start_time=%d&bucket_width=1d&limit=7&group_by=model", from)
	// The clients offer each replica its MaxConcurrentQueries; the queue
	// group spreads them at random, so a replica sometimes gets more and
	// answers "overloaded", which a client retries (counted).
	clients := usage.DefaultMaxConcurrentQuery * n
	var next, rejected atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	qctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	t0 = time.Now()
	for c := range clients {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(o.Queries); i = next.Add(1) {
				req := query.UsageRequest{Op: "completions", Scope: scaleTenants[(int(i)+c)%len(scaleTenants)], Query: q}
				for {
					body, err := query.AskUsage(qctx, b.edge, req)
					if err == nil {
						err = pageError(body)
					}
					if errors.Is(err, errOverloaded) {
						rejected.Add(1)
						time.Sleep(time.Millisecond) // a client's retry backoff, not synchronisation
						continue
					}
					if err != nil {
						errMu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						errMu.Unlock()
						cancel()
						return
					}
					break
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fold, queries, firstErr
	}
	queries.Rejected = int(rejected.Load())
	queries.Wall = time.Since(t0)
	return fold, queries, nil
}

// errOverloaded is a usage replica's answer when it holds its
// MaxConcurrentQueries already.
var errOverloaded = errors.New("usage query: overloaded")

// pageError is the error of a usage query's reply that is not a page of
// buckets.
func pageError(body []byte) error {
	var page struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
		Error  *query.ErrorBody  `json:"error"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return fmt.Errorf("usage query reply: %w", err)
	}
	if page.Error != nil && page.Error.Code != nil && *page.Error.Code == contracts.CodeOverloaded {
		return errOverloaded
	}
	if page.Error != nil {
		return fmt.Errorf("usage query: %s", page.Error.Message)
	}
	if page.Object != "page" || len(page.Data) == 0 {
		return fmt.Errorf("usage query: a reply without buckets: %.200s", body)
	}
	return nil
}

// chunkCounter counts the DocChunkedV1 events on DOCS per vector store,
// and remembers the first DocFailedV1.
type chunkCounter struct {
	mu      sync.Mutex
	byStore map[string]int
	failed  string
	stop    func()
}

func (c *chunkCounter) count(store string) (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byStore[store], c.failed
}

func (b *scaleBus) countChunked(ctx context.Context) (*chunkCounter, error) {
	c := &chunkCounter{byStore: map[string]int{}}
	reg := events.NewRegistry(func() events.Event { return &events.DocChunkedV1{} }, func() events.Event { return &events.DocFailedV1{} })
	cons, err := b.adminJS.OrderedConsumer(ctx, events.StreamDocs, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.DocsChunkedAll, events.DocsFailedAll}})
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		_, ev, err := reg.Decode(m.Headers(), m.Data())
		c.mu.Lock()
		defer c.mu.Unlock()
		switch ev := ev.(type) {
		case *events.DocChunkedV1:
			c.byStore[ev.StoreID]++
		case *events.DocFailedV1:
			if c.failed == "" {
				c.failed = fmt.Sprintf("%s failed: %s: %s", ev.FileID, ev.Code, ev.Message)
			}
		default:
			if c.failed == "" {
				c.failed = fmt.Sprintf("undecodable event on %s: %v", m.Subject(), err)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	c.stop = cc.Stop
	return c, nil
}

// measureIngest stores o.Docs markdown documents, publishes their ingest
// requests as the edge, then starts n ingest replicas and times until
// every document is chunked.
func (b *scaleBus) measureIngest(ctx context.Context, n int, objects objstore.Store, chunked *chunkCounter, o ScaleOptions) (row ScaleRow, err error) {
	row = ScaleRow{Service: ScaleIngest, Replicas: n, Items: o.Docs}
	storeID := fmt.Sprintf("vs_scale_n%d", n)
	fmt.Fprintf(b.progress, "ingest: storing and requesting %d documents ...\n", o.Docs)
	reqs := make([]events.DocIngestRequestedV1, o.Docs)
	for i := range reqs {
		tenant := scaleTenants[i%len(scaleTenants)]
		file := fmt.Sprintf("file-%05d", i)
		data := scaleDocument(n, i)
		key := objstore.TenantPrefix(tenant) + "files/" + storeID + "/" + file
		if _, err := objects.Put(ctx, key, strings.NewReader(data), int64(len(data)), "text/markdown"); err != nil {
			return row, err
		}
		sum := sha256.Sum256([]byte(data))
		reqs[i] = events.DocIngestRequestedV1{
			DocRef:    events.DocRef{Tenant: tenant, StoreID: storeID, FileID: file, Run: "r1"},
			ObjectKey: key, Filename: file + ".md", ContentSHA256: hex.EncodeToString(sum[:]),
			Chunking: events.Chunking{MaxTokens: 200, OverlapTokens: 50}, RequestedAt: time.Now().UTC(),
		}
	}
	err = publishAsync(ctx, b.edgeJS, func(yield func(*nats.Msg, error) bool) {
		for _, r := range reqs {
			if !yield(events.Marshal(r, events.Envelope{ID: "ingest-" + r.StoreID + "-" + r.FileID, Source: "bench", Tenant: r.Tenant})) {
				return
			}
		}
	})
	if err != nil {
		return row, fmt.Errorf("publish ingest requests: %w", err)
	}

	fmt.Fprintf(b.progress, "ingest: %d replica(s) chunking %d documents ...\n", n, o.Docs)
	type replica struct {
		svc    *ingest.Service
		nc     *nats.Conn
		cancel context.CancelFunc
		done   chan error
	}
	var replicas []*replica
	defer func() {
		for _, r := range replicas {
			r.cancel()
		}
		for _, r := range replicas {
			if rerr := <-r.done; rerr != nil && err == nil {
				err = fmt.Errorf("ingest replica stopped: %w", rerr)
			}
			r.nc.Close()
		}
	}()
	for i := range n {
		nc, js, err := b.connect(busauth.Ingest, fmt.Sprintf("bench-ingest-n%d-r%d", n, i+1))
		if err != nil {
			return row, err
		}
		svc, err := ingest.New(ingest.Config{}, ingest.Deps{NC: nc, JS: js, Objects: objects, Logger: b.log})
		if err != nil {
			nc.Close()
			return row, err
		}
		replicas = append(replicas, &replica{svc: svc, nc: nc, cancel: func() {}, done: make(chan error, 1)})
	}
	t0 := time.Now()
	for _, r := range replicas {
		rctx, cancel := context.WithCancel(ctx)
		r.cancel = cancel
		go func() { r.done <- r.svc.Run(rctx) }()
	}
	err = poll(ctx, o.Timeout, func() (bool, error) {
		for i, r := range replicas {
			select {
			case err := <-r.done:
				r.done <- err
				return false, fmt.Errorf("replica %d stopped: %v", i+1, err)
			default:
			}
		}
		got, failed := chunked.count(storeID)
		if failed != "" {
			return false, errors.New(failed)
		}
		return got >= o.Docs, nil
	}, func() string {
		got, _ := chunked.count(storeID)
		return fmt.Sprintf("%d of %d documents chunked", got, o.Docs)
	})
	if err != nil {
		return row, err
	}
	row.Wall = time.Since(t0)
	fmt.Fprintf(b.progress, "  every document chunked after %.3fs\n", row.Wall.Seconds())
	return row, nil
}

// scaleDocument is a markdown document of a few KB, distinct per round
// and index (so no chunks are reused from an earlier round).
func scaleDocument(round, i int) string {
	var s strings.Builder
	fmt.Fprintf(&s, "# Report %d-%d\n\n", round, i)
	for p := range 12 {
		fmt.Fprintf(&s, "## Section %d\n\n", p+1)
		for w := range 40 {
			fmt.Fprintf(&s, "word%d ", (i*131+p*17+w*7)%997)
		}
		s.WriteString("\n\n")
	}
	return s.String()
}

// poll checks done until it reports true or an error, ctx ends, or
// timeout passes; the timeout's error says what state shows.
func poll(ctx context.Context, timeout time.Duration, done func() (bool, error), state func() string) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s: %s", timeout, state())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond): // polling interval, not synchronisation
		}
	}
}
