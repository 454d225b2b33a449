package netguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRefusedIP(t *testing.T) {
	for _, tc := range []struct {
		ip      string
		refused bool
	}{
		{"169.254.169.254", true}, {"169.254.0.1", true}, {"fe80::1", true}, {"fd00:ec2::254", true},
		{"100.100.100.200", true}, {"0.0.0.0", true}, {"::", true}, {"224.0.0.1", true}, {"ff02::1", true}, {"::ffff:169.254.169.254", true},
		{"127.0.0.1", false}, {"10.0.0.5", false}, {"192.168.1.10", false}, {"8.8.8.8", false}, {"2001:db8::1", false},
	} {
		if got := RefusedIP(net.ParseIP(tc.ip)); got != tc.refused {
			t.Errorf("RefusedIP(%s) = %v, want %v", tc.ip, got, tc.refused)
		}
	}
}

func TestTransportRefusesTheMetadataAddressAndDialsOthers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	c := &http.Client{Transport: Transport()}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatalf("a loopback server: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if _, err := Dialer(0).DialContext(context.Background(), "tcp", "169.254.169.254:80"); !errors.Is(err, ErrRefused) {
		t.Fatalf("dialling the metadata address: %v, want ErrRefused", err)
	}
	if _, err := Dialer(0).DialContext(context.Background(), "tcp", "[fd00:ec2::254]:80"); !errors.Is(err, ErrRefused) {
		t.Fatalf("dialling AWS's IPv6 metadata address: %v, want ErrRefused", err)
	}
}
