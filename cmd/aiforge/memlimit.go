package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultMemoryLimit gives the Go runtime a soft memory limit of 90% of
// the cgroup's memory limit when GOMEMLIMIT is unset, so that near its
// container's limit the process collects harder instead of being killed:
// with GOGC alone the heap may grow to twice what is live, and the runtime
// keeps freed pages until the scavenger returns them. No limit (the cgroup
// says "max", or there is none) leaves the runtime as it is. It returns the
// limit set, 0 for none.
func defaultMemoryLimit(cgroupRoot string) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit := cgroupMemoryLimit(cgroupRoot)
	if limit <= 0 {
		return 0
	}
	limit = limit / 10 * 9
	debug.SetMemoryLimit(limit)
	return limit
}

// cgroupMemoryLimit reads the memory limit of this process's cgroup (v2
// memory.max, else v1 memory.limit_in_bytes) under root ("/sys/fs/cgroup"),
// 0 when there is none.
func cgroupMemoryLimit(root string) int64 {
	for _, f := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		n, err := strconv.ParseInt(v, 10, 64)
		// cgroup v1 says "no limit" with a huge number (page-rounded
		// MaxInt64): anything past 1 PiB is no limit.
		if err != nil || n <= 0 || n >= 1<<50 {
			return 0
		}
		return n
	}
	return 0
}
