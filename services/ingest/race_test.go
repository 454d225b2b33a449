//go:build race

package ingest

// raceEnabled: the race detector slows parsing several times over.
const raceEnabled = true
