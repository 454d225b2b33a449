// Package fakeengine is a test tool: a stand-in engine process for the
// tests of engine supervision. A test binary calls Main from TestMain; run
// again by a supervisor with FakeEnv set, it serves the engine simulator
// (pkg/enginesim) as llama-server would (/health, /metrics, the OpenAI
// API under the --alias or --model-id name, on --port or OLLAMA_HOST's
// port) and never returns.
// It is never offered as an engine.
package fakeengine

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

// Environment of the fake engine.
const (
	// FakeEnv set to "1" makes Main serve.
	FakeEnv = "AIFORGE_FAKE_ENGINE"
	// ExitEnv set makes it print the value and exit 3 at once (a crash
	// at start).
	ExitEnv = "AIFORGE_FAKE_ENGINE_EXIT"
	// IgnoreTermEnv set to "1" makes it ignore SIGTERM (only SIGKILL stops
	// it).
	IgnoreTermEnv = "AIFORGE_FAKE_ENGINE_IGNORE_TERM"
	// ArgsFileEnv names a file the arguments are written to, one a line.
	ArgsFileEnv = "AIFORGE_FAKE_ENGINE_ARGS_FILE"
	// ExitFileEnv names a file: when it exists at start, the engine
	// prints its content and exits 3 (a start that fails after earlier
	// ones did not).
	ExitFileEnv = "AIFORGE_FAKE_ENGINE_EXIT_FILE"
	// HoldFileEnv names a file: while it exists, /health answers 503 (an
	// engine still loading its model).
	HoldFileEnv = "AIFORGE_FAKE_ENGINE_HOLD_FILE"
)

// Main serves when FakeEnv is "1"; otherwise it returns at once.
func Main() {
	if os.Getenv(FakeEnv) != "1" {
		return
	}
	os.Exit(serve(os.Args[1:]))
}

func serve(args []string) int {
	if f := os.Getenv(ArgsFileEnv); f != "" {
		_ = os.WriteFile(f, []byte(strings.Join(args, "\n")), 0o600)
	}
	if msg := os.Getenv(ExitEnv); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		return 3
	}
	if f := os.Getenv(ExitFileEnv); f != "" {
		if msg, err := os.ReadFile(f); err == nil {
			fmt.Fprintln(os.Stderr, strings.TrimSpace(string(msg)))
			return 3
		}
	}
	hold := os.Getenv(HoldFileEnv)
	if os.Getenv(IgnoreTermEnv) == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	port, name := "", "fake"
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--port":
			port = args[i+1]
		case "--alias", "--model-id":
			name = args[i+1]
		}
	}
	if h := os.Getenv("OLLAMA_HOST"); port == "" && h != "" {
		_, port, _ = net.SplitHostPort(h)
	}
	if _, err := strconv.Atoi(port); err != nil {
		fmt.Fprintln(os.Stderr, "fake engine: no --port")
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake engine:", err)
		return 1
	}
	sim := enginesim.New(enginesim.Config{Models: []string{name}, APIKey: os.Getenv("LLAMA_API_KEY"), OpenModels: true})
	var served atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# HELP llamacpp:requests_served_total Requests served.\n# TYPE llamacpp:requests_served_total counter\nllamacpp:requests_served_total %d\n", served.Load())
		fmt.Fprintf(w, "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.25\n")
		fmt.Fprintf(w, "# TYPE llamacpp:labelled gauge\nllamacpp:labelled{slot=\"0\"} 1\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if hold != "" && r.URL.Path == "/health" {
			if _, err := os.Stat(hold); err == nil {
				http.Error(w, `{"error":{"message":"Loading model","code":503}}`, http.StatusServiceUnavailable)
				return
			}
		}
		if strings.HasPrefix(r.URL.Path, "/v1/chat") || strings.HasPrefix(r.URL.Path, "/v1/completions") {
			served.Add(1)
		}
		sim.ServeHTTP(w, r)
	})
	fmt.Fprintln(os.Stderr, "fake engine: serving", name, "on", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	_ = srv.Serve(ln)
	return 0
}
