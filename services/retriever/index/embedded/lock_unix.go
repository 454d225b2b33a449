//go:build unix

package embedded

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

type dirLock struct{ f *os.File }

// lockDir takes an exclusive, non-blocking flock on path (released when the process dies).
func lockDir(path string) (*dirLock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("locked by another process or index: %w", err)
		}
		return nil, err
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	return err
}
