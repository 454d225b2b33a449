package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/registry"
)

// Service is one usage replica: a folder, a settler and a query responder.
type Service struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	m    *metrics
	now  func() time.Time

	// mu guards led: the folder writes under Lock, queries read under
	// RLock. The folder is the only writer, so it reads without locking.
	mu  sync.RWMutex
	led *ledger.Ledger

	prices atomic.Pointer[ledger.PriceBook]
	limits atomic.Pointer[limitsView]
	// rebuildMu orders rebuilds of prices and limits, so the last one
	// published reads the newest state of the view.
	rebuildMu sync.Mutex

	obs     jetstream.ObjectStore
	settler *settler

	running  atomic.Bool
	ready    atomic.Bool
	querySem chan struct{}
	auditSem chan struct{}

	// Queries in flight, so Run returns only after they answered.
	qmu     sync.Mutex
	qclosed bool
	qwg     sync.WaitGroup

	// Folder state, owned by the folder goroutine.
	dec          decoder
	pending      *settleBatch
	pendingSince time.Time
	sinceSnap    int
	lastSnap     time.Time
	snapSeq      uint64

	// Test hooks.
	skipFinalSnapshot bool             // stop like a crash: no final settlement barrier or snapshot
	foldedHook        func(seq uint64) // called after each message is folded
}

// New validates cfg and deps and returns a stopped service.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := errors.Join(cfg.Validate(), deps.validate()); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("usage: metrics: %w", err)
	}
	s := &Service{
		cfg: cfg, deps: deps, log: deps.Logger.With("service", "usage"), m: m, now: deps.Now,
		led:      ledger.New(ledger.WithDedupHorizon(cfg.DedupHorizon)),
		querySem: make(chan struct{}, cfg.MaxConcurrentQueries),
		auditSem: make(chan struct{}, 1),
	}
	s.prices.Store(ledger.NewPriceBook(nil, cfg.Discounts))
	s.limits.Store(&limitsView{keys: map[string]registry.Limits{}, tenants: map[string]registry.Limits{}})
	return s, nil
}

// Ready reports whether the service has loaded its snapshot and the
// registry and is folding.
func (s *Service) Ready() bool { return s.ready.Load() }

// FoldedSeq is the last USAGE stream sequence folded.
func (s *Service) FoldedSeq() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.led.LastSeq()
}

// Ledger calls fn with the live ledger under the read lock; fn must not
// keep it.
func (s *Service) Ledger(fn func(*ledger.Ledger)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fn(s.led)
}

// Run creates the streams, the snapshot bucket, loads the newest snapshot,
// watches prices, keys and tenants, answers queries and folds the USAGE
// stream until ctx ends; then it settles what it folded, saves a final
// snapshot and returns nil.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("usage: Run called twice")
	}
	js := s.deps.JS
	if err := events.Ensure(ctx, js, s.cfg.Streams); err != nil {
		return err
	}
	replicas := s.cfg.Streams.Replicas
	if replicas == 0 {
		replicas = 1
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: s.cfg.SnapshotBucket, Description: snapshotBucketDescription,
		Storage: jetstream.FileStorage, Replicas: replicas, Compression: true,
	})
	if err != nil {
		return fmt.Errorf("usage: snapshot bucket %s: %w", s.cfg.SnapshotBucket, err)
	}
	s.obs = obs
	store, err := registry.Open(ctx, js)
	if err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	budgets, err := js.KeyValue(ctx, events.BucketBudgets)
	if err != nil {
		return fmt.Errorf("usage: bucket %s: %w", events.BucketBudgets, err)
	}

	if err := s.loadSnapshot(ctx); err != nil {
		return err
	}

	// Everything below stops when bg is canceled, after the final snapshot.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		s.qmu.Lock()
		s.qclosed = true
		s.qmu.Unlock()
		stopBG()
		s.qwg.Wait()
		wg.Wait()
	}()
	if err := s.watchRegistry(ctx, bg, &wg, store); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	if !s.cfg.DisableSettlement {
		s.settler = newSettler(budgets, js, s.log, s.m, s.cfg.Source, s.cfg.SettleConcurrency)
		wg.Go(func() { s.settler.run(bg) })
	}

	sub, err := s.deps.NC.QueueSubscribe(events.UsageQuery, s.cfg.QueueGroup, s.onQuery(bg))
	if err != nil {
		return fmt.Errorf("usage: subscribe %s: %w", events.UsageQuery, err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	s.ready.Store(true)
	s.log.Info("usage folding", "from_seq", s.led.LastSeq()+1, "buckets", s.led.Len(), "seen_ids", s.led.Seen())
	foldErr := s.fold(ctx)
	s.ready.Store(false)
	_ = sub.Unsubscribe()

	if s.skipFinalSnapshot {
		return foldErr
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.snapshot(sctx); err != nil {
		s.log.Warn("final snapshot not saved; the next start replays from the previous one", "err", err)
	}
	s.log.Info("usage stopped", "folded_seq", s.led.LastSeq())
	return foldErr
}

// watchRegistry follows the registry and the catalog through a directory
// view and waits until it has delivered its initial state, so the first
// event is costed and settled with the prices and budgets in force. The
// price book and the limits are rebuilt from the view on every change.
func (s *Service) watchRegistry(ctx, bg context.Context, wg *sync.WaitGroup, store *registry.Store) error {
	cat, err := catalog.Open(ctx, s.deps.JS)
	if err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	var view *directory.View
	view = directory.New(store, cat, directory.Options{Logger: s.log, OnChange: func(c directory.Change) {
		switch c.Kind {
		case directory.KindPrice, directory.KindCatalog:
			s.rebuildPrices(view)
		case directory.KindKey, directory.KindTenant:
			s.rebuildLimits(view)
		}
	}})
	wg.Go(func() { _ = view.Run(bg) })
	if err := view.WaitSynced(ctx); err != nil {
		return err
	}
	s.rebuildPrices(view)
	s.rebuildLimits(view)
	return nil
}

// rebuildPrices publishes the price book of the view's prices (an adapter
// without a price of its own is billed like its base).
func (s *Service) rebuildPrices(v *directory.View) {
	s.rebuildMu.Lock()
	defer s.rebuildMu.Unlock()
	s.prices.Store(ledger.NewPriceBook(v.Prices(), s.cfg.Discounts))
}

// rebuildLimits publishes the budgets of the view's keys and tenants.
func (s *Service) rebuildLimits(v *directory.View) {
	s.rebuildMu.Lock()
	defer s.rebuildMu.Unlock()
	keys, tenants := v.Keys(), v.Tenants()
	lv := &limitsView{keys: make(map[string]registry.Limits, len(keys)), tenants: make(map[string]registry.Limits, len(tenants))}
	for _, k := range keys {
		lv.keys[k.ID] = k.Limits
	}
	for _, t := range tenants {
		lv.tenants[t.ID] = t.Limits
	}
	s.limits.Store(lv)
}

// newLedger is an empty ledger with the configured dedup horizon.
func (s *Service) newLedger() *ledger.Ledger {
	return ledger.New(ledger.WithDedupHorizon(s.cfg.DedupHorizon))
}

// loadSnapshot replaces the ledger with the newest snapshot, if any.
func (s *Service) loadSnapshot(ctx context.Context) error {
	b, err := s.obs.GetBytes(ctx, s.cfg.SnapshotObject)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		s.log.Info("no ledger snapshot; folding the USAGE stream from its start")
		return nil
	}
	if err != nil {
		return fmt.Errorf("usage: load snapshot: %w", err)
	}
	l := s.newLedger()
	if err := l.UnmarshalJSON(b); err != nil { // not json.Unmarshal, which would scan it once more
		return fmt.Errorf("usage: load snapshot: %w", err)
	}
	s.mu.Lock()
	s.led = l
	s.mu.Unlock()
	s.m.dedupIDs.Set(float64(l.Seen()))
	s.snapSeq = l.LastSeq()
	s.m.foldedSeq.Set(float64(l.LastSeq()))
	s.log.Info("ledger snapshot loaded", "last_seq", l.LastSeq(), "buckets", l.Len(), "seen_ids", l.Seen(), "bytes", len(b))
	return nil
}

// snapshot settles everything folded so far, then saves the ledger. A
// snapshot never gets ahead of settlement: replaying from it re-settles
// what might not have been settled, and Settle skips what was.
func (s *Service) snapshot(ctx context.Context) error {
	start := time.Now()
	if err := s.flushSettlement(ctx); err != nil {
		return err
	}
	if s.settler != nil {
		if err := s.settler.barrier(ctx); err != nil {
			return fmt.Errorf("usage: settlement barrier: %w", err)
		}
	}
	// The folder is the only writer and it is here: no lock needed to read.
	seq := s.led.LastSeq()
	if seq == s.snapSeq {
		s.sinceSnap, s.lastSnap = 0, time.Now()
		return nil
	}
	b, err := s.led.MarshalJSON() // not json.Marshal, which would copy and re-scan it
	if err != nil {
		return fmt.Errorf("usage: encode snapshot: %w", err)
	}
	if _, err := s.obs.PutBytes(ctx, s.cfg.SnapshotObject, b); err != nil {
		s.m.snapshotErr.Inc()
		return fmt.Errorf("usage: save snapshot: %w", err)
	}
	s.snapSeq, s.sinceSnap, s.lastSnap = seq, 0, time.Now()
	s.m.snapshotDur.Observe(time.Since(start).Seconds())
	s.m.snapshotB.Set(float64(len(b)))
	s.log.Debug("ledger snapshot saved", "last_seq", seq, "bytes", len(b), "took", time.Since(start))
	return nil
}

// flushSettlement hands the pending settlements to the settler.
func (s *Service) flushSettlement(ctx context.Context) error {
	if s.settler == nil || s.pending == nil || s.pending.events == 0 {
		return nil
	}
	if err := s.settler.submit(ctx, s.pending); err != nil {
		return err // kept: the final flush retries it
	}
	s.pending = nil
	return nil
}

// fold reads the USAGE stream in order from the ledger's last sequence +1
// until ctx ends.
func (s *Service) fold(ctx context.Context) error {
	s.lastSnap = time.Now()
	for ctx.Err() == nil {
		err := s.foldOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("usage folder restarting", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	return nil
}

func (s *Service) foldOnce(ctx context.Context) error {
	cc := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if seq := s.led.LastSeq(); seq > 0 {
		cc = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq + 1}
	}
	cons, err := s.deps.JS.OrderedConsumer(ctx, events.StreamUsage, cc)
	if err != nil {
		return fmt.Errorf("ordered consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(s.cfg.FetchBatch))
	if err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	defer it.Stop()
	idle := min(defaultIdleWait, s.cfg.SettleInterval)
	lastMsg := time.Now()
	for {
		msg, err := it.Next(jetstream.NextMaxWait(idle))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, nats.ErrTimeout) {
				if err := s.housekeeping(ctx, true); err != nil {
					return err
				}
				if time.Since(lastMsg) >= foldStallCheck {
					lastMsg = time.Now()
					if err := s.checkBehind(ctx); err != nil {
						return err
					}
				}
				continue
			}
			return err
		}
		lastMsg = time.Now()
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		s.foldMsg(meta.Sequence.Stream, msg.Headers(), msg.Data())
		s.m.lag.Set(float64(meta.NumPending))
		if err := s.housekeeping(ctx, false); err != nil {
			return err
		}
	}
}

// foldStallCheck is how long the folder waits without a message before it
// asks the stream whether it is behind: an ordered consumer whose stream
// lost its leader (a NATS node killed) can stay silent while the stream
// grows on its new leader.
const foldStallCheck = 5 * time.Second

// checkBehind is an error when the USAGE stream holds messages past the
// ledger's last sequence, so that the folder makes a new consumer from
// there.
func (s *Service) checkBehind(ctx context.Context) error {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := s.deps.JS.Stream(ictx, events.StreamUsage)
	if err != nil {
		return nil // no answer (no leader yet): ask again later
	}
	s.mu.Lock()
	last := s.led.LastSeq()
	s.mu.Unlock()
	if tail := st.CachedInfo().State.LastSeq; tail > last {
		return fmt.Errorf("the fold is silent at sequence %d while USAGE holds %d: a new consumer", last, tail)
	}
	return nil
}

// foldMsg folds one stream message.
func (s *Service) foldMsg(seq uint64, h nats.Header, data []byte) {
	id, ev, kind, err := s.dec.decode(h, data)
	pb := s.prices.Load()
	s.mu.Lock()
	var applied bool
	var cost int64
	beyond := s.led.BeyondHorizon()
	switch kind {
	case decodedEvent:
		applied, cost = s.led.ApplyCost(seq, id, ev, pb)
	default:
		s.led.SetLastSeq(seq)
	}
	beyond = s.led.BeyondHorizon() - beyond
	seen := s.led.Seen()
	s.mu.Unlock()
	if beyond > 0 {
		s.m.beyondHorizon.Add(float64(beyond))
	}
	s.m.dedupIDs.Set(float64(seen))
	switch {
	case kind == decodedIgnored:
		s.m.ignored.Inc()
	case kind == decodedInvalid:
		s.m.invalid.Inc()
		s.log.Warn("invalid usage event skipped", "seq", seq, "id", id, "err", err)
	case applied:
		s.m.applied.Inc()
		s.m.spent(ev, cost)
		s.planSettlement(seq, ev, cost)
	default:
		s.m.duplicate.Inc()
	}
	s.sinceSnap++
	s.m.foldedSeq.Set(float64(seq))
	if s.foldedHook != nil {
		s.foldedHook(seq)
	}
}

func (s *Service) planSettlement(seq uint64, ev events.Event, cost int64) {
	if s.settler == nil {
		return
	}
	var who spender
	var res []events.Reservation
	switch e := ev.(type) {
	case *events.UsageRecordedV3:
		who, res = requestSpender(&e.UsageRecordedV1), e.Reservations
	case *events.UsageRecordedV2:
		who, res = requestSpender(&e.UsageRecordedV1), e.Reservations
	case *events.UsageRecordedV1:
		if !s.cfg.SettleV1 {
			return
		}
		who = requestSpender(e)
	case *events.SandboxUsageV1:
		// Charged only when the operators set a sandbox price; nothing is
		// reserved for an exec, so nothing else is released.
		if cost == 0 {
			return
		}
		who = spender{tenant: e.Tenant, keyID: e.KeyID, requestID: e.ID, at: ledger.SandboxTime(e), finished: e.FinishedAt}
	default:
		return
	}
	if s.pending == nil {
		s.pending = newSettleBatch()
		s.pendingSince = time.Now()
	}
	s.pending.plan(seq, who, res, cost, s.limits.Load())
}

// housekeeping hands settlements over and saves snapshots when due.
func (s *Service) housekeeping(ctx context.Context, idle bool) error {
	if s.pending != nil && (idle || s.pending.events >= s.cfg.SettleBatch || time.Since(s.pendingSince) >= s.cfg.SettleInterval) {
		if err := s.flushSettlement(ctx); err != nil {
			return err
		}
	}
	if s.sinceSnap >= s.cfg.SnapshotEvery || (s.sinceSnap > 0 && time.Since(s.lastSnap) >= s.cfg.SnapshotInterval) {
		if err := s.snapshot(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("ledger snapshot failed; retrying at the next interval", "err", err)
			s.lastSnap = time.Now()
		}
	}
	return nil
}
