//go:build linux

package engine

import (
	"net"
	"syscall"
)

// quickAckSupported reports whether QuickAck does anything here.
const quickAckSupported = true

type qaConn struct {
	net.Conn
	rc syscall.RawConn
}

func quickAckConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	q := &qaConn{Conn: c, rc: rc}
	q.quickAck()
	return q
}

func (c *qaConn) quickAck() {
	_ = c.rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
}

func (c *qaConn) Read(p []byte) (int, error) {
	c.quickAck()
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.quickAck()
	}
	return n, err
}

func (c *qaConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.quickAck()
	return n, err
}
