//go:build !unix

package objstore

import "io/fs"

// inode is unavailable here; size and mtime alone identify the file.
func inode(fs.FileInfo) uint64 { return 0 }
