//go:build race

package embedded

// raceEnabled scales the always-on measurements down: the race detector slows graph code ten-fold.
const raceEnabled = true
