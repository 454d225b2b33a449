// Package sandbox is the sandbox service: agent code containers (OpenAI's
// Containers API and aiforge's exec extension) run in gVisor sandboxes.
// See pkg/sandbox for the bus contract and runtime for the isolation.
//
// Calls come over core NATS from the edge, the tenant and key in the
// bridge.HdrTenant and bridge.HdrKeyID headers (a call without a tenant is
// refused 400). Creates and lists go to any replica (queue group
// events.SandboxQueue on events.SandboxRequest(op)); the replica that
// creates a container subscribes, without a queue group, to every
// operation on it (events.SandboxContainer(id, op) for every op) until it
// ends. Every answer has header HdrStatus: "200" with the JSON of a
// pkg/sandbox object, or the error's status with an ErrorBody (400
// invalid request, with param; 400 container_expired, as OpenAI's
// "Container is expired."; 404 container_not_found, also for another
// tenant's container; 404 container_file_not_found; 409 sandbox_busy; 413
// file_too_large; 429 sandbox_capacity_exceeded, for the replica's
// sandboxes and for a tenant's containers on the replica; 503
// sandbox_unavailable, when runsc cannot run or the replica stops).
//
// A container:
//
//   - is created from the warm pool of its class (memory limit, network
//     type), with its file_ids copied in at /mnt/data/<file name>;
//   - runs one exec or file copy at a time (others 409); an exec that
//     kills its sandbox (timeout, memory) is answered with its error, and
//     the next call gets a fresh sandbox: the files and interpreter state
//     are lost, as the error message says;
//   - lists the files code writes under /mnt/data (source assistant),
//     listed after each exec, the new and changed ones in the result;
//   - ends when deleted (its record is removed: a later call is not
//     found), when idle past expires_after (status expired, kept in
//     events.BucketContainers so a list shows it and the edge can answer
//     a call on it container_expired), or when its replica stops (marked
//     expired; a replica that restarts marks its own records still
//     running expired).
//
// Each exec publishes an events.SandboxUsageV1 of kind exec (gb_seconds
// is the memory limit in GiB times the exec's wall seconds), and each
// ended container one of kind container for its whole life (created to
// ended, the same product; CPU the sum of its execs').
package sandbox
