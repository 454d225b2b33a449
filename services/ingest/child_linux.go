package ingest

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// setLimits applies the parser child's address-space and CPU-time limits to
// the calling process. The address-space limit is memBytes on top of what
// the process has mapped already (the Go runtime's initial reservations;
// the race detector's shadow memory in a race-enabled test binary).
func setLimits(memBytes, cpuSeconds int64) error {
	if memBytes > 0 {
		limit := uint64(memBytes) + mappedBytes()
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
			return err
		}
	}
	if cpuSeconds > 0 {
		// the soft limit sends SIGXCPU (which kills a Go program); the
		// hard one, a second later, SIGKILL.
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: uint64(cpuSeconds), Max: uint64(cpuSeconds + 1)}); err != nil {
			return err
		}
	}
	return nil
}

// peakRSS is a finished child's peak resident set in bytes.
func peakRSS(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss * 1024 // kilobytes on Linux
	}
	return 0
}

// killedByCPULimit reports a child killed for its CPU time.
func killedByCPULimit(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGXCPU
}

// mappedBytes is the process's current virtual size (/proc/self/statm), 0
// when unknown.
func mappedBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0
	}
	pages, err := strconv.ParseUint(string(f[0]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}
