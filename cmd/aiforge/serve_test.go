package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

const generatedKey = "ak-generated-test-key-0123456789"

// On a terminal the generated admin key is shown once, outside the log.
func TestAdminKeyShownOnTerminal(t *testing.T) {
	var stderr, logs bytes.Buffer
	adminKeyReporter(&stderr, true, slog.New(slog.NewJSONHandler(&logs, nil)))(generatedKey, "/data/admin.key")
	if !strings.Contains(stderr.String(), "export AIFORGE_ADMIN_KEY="+generatedKey) || !strings.Contains(stderr.String(), "/data/admin.key") {
		t.Fatalf("terminal output %q", stderr.String())
	}
	if strings.Contains(logs.String(), generatedKey) {
		t.Fatalf("the log shows the key: %s", logs.String())
	}
}

// Anywhere else stderr is the log stream: only the key file's path is logged.
func TestAdminKeyNotPrintedWithoutTerminal(t *testing.T) {
	var stderr, logs bytes.Buffer
	adminKeyReporter(&stderr, false, slog.New(slog.NewJSONHandler(&logs, nil)))(generatedKey, "/data/admin.key")
	if stderr.Len() != 0 {
		t.Fatalf("printed %q", stderr.String())
	}
	if strings.Contains(logs.String(), generatedKey) || !strings.Contains(logs.String(), `"key_file":"/data/admin.key"`) {
		t.Fatalf("log %s", logs.String())
	}
}
