package objstoretest

import (
	"os"
	"path/filepath"
	"syscall"
)

// xattrSupported reports whether files in dir take user extended attributes,
// where versitygw's POSIX backend keeps object metadata by default.
func xattrSupported(dir string) bool {
	p := filepath.Join(dir, ".xattr-probe")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return false
	}
	defer func() { _ = os.Remove(p) }()
	return syscall.Setxattr(p, "user.objstoretest", []byte("1"), 0) == nil
}
