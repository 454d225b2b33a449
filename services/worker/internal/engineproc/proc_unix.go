//go:build unix

package engineproc

import (
	"os/exec"
	"syscall"
)

// supported reports whether engines can be supervised here.
const supported = true

// prepare puts the engine in its own process group, so that stopping it
// also stops what it started (Ollama's runners), and, on Linux, has it
// killed if the worker dies (pdeathsig).
func prepare(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(cmd.SysProcAttr)
}

// signalGroup signals the engine's process group.
func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }
