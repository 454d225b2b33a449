// Package netguard keeps outbound connections that a tenant or an operator
// names (webhook URLs, tenants' S3 endpoints, registries and the blob
// storage they redirect to) away from the addresses they must never reach:
// link-local ones (169.254.0.0/16 and fe80::/10, where the cloud metadata
// services live), the metadata addresses outside them (MetadataAddrs),
// unspecified and multicast ones.
// The check is on the address actually dialled, after name resolution, so a
// DNS name cannot smuggle one in.
package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"syscall"
	"time"
)

// ErrRefused is a dial to a refused address.
var ErrRefused = errors.New("address refused: link-local, metadata, unspecified and multicast addresses are never dialled")

// MetadataHosts are cloud metadata endpoints known by name.
var MetadataHosts = []string{"metadata", "metadata.google.internal", "metadata.goog", "metadata.azure.com", "instance-data", "instance-data.ec2.internal"}

// MetadataAddrs are cloud metadata addresses outside the link-local ranges
// (AWS's IPv6 one, Alibaba Cloud's).
var MetadataAddrs = []netip.Addr{netip.MustParseAddr("fd00:ec2::254"), netip.MustParseAddr("100.100.100.200")}

// RefusedIP reports whether ip must never be dialled.
func RefusedIP(ip net.IP) bool {
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	}
	if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast() {
		return true
	}
	a, ok := netip.AddrFromSlice(ip)
	return ok && slices.Contains(MetadataAddrs, a.Unmap())
}

// Control is a net.Dialer Control function that refuses a refused address.
func Control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || RefusedIP(ip) {
		return fmt.Errorf("%w: %s", ErrRefused, host)
	}
	return nil
}

// Dialer is a net.Dialer with Control set and the given connect timeout.
func Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: Control}
}

// Transport is a clone of http.DefaultTransport (proxy from the environment,
// HTTP/2, its idle and handshake timeouts) whose connections are dialled by
// Dialer(30s).
func Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = Dialer(30 * time.Second).DialContext
	return t
}
