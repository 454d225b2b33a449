// Package runtime runs agent code in gVisor (runsc) sandboxes: one
// sandbox per container, each with a resident Python interpreter and a
// resident Bash shell, so an exec is a message to a running process rather
// than a container start.
//
// Isolation model (details in the comments of bundle.go and proxy.go):
//
//   - Each sandbox is a runsc (gVisor) container on the ptrace platform: the
//     code talks to gVisor's user-space kernel, never to the host kernel.
//   - The root file system is an empty directory made read-only; the host's
//     /usr is bind-mounted read-only, /mnt/data and /tmp are size-capped
//     tmpfs inside gVisor (a full disk is ENOSPC, never a full host disk).
//   - The process runs as uid/gid 1000 with no capabilities, no new
//     privileges and an environment of PATH, HOME and LANG only: nothing of
//     the host's environment or credentials enters the sandbox.
//   - Memory and CPU are limited by the sandbox's host cgroup (runsc creates
//     it at /aiforge-sandbox/<id>; going over memory gets the sandbox
//     OOM-killed, reported as CodeMemoryLimit). Inside, RLIMIT_AS (3/4 of
//     the memory limit) usually turns a memory bomb into a clean
//     MemoryError first; RLIMIT_NPROC (Config.Pids, set by the agent inside
//     gVisor) makes a fork bomb fail with EAGAIN while the sandbox keeps
//     answering (the host pids limit is only a loose backstop: reaching it
//     crashes the sandbox, never the host), and the agent, the sandbox's
//     init, reaps the orphans the shell's processes leave, so once a flood
//     is killed its slots are free again; RLIMIT_CPU per exec (9/10 of the
//     exec's timeout) ends a busy loop with CodeCPULimit and keeps the
//     sandbox's state; the wall-clock timeout is enforced by the host, which
//     kills the whole sandbox (CodeExecTimeout).
//   - Output goes to pipes drained by the agent and is capped on both sides
//     (MaxOutputBytes per stream, the rest read and discarded), so neither
//     the sandbox's disk nor the host's memory fills.
//   - The network is --network=none: only the sandbox's own loopback. An
//     allow-list sandbox reaches the outside only through a host-side HTTP
//     proxy that checks the name against the allow-list and refuses every
//     loopback, link-local, private, CGNAT, multicast and unspecified
//     address after resolving, and every NATS port.
//   - The agent inside speaks JSON lines on a pipe; the host treats
//     everything it says as untrusted: every line is bounded and validated.
//   - Files are read and written by the agent inside the sandbox (never by
//     the host in sandbox-controlled directories), refusing ".." and
//     symbolic links out of /mnt/data.
//
// A warm Pool keeps started sandboxes per class; a sandbox handed out by
// the pool belongs to its caller for good and is never reused by another
// tenant.
package runtime
