package engine

import (
	"context"
	"net"
)

// DialFunc dials a connection (net.Dialer.DialContext).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// QuickAck wraps dial so that every TCP connection it makes ACKs what it
// receives at once (Linux TCP_QUICKACK; elsewhere it is dial unchanged).
//
// Engines such as llama-server write a response's headers and its body in
// two writes with Nagle's algorithm on (no TCP_NODELAY): the body waits
// until the headers are ACKed. On a kept-alive connection Linux delays
// that ACK (up to 40 ms) because the connection looks interactive, so
// every non-streamed call paid the delay. TCP_QUICKACK is not sticky: a
// write puts the connection back in delayed-ACK (ping-pong) mode, so it is
// set after every write, and again around the first read after a write
// (the answer's headers; after a read it pushes out an ACK still pending).
// Later reads of a stream need none: the connection sends nothing then.
func QuickAck(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return quickAckConn(c), nil
	}
}
