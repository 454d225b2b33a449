// Package fairshare is the batch scheduler's admission: Kueue's fair
// sharing without Kubernetes. It is pure (no bus, no clock of its own):
// the batch service tells it the configuration, the capacity and the
// waiting lines, asks it which tenant queue the next line comes from, and
// reports when a line finishes.
package fairshare
