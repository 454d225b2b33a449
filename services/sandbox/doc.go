// Package sandbox is the sandbox service: agent code containers (OpenAI's
// Containers API and aiforge's exec extension) run in gVisor sandboxes.
// See pkg/sandbox for the bus contract and runtime for the isolation.
package sandbox
