//go:build unix && !linux

package engineproc

import "syscall"

func setPdeathsig(*syscall.SysProcAttr) {}
