package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                int64
	}{
		{"v2 limit", "memory.max", "536870912\n", 536870912},
		{"v2 no limit", "memory.max", "max\n", 0},
		{"v1 limit", "memory/memory.limit_in_bytes", "268435456\n", 268435456},
		{"v1 no limit", "memory/memory.limit_in_bytes", "9223372036854771712\n", 0},
		{"no cgroup", "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != "" {
				p := filepath.Join(root, tc.file)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := cgroupMemoryLimit(root); got != tc.want {
				t.Fatalf("cgroupMemoryLimit = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestDefaultMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "memory.max"), []byte("1000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOMEMLIMIT", "")
	if got := defaultMemoryLimit(root); got != 900000000 {
		t.Fatalf("limit %d, want 90%% of the cgroup's", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 900000000 {
		t.Fatalf("runtime limit %d", got)
	}
	t.Setenv("GOMEMLIMIT", "2GiB")
	debug.SetMemoryLimit(prev)
	if got := defaultMemoryLimit(root); got != 0 {
		t.Fatalf("GOMEMLIMIT set: limit %d, want the operator's left alone", got)
	}
}
