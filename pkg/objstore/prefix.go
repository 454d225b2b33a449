package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
)

// WithPrefix returns a Store that keeps every key under prefix in s: Put("x")
// writes prefix+"x", List strips the prefix from the keys it yields. Keys are
// validated before they are joined, so no key (such as "../x") can leave the
// prefix. A missing trailing "/" is added. An invalid prefix (empty, or one
// ValidateKey rejects) yields a Store whose every call fails with
// ErrInvalidKey.
func WithPrefix(s Store, prefix string) Store {
	p := &prefixed{inner: s, prefix: prefix}
	if !strings.HasSuffix(p.prefix, "/") {
		p.prefix += "/"
	}
	switch {
	case s == nil:
		p.err = errors.New("objstore: WithPrefix: nil store")
	case prefix == "" || prefix == "/":
		p.err = fmt.Errorf("%w: WithPrefix: empty prefix", ErrInvalidKey)
	default:
		if err := ValidateKey(strings.TrimSuffix(p.prefix, "/")); err != nil {
			p.err = fmt.Errorf("WithPrefix: %w", err)
		}
	}
	return p
}

type prefixed struct {
	inner  Store
	prefix string
	err    error
}

func (p *prefixed) full(key string) (string, error) {
	if p.err != nil {
		return "", p.err
	}
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	return p.prefix + key, nil
}

func (p *prefixed) strip(info Info) Info {
	info.Key = strings.TrimPrefix(info.Key, p.prefix)
	return info
}

func (p *prefixed) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Info, error) {
	full, err := p.full(key)
	if err != nil {
		return Info{}, err
	}
	info, err := p.inner.Put(ctx, full, r, size, contentType)
	if err != nil {
		return Info{}, err
	}
	return p.strip(info), nil
}

func (p *prefixed) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	full, err := p.full(key)
	if err != nil {
		return nil, Info{}, err
	}
	rc, info, err := p.inner.Get(ctx, full)
	if err != nil {
		return nil, Info{}, err
	}
	return rc, p.strip(info), nil
}

func (p *prefixed) Stat(ctx context.Context, key string) (Info, error) {
	full, err := p.full(key)
	if err != nil {
		return Info{}, err
	}
	info, err := p.inner.Stat(ctx, full)
	if err != nil {
		return Info{}, err
	}
	return p.strip(info), nil
}

func (p *prefixed) Delete(ctx context.Context, key string) error {
	full, err := p.full(key)
	if err != nil {
		return err
	}
	return p.inner.Delete(ctx, full)
}

func (p *prefixed) List(ctx context.Context, prefix string) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		if p.err != nil {
			yield(Info{}, p.err)
			return
		}
		if err := ValidatePrefix(prefix); err != nil {
			yield(Info{}, err)
			return
		}
		for info, err := range p.inner.List(ctx, p.prefix+prefix) {
			if err != nil {
				yield(Info{}, err)
				return
			}
			if !strings.HasPrefix(info.Key, p.prefix) {
				continue // cannot happen with a correct inner store
			}
			if !yield(p.strip(info), nil) {
				return
			}
		}
	}
}
