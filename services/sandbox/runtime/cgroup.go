package runtime

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cgroupStats reads a sandbox's host cgroup (runsc creates it at
// linux.cgroupsPath and removes it when the sandbox ends): cgroup v1
// (memory, cpuacct controllers) or v2 (unified). Every read is best effort:
// 0 when the file is missing.
type cgroupStats struct {
	v1Memory, v1CPU, v1Pids string // v1 directories, or ""
	v2                      string // v2 directory, or ""
}

const cgroupFS = "/sys/fs/cgroup"

func newCgroupStats(id string) cgroupStats {
	rel := filepath.Join(cgroupRoot, id)
	if _, err := os.Stat(filepath.Join(cgroupFS, "memory")); err == nil {
		return cgroupStats{v1Memory: filepath.Join(cgroupFS, "memory", rel), v1CPU: filepath.Join(cgroupFS, "cpuacct", rel),
			v1Pids: filepath.Join(cgroupFS, "pids", rel)}
	}
	return cgroupStats{v2: filepath.Join(cgroupFS, rel)}
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// resetPeak starts a new peak measurement (v1 only; v2's memory.peak
// counts from the start).
func (c cgroupStats) resetPeak() {
	if c.v1Memory != "" {
		_ = os.WriteFile(filepath.Join(c.v1Memory, "memory.max_usage_in_bytes"), []byte("0"), 0)
	}
}

// memoryPeak is the peak memory use in bytes.
func (c cgroupStats) memoryPeak() int64 {
	if c.v1Memory != "" {
		return readInt(filepath.Join(c.v1Memory, "memory.max_usage_in_bytes"))
	}
	return readInt(filepath.Join(c.v2, "memory.peak"))
}

// memoryFailures counts the times the memory limit was hit (v1 failcnt,
// v2 the "max" and "oom_kill" events).
func (c cgroupStats) memoryFailures() int64 {
	if c.v1Memory != "" {
		return readInt(filepath.Join(c.v1Memory, "memory.failcnt"))
	}
	b, err := os.ReadFile(filepath.Join(c.v2, "memory.events"))
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && (f[0] == "oom_kill" || f[0] == "oom") {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			n += v
		}
	}
	return n
}

// pidsLimitHits counts the host tasks refused because the sandbox's pids
// limit was reached ("max" in pids.events, v1 and v2): gVisor's own
// threads count there, so a process flood that gets past RLIMIT_NPROC
// inside ends the sandbox here.
func (c cgroupStats) pidsLimitHits() int64 {
	dir := c.v2
	if c.v1Pids != "" {
		dir = c.v1Pids
	}
	b, err := os.ReadFile(filepath.Join(dir, "pids.events"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "max" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// cpuNanos is the CPU time used by the whole sandbox (gVisor included),
// the figure billed: the agent's own account could be forged by the code.
func (c cgroupStats) cpuNanos() int64 {
	if c.v1CPU != "" {
		return readInt(filepath.Join(c.v1CPU, "cpuacct.usage"))
	}
	b, err := os.ReadFile(filepath.Join(c.v2, "cpu.stat"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "usage_usec" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v * 1000
		}
	}
	return 0
}

// removeCgroups removes what is left of a sandbox's host cgroups: runsc
// removes them when it ends normally, not when the sandbox was OOM-killed.
// Only empty cgroups can be removed, so this never touches a live one; the
// last gVisor processes may take a moment to leave, hence a few tries in
// the background.
func removeCgroups(id string) {
	try := func() bool {
		dirs, _ := filepath.Glob(filepath.Join(cgroupFS, "*", cgroupRoot, id))
		dirs = append(dirs, filepath.Join(cgroupFS, cgroupRoot, id))
		left := false
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				left = true
			}
		}
		return !left
	}
	if try() {
		return
	}
	go func() {
		for range 25 {
			time.Sleep(200 * time.Millisecond)
			if try() {
				return
			}
		}
	}()
}
