//go:build race

package extract_test

// raceEnabled: the race detector slows decompression many times over.
const raceEnabled = true
