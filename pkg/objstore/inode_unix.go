//go:build unix

package objstore

import (
	"io/fs"
	"syscall"
)

// inode identifies the file behind fi, so a sidecar can name the exact file
// it describes.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino) // not uint64 on every platform
	}
	return 0
}
