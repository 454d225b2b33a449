package ingest

import (
	"os"
	"syscall"
)

// setLimits applies the parser child's address-space and CPU-time limits to
// the calling process.
func setLimits(memBytes, cpuSeconds int64) error {
	if memBytes > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: uint64(memBytes), Max: uint64(memBytes)}); err != nil {
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
