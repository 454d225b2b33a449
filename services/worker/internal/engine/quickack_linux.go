//go:build linux

package engine

import (
	"net"
	"sync/atomic"
	"syscall"
)

// quickAckSupported reports whether QuickAck does anything here.
const quickAckSupported = true

type qaConn struct {
	net.Conn
	rc syscall.RawConn
	// wrote is set by a write and cleared by the first read after it: the
	// reads of an answer's first bytes are the ones quick ACKs are for
	// (later ones ACK at once by themselves while the connection sends
	// nothing), and a setsockopt per read of a long stream would cost.
	wrote atomic.Bool
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
	if !c.wrote.Load() {
		return c.Conn.Read(p)
	}
	c.quickAck()
	n, err := c.Conn.Read(p)
	if n > 0 && c.wrote.Swap(false) {
		c.quickAck() // push out an ACK the kernel still delays
	}
	return n, err
}

func (c *qaConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wrote.Store(true)
	c.quickAck() // a write is what puts the connection in delayed-ACK (ping-pong) mode
	return n, err
}
