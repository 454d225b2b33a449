package sandbox

import (
	"context"
	"io"

	api "github.com/aiforge/aiforge/pkg/sandbox"
	"github.com/aiforge/aiforge/services/sandbox/runtime"
)

// box is what the service uses of a *runtime.Sandbox.
type box interface {
	ID() string
	Alive() bool
	SetAllowedDomains(domains []string)
	Exec(ctx context.Context, req api.ExecRequest, out func(api.ExecChunk)) (runtime.Result, error)
	WriteFile(ctx context.Context, path string, r io.Reader, size int64) error
	ReadFile(ctx context.Context, path string, w io.Writer, max int64) (int64, error)
	ListFiles(ctx context.Context) ([]runtime.FileInfo, error)
	RemoveFile(ctx context.Context, path string) error
}

// pool is what the service uses of a *runtime.Pool.
type pool interface {
	Run(ctx context.Context) error
	Get(ctx context.Context, spec runtime.Spec) (box, bool, error)
	Release(b box)
	Stats() runtime.PoolStats
}

// runtimePool adapts *runtime.Pool to pool.
type runtimePool struct{ p *runtime.Pool }

func (r runtimePool) Run(ctx context.Context) error { return r.p.Run(ctx) }

func (r runtimePool) Get(ctx context.Context, spec runtime.Spec) (box, bool, error) {
	sb, warm, err := r.p.Get(ctx, spec)
	if err != nil || sb == nil {
		if err == nil {
			err = &runtime.Error{Code: api.CodeSandboxUnavailable, Message: "the runtime handed out no sandbox"}
		}
		return nil, false, err
	}
	return sb, warm, nil
}

func (r runtimePool) Release(b box) {
	if sb, ok := b.(*runtime.Sandbox); ok && sb != nil {
		r.p.Release(sb)
	}
}

func (r runtimePool) Stats() runtime.PoolStats { return r.p.Stats() }

// unavailablePool answers every Get with the reason the runtime cannot
// run, so a replica without runsc still starts and says why.
type unavailablePool struct{ err error }

func (u unavailablePool) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (u unavailablePool) Get(context.Context, runtime.Spec) (box, bool, error) {
	return nil, false, u.err
}
func (u unavailablePool) Release(box)              {}
func (u unavailablePool) Stats() runtime.PoolStats { return runtime.PoolStats{} }
