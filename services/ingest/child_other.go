//go:build !linux

package ingest

import "os"

// setLimits is a no-op outside Linux: the child runs with the time budget
// and the extraction limits only.
func setLimits(memBytes, cpuSeconds int64) error { return nil }

func peakRSS(ps *os.ProcessState) int64 { return 0 }

func killedByCPULimit(ps *os.ProcessState) bool { return false }
