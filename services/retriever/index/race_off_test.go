//go:build !race

package index

// raceEnabled scales the always-on measurements down: the race detector slows graph code ten-fold.
const raceEnabled = false
