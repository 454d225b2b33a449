package runtime

import "context"

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
// never reused across tenants.
type Pool struct{}

// NewPool makes a pool over rt; Run fills it.
func NewPool(rt *Runtime, cfg PoolConfig) (*Pool, error) {
	return nil, errNotImplemented
}

// Run keeps the pool filled until ctx ends, then closes the warm ones.
func (p *Pool) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Get hands over a sandbox for spec: a warm one of its class when one is
// ready (warm true), else a cold Start.
func (p *Pool) Get(ctx context.Context, spec Spec) (sb *Sandbox, warm bool, err error) {
	return nil, false, errNotImplemented
}

// Release closes a sandbox the caller is done with and frees its slot in
// MaxSandboxes.
func (p *Pool) Release(sb *Sandbox) {}

// Stats is a snapshot of the pool.
func (p *Pool) Stats() PoolStats { return PoolStats{} }
