package qdrant

import "testing"

func TestUUIDv5(t *testing.T) {
	// RFC 4122 DNS namespace, the well-known vector for "www.example.com".
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	if got, want := uuidV5(dns, "www.example.com"), "2ed6657d-e927-568b-95e1-2665a8aea6a2"; got != want {
		t.Fatalf("uuidV5 = %s, want %s", got, want)
	}
	a, again, b := pointID("a", "x"), pointID("a", "x"), pointID("b", "x")
	if a == b || a != again {
		t.Fatal("point ids must be deterministic and tenant-scoped")
	}
}

func TestAttrPath(t *testing.T) {
	for key, want := range map[string]string{
		"lang":       "attributes.lang",
		"file_name":  "attributes.file_name",
		"dotted.key": `attributes."dotted.key"`,
		"with space": `attributes."with space"`,
		"dash-ed":    `attributes."dash-ed"`,
	} {
		if got := attrPath(key); got != want {
			t.Errorf("attrPath(%q) = %s, want %s", key, got, want)
		}
	}
}
