//go:build !unix

package engineproc

import (
	"errors"
	"os/exec"
	"syscall"
)

const supported = false

func prepare(*exec.Cmd) {}

func signalGroup(int, syscall.Signal) error {
	return errors.New("engineproc: supervised engines need a unix system")
}
