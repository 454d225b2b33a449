//go:build !unix

package embedded

import "os"

type dirLock struct{ f *os.File }

// lockDir only creates the lock file where flock is unavailable: one process per directory is then the
// operator's responsibility.
func lockDir(path string) (*dirLock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
