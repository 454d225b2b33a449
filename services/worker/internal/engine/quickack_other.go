//go:build !linux

package engine

import "net"

// quickAckSupported reports whether QuickAck does anything here.
const quickAckSupported = false

func quickAckConn(c net.Conn) net.Conn { return c }
