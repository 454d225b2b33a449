package e2e

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// lockedBuffer is a log sink safe to read while the process writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// busTap records every message published on the bus (KV writes, events,
// inference requests and answers, JetStream API calls) from now on.
type busTap struct {
	mu   sync.Mutex
	msgs []string
}

func tapBus(t *testing.T, nc *nats.Conn) *busTap {
	t.Helper()
	tap := &busTap{}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		tap.mu.Lock()
		defer tap.mu.Unlock()
		tap.msgs = append(tap.msgs, m.Subject+" "+headerText(m.Header)+" "+string(m.Data))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return tap
}

func (b *busTap) find(secret string) (string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.msgs {
		if strings.Contains(m, secret) {
			return m, len(b.msgs)
		}
	}
	return "", len(b.msgs)
}

func headerText(h nats.Header) string {
	var sb strings.Builder
	for k, vs := range h {
		sb.WriteString(k + ":" + strings.Join(vs, ",") + " ")
	}
	return sb.String()
}

// storedMessages reads every message every stream holds (the KV buckets'
// streams with their history, the object stores', the event streams).
func storedMessages(t *testing.T, js jetstream.JetStream, fn func(stream string, seq uint64, text string)) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	n := 0
	for name := range names.Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			continue
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("%s #%d: %v", name, seq, err)
			}
			n++
			fn(name, seq, m.Subject+" "+headerText(m.Header)+" "+string(m.Data))
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// assertNowhere greps, for secret, every message the streams hold, every
// message the tap saw on the bus and the process's whole log; with
// onDisk, also every file of the data dir (the JetStream store included).
func assertNowhere(t *testing.T, s *stack, tap *busTap, logs *lockedBuffer, onDisk string, secret string) {
	t.Helper()
	js, err := jetstream.New(s.app.NATS())
	if err != nil {
		t.Fatal(err)
	}
	kvValues := 0
	stored := storedMessages(t, js, func(stream string, seq uint64, text string) {
		if strings.HasPrefix(stream, "KV_") {
			kvValues++
		}
		if strings.Contains(text, secret) {
			t.Errorf("stream %s message %d holds the engine key: %.300s", stream, seq, text)
		}
	})
	if kvValues == 0 || stored <= kvValues {
		t.Fatalf("read %d stream messages, %d of them KV values: the check would be vacuous", stored, kvValues)
	}
	if m, n := tap.find(secret); m != "" || n == 0 {
		t.Errorf("the bus carried the engine key (of %d messages): %.300s", n, m)
	}
	if l := logs.String(); strings.Contains(l, secret) || !strings.Contains(l, "module started") {
		t.Errorf("the log holds the engine key, or is not the process's log")
	}
	if onDisk == "" {
		return
	}
	files := 0
	err = filepath.WalkDir(onDisk, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return nil // links (the sandboxes' rootfs has bin -> usr/bin), sockets
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the engine key", path)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("data dir walk: %d files, %v", files, err)
	}
}

func captureLogs(logs *lockedBuffer) func(*app.Options) {
	return func(o *app.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// registerWithKey binds a model to an engine with an API key.
func (s *stack) registerWithKey(name, baseURL, upstream, apiKey string) []byte {
	s.t.Helper()
	body := map[string]any{"name": name, "engine": map[string]any{"base_url": baseURL, "model": upstream, "api_key": apiKey}}
	var out map[string]any
	if err := s.admin.Do(context.Background(), "POST", "/admin/v1/models", body, &out); err != nil {
		s.t.Fatal(err)
	}
	b, _ := jsonMarshal(out)
	return b
}

// TestEngineKeyNeverLeaves is issue 10's done-when for secrets at rest: a
// model registered with a distinctive engine key is served through a
// worker (the engine simulator refuses any other key), and the key appears
// in no KV value, no stream message, nothing on the bus, no log line, no
// answer or error, and no file of the data dir.
func TestEngineKeyNeverLeaves(t *testing.T) {
	const engineKey = "sk-engine-e2e-3b1f9c7d-never-anywhere"
	engine, base := sim(t, enginesim.Config{Models: []string{"up"}, APIKey: engineKey})
	logs := &lockedBuffer{}
	dir := t.TempDir()
	s := startStack(t, stackOpts{dataDir: dir, mutate: captureLogs(logs)})
	tap := tapBus(t, s.app.NATS())
	key, _ := s.tenantKey("acme")

	var answers []string
	answers = append(answers, string(s.registerWithKey("chat", base, "up", engineKey)))
	// The same engine with a wrong key: its errors must not show either key.
	const wrongKey = "sk-engine-e2e-wrong-0d5e"
	answers = append(answers, string(s.registerWithKey("chat-wrong", base, "up", wrongKey)))
	s.waitServed(key, "chat")
	for _, body := range []string{
		`{"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`,
		`{"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`,
	} {
		st, b := s.post(key, "/v1/chat/completions", body)
		if st != http.StatusOK {
			t.Fatalf("chat: %d %s", st, b)
		}
		answers = append(answers, string(b))
	}
	if engine.Stats().Completed < 2 {
		t.Fatalf("the engine completed %d requests", engine.Stats().Completed)
	}
	// The engine refuses the wrong key at the worker's identity check: the
	// worker does not serve, and its errors reach the log.
	eventually(t, 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "chat-wrong") && strings.Contains(logs.String(), "401")
	}, "the worker's error about the wrong key")
	st, b := s.post(key, "/v1/chat/completions", `{"model":"chat-wrong","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`)
	if st == http.StatusOK {
		t.Fatalf("served with the wrong engine key: %s", b)
	}
	answers = append(answers, string(b))
	for _, path := range []string{"/admin/v1/models", "/admin/v1/models/chat", "/admin/v1/models/chat-wrong"} {
		var out any
		if err := s.admin.Do(context.Background(), "GET", path, nil, &out); err != nil {
			t.Fatal(err)
		}
		b, _ := jsonMarshal(out)
		answers = append(answers, string(b))
	}
	// Usage events are written after the answer: wait for ours.
	js, err := jetstream.New(s.app.NATS())
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool {
		st, err := js.Stream(context.Background(), events.StreamUsage)
		if err != nil {
			return false
		}
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs >= 2
	}, "usage events")

	runErr := s.stop()
	for _, secret := range []string{engineKey, wrongKey} {
		for _, a := range answers {
			if strings.Contains(a, secret) {
				t.Errorf("an API answer holds an engine key: %.300s", a)
			}
		}
		if runErr != nil && strings.Contains(runErr.Error(), secret) {
			t.Errorf("the process's error holds an engine key: %v", runErr)
		}
	}
	if !strings.Contains(answers[0], `"redacted"`) {
		t.Fatalf("register answer %s", answers[0])
	}
	// The bus and streams are read from a fresh process on the same data
	// dir (the first one is stopped, so its store is complete on disk).
	s2 := startStack(t, stackOpts{dataDir: dir, mutate: captureLogs(logs)})
	for _, secret := range []string{engineKey, wrongKey} {
		assertNowhere(t, s2, tap, logs, dir, secret)
	}
}

// TestLegacyEngineKeyMigrated: a binding stored by a version before keys
// were sealed (api_key in clear in KV) is served as it is, sealed by the
// edge on the next start, its clear revisions purged, and still served.
func TestLegacyEngineKeyMigrated(t *testing.T) {
	const engineKey = "sk-engine-e2e-legacy-77aa01"
	engine, base := sim(t, enginesim.Config{Models: []string{"up"}, APIKey: engineKey})
	logs := &lockedBuffer{}
	dir := t.TempDir()
	s := startStack(t, stackOpts{dataDir: dir, noCleanup: true, mutate: captureLogs(logs)})
	key, _ := s.tenantKey("acme")
	js, err := jetstream.New(s.app.NATS())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	models, err := js.KeyValue(ctx, events.BucketModels)
	if err != nil {
		t.Fatal(err)
	}
	legacy, _ := jsonMarshal(registry.Model{Name: "old", CreatedAt: time.Now().UTC(), Engine: registry.Engine{BaseURL: base, Model: "up", APIKey: engineKey}})
	if _, err := models.Put(ctx, registry.ModelKey("old"), legacy); err != nil {
		t.Fatal(err)
	}
	s.waitServed(key, "old")
	if err := s.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	before := engine.Stats().Completed

	s2 := startStack(t, stackOpts{dataDir: dir, mutate: captureLogs(logs)})
	s2.waitServed(key, "old")
	if engine.Stats().Completed <= before {
		t.Fatal("the migrated binding was not served by the engine")
	}
	if !strings.Contains(logs.String(), "sealed an engine api key stored in clear") {
		t.Fatal("the edge did not report the migration")
	}
	js2, err := jetstream.New(s2.app.NATS())
	if err != nil {
		t.Fatal(err)
	}
	models, err = js2.KeyValue(ctx, events.BucketModels)
	if err != nil {
		t.Fatal(err)
	}
	e, err := models.Get(ctx, registry.ModelKey("old"))
	if err != nil || !strings.Contains(string(e.Value()), `"api_key_sealed"`) {
		t.Fatalf("migrated binding: %v", err)
	}
	// Until the edge has sealed it, the clear value is what every watcher
	// of the bucket reads at start; from then on nothing carries it. Tap
	// the bus now, serve a request and read the bucket afresh (a watch
	// delivers every binding, and history would show a clear revision).
	tap := tapBus(t, s2.app.NATS())
	if st, body := s2.post(key, "/v1/chat/completions", `{"model":"old","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); st != 200 {
		t.Fatalf("chat after the migration: %d %s", st, body)
	}
	w, err := models.WatchAll(ctx, jetstream.IncludeHistory())
	if err != nil {
		t.Fatal(err)
	}
	for e := range w.Updates() {
		if e == nil {
			break
		}
		if strings.Contains(string(e.Value()), engineKey) {
			t.Errorf("revision %d of %s holds the key in clear", e.Revision(), e.Key())
		}
	}
	_ = w.Stop()
	// The stream no longer holds the clear key in any revision (the
	// JetStream files on disk may, until compaction: not checked).
	assertNowhere(t, s2, tap, logs, "", engineKey)
}
