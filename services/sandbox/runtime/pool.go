package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

// PoolConfig configures a warm pool.
type PoolConfig struct {
	// Sizes are the warm sandboxes kept per class. Default: {1 GiB,
	// disabled}: 2.
	Sizes map[Class]int
	// MaxSandboxes is the total of live sandboxes this runtime may run
	// (pool + handed out); default 32; beyond: *Error{CodeSandboxCapacity}.
	MaxSandboxes int
}

// Class is a kind of interchangeable sandbox: memory limit and network
// type (sandbox.NetworkDisabled or NetworkAllowlist).
type Class struct {
	MemoryBytes int64
	Network     string
}

// PoolStats is a snapshot of a pool.
type PoolStats struct {
	// Warm is the number of ready sandboxes per class.
	Warm map[Class]int
	// Live is the number of live sandboxes (warm + handed out + starting).
	Live int
	// Started counts every sandbox started; ColdStarts those started for a
	// Get that found none warm.
	Started, ColdStarts int64
}

// Pool is a warm pool: pre-started sandboxes per class, refilled in the
// background. A sandbox taken from the pool belongs to the caller from then
// on (it is never given back: the caller Releases it), so a sandbox is
// never reused across tenants. An allow-list sandbox is warmed with an
// empty allow-list; Get sets the caller's.
type Pool struct {
	rt  *Runtime
	cfg PoolConfig

	mu       sync.Mutex
	warm     map[Class][]*Sandbox
	starting map[Class]int
	mine     map[*Sandbox]bool // live sandboxes counted in MaxSandboxes
	live     int               // len(mine) + starts in flight
	stats    PoolStats
	refill   chan struct{}
}

// NewPool makes a pool over rt; Run fills it.
func NewPool(rt *Runtime, cfg PoolConfig) (*Pool, error) {
	if rt == nil {
		return nil, errors.New("sandbox pool: no runtime")
	}
	if cfg.Sizes == nil {
		cfg.Sizes = map[Class]int{{MemoryBytes: 1 << 30, Network: sandbox.NetworkDisabled}: 2}
	}
	if cfg.MaxSandboxes == 0 {
		cfg.MaxSandboxes = 32
	}
	var errs []error
	total := 0
	for c, n := range cfg.Sizes {
		if c.MemoryBytes < 64<<20 || (c.Network != sandbox.NetworkDisabled && c.Network != sandbox.NetworkAllowlist) || n < 0 {
			errs = append(errs, fmt.Errorf("sandbox pool: bad class %+v: %d", c, n))
		}
		total += n
	}
	if cfg.MaxSandboxes < 1 {
		errs = append(errs, errors.New("sandbox pool: MaxSandboxes must be positive"))
	}
	if total > cfg.MaxSandboxes {
		errs = append(errs, fmt.Errorf("sandbox pool: %d warm sandboxes over MaxSandboxes %d", total, cfg.MaxSandboxes))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Pool{
		rt:       rt,
		cfg:      cfg,
		warm:     map[Class][]*Sandbox{},
		starting: map[Class]int{},
		mine:     map[*Sandbox]bool{},
		refill:   make(chan struct{}, 1),
	}, nil
}

func (p *Pool) kick() {
	select {
	case p.refill <- struct{}{}:
	default:
	}
}

// Run keeps the pool filled until ctx ends, then closes the warm ones.
// A failed start is retried with a growing pause (up to 30 s).
func (p *Pool) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	backoff := time.Duration(0)
	p.kick()
	for {
		var retry <-chan time.Time
		if backoff > 0 {
			retry = time.After(backoff)
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			p.drain()
			return nil
		case <-p.refill:
		case <-retry:
		}
		failed := make(chan bool, 16)
		n := 0
		for c, want := range p.cfg.Sizes {
			for p.reserveWarm(c, want) {
				n++
				wg.Add(1)
				go func() {
					defer wg.Done()
					failed <- !p.fill(ctx, c)
				}()
			}
		}
		// wait for this round, so a failing runsc is not hammered
		anyFailed := false
		for range n {
			if <-failed {
				anyFailed = true
			}
		}
		if anyFailed && ctx.Err() == nil {
			backoff = min(max(2*backoff, 500*time.Millisecond), 30*time.Second)
		} else {
			backoff = 0
		}
	}
}

// reserveWarm takes a slot for one more warm sandbox of c when the class
// is short of want and the cap allows.
func (p *Pool) reserveWarm(c Class, want int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.warm[c])+p.starting[c] >= want || p.live >= p.cfg.MaxSandboxes {
		return false
	}
	p.starting[c]++
	p.live++
	return true
}

func (p *Pool) fill(ctx context.Context, c Class) bool {
	sb, err := p.rt.Start(ctx, Spec{MemoryBytes: c.MemoryBytes, Network: sandbox.NetworkPolicy{Type: c.Network}, Labels: map[string]string{"pool": "warm"}})
	p.mu.Lock()
	p.starting[c]--
	if err != nil {
		p.live--
		p.mu.Unlock()
		if ctx.Err() == nil {
			p.rt.log.Warn("sandbox pool: warm start failed", "class", c, "err", err)
		}
		return false
	}
	p.stats.Started++
	p.mine[sb] = true
	p.warm[c] = append(p.warm[c], sb)
	p.mu.Unlock()
	return true
}

func (p *Pool) drain() {
	p.mu.Lock()
	var all []*Sandbox
	for c, l := range p.warm {
		all = append(all, l...)
		delete(p.warm, c)
	}
	p.mu.Unlock()
	for _, sb := range all {
		p.Release(sb)
	}
}

// Get hands over a sandbox for spec: a warm one of its class when one is
// ready (warm true), else a cold Start, closing a warm sandbox of another
// class when the cap needs the room (*Error CodeSandboxCapacity when
// MaxSandboxes are live and none is warm).
func (p *Pool) Get(ctx context.Context, spec Spec) (sb *Sandbox, warm bool, err error) {
	if spec.MemoryBytes == 0 {
		spec.MemoryBytes = 1 << 30
	}
	if spec.Network.Type == "" {
		spec.Network.Type = sandbox.NetworkDisabled
	}
	c := Class{MemoryBytes: spec.MemoryBytes, Network: spec.Network.Type}
	for {
		p.mu.Lock()
		l := p.warm[c]
		if len(l) == 0 {
			break
		}
		sb = l[0]
		p.warm[c] = l[1:]
		p.mu.Unlock()
		p.kick()
		if sb.Alive() {
			p.rt.log.Debug("sandbox handed out warm", "sandbox", sb.ID(), "labels", spec.Labels)
			sb.SetAllowedDomains(spec.Network.AllowedDomains)
			return sb, true, nil
		}
		p.Release(sb) // died while warm
	}
	// cold: p.mu is held. At the cap, a warm sandbox of another class is
	// spare capacity: it makes room.
	var evict *Sandbox
	if p.live >= p.cfg.MaxSandboxes {
		for oc, l := range p.warm {
			if len(l) > 0 {
				evict = l[len(l)-1]
				p.warm[oc] = l[:len(l)-1]
				delete(p.mine, evict)
				p.live--
				break
			}
		}
	}
	if p.live >= p.cfg.MaxSandboxes {
		p.mu.Unlock()
		return nil, false, &Error{Code: sandbox.CodeSandboxCapacity, Message: fmt.Sprintf("this replica runs %d sandboxes, its maximum", p.cfg.MaxSandboxes)}
	}
	if evict != nil {
		go evict.Close()
	}
	p.live++
	p.stats.ColdStarts++
	p.mu.Unlock()
	sb, err = p.rt.Start(ctx, spec)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.live--
		return nil, false, err
	}
	p.stats.Started++
	p.mine[sb] = true
	return sb, false, nil
}

// Release closes a sandbox the caller is done with and frees its slot in
// MaxSandboxes. Releasing a sandbox twice, or one of another pool, only
// closes it.
func (p *Pool) Release(sb *Sandbox) {
	if sb == nil {
		return
	}
	_ = sb.Close()
	p.mu.Lock()
	if p.mine[sb] {
		delete(p.mine, sb)
		p.live--
	}
	p.mu.Unlock()
	p.kick()
}

// Stats is a snapshot of the pool.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Live = p.live
	s.Warm = map[Class]int{}
	for c, l := range p.warm {
		s.Warm[c] = len(l)
	}
	return s
}
