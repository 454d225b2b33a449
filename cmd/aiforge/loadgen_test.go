package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeEdge answers chat (plain and streamed), uploads, vector stores and
// document status like the edge, and fails chat request n when fail(n).
type fakeEdge struct {
	chats atomic.Int64
	mu    sync.Mutex
	files int
	fail  func(n int64) int
}

func (f *fakeEdge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer sk-test" {
		http.Error(w, "no key", http.StatusUnauthorized)
		return
	}
	switch {
	case r.URL.Path == "/v1/chat/completions":
		n := f.chats.Add(1)
		if f.fail != nil {
			if code := f.fail(n); code != 0 {
				http.Error(w, "boom", code)
				return
			}
		}
		var body struct {
			Stream bool `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		if body.Stream {
			fmt.Fprint(w, "data: {\"object\":\"chat.completion.chunk\"}\n\ndata: [DONE]\n\n")
			return
		}
		fmt.Fprint(w, `{"object":"chat.completion"}`)
	case r.URL.Path == "/v1/files":
		if _, _, err := r.FormFile("file"); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.files++
		id := fmt.Sprintf("file-%d", f.files)
		f.mu.Unlock()
		fmt.Fprintf(w, `{"id":%q}`, id)
	case r.URL.Path == "/v1/vector_stores":
		fmt.Fprint(w, `{"id":"vs_1"}`)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/vector_stores/vs_1/files":
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, `{"status":"in_progress"}`)
	case strings.HasPrefix(r.URL.Path, "/v1/vector_stores/vs_1/files/"):
		fmt.Fprint(w, `{"status":"completed"}`)
	default:
		http.NotFound(w, r)
	}
}

// closedURL is an http URL on which nothing listens.
func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

func TestLoadgenRetriesAnEdgeThatIsDownOnTheOther(t *testing.T) {
	edge := &fakeEdge{}
	srv := httptest.NewServer(edge)
	defer srv.Close()
	sum, err := runLoad(context.Background(), loadOptions{
		URLs: []string{closedURL(t), srv.URL}, APIKey: "sk-test", Model: "m", Requests: 20, Concurrency: 4,
		Rate: 1000, StreamEvery: 4, MaxTokens: 1, DocEvery: time.Millisecond, Docs: 3, DocWait: 10 * time.Second,
		Retries: 3, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := sum.Chat
	if c.Sent != 20 || c.Accepted != 20 || c.Completed != 20 || c.Failed != 0 || c.Broken != 0 {
		t.Fatalf("chat = %+v, want 20 sent, accepted and completed", c)
	}
	// Every even request starts on the closed edge and moves on.
	if c.Retried != 10 || c.PerEdge[srv.URL] != 20 {
		t.Fatalf("retried %d, per edge %v: want 10 retried, all 20 on %s", c.Retried, c.PerEdge, srv.URL)
	}
	d := sum.Docs
	if d.VectorStore != "vs_1" || d.Accepted != 3 || d.Completed != 3 || d.Final["completed"] != 3 || len(d.NotCompleted) != 0 {
		t.Fatalf("docs = %+v, want 3 accepted and completed in vs_1", d)
	}
}

func TestLoadgenCountsFailuresByCodeAndStopsWhenInterrupted(t *testing.T) {
	edge := &fakeEdge{fail: func(n int64) int {
		if n%5 == 0 {
			return http.StatusServiceUnavailable
		}
		return 0
	}}
	srv := httptest.NewServer(edge)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *loadSummary)
	go func() {
		sum, err := runLoad(ctx, loadOptions{
			URLs: []string{srv.URL}, APIKey: "sk-test", Model: "m", Requests: 1 << 30, Concurrency: 2,
			Rate: 1000, Retries: 3, Timeout: 5 * time.Second,
		})
		if err != nil {
			t.Error(err)
		}
		done <- sum
	}()
	deadline := time.Now().Add(30 * time.Second)
	for edge.chats.Load() < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("the load generator sent %d chats in 30s, want 50", edge.chats.Load())
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	cancel()
	sum := <-done
	c := sum.Chat
	if c.Sent < 50 || c.Sent != c.Accepted+c.Failed || c.Failed != c.FailedBy["503"] || c.Failed != c.Sent/5 {
		t.Fatalf("chat = %+v: want every 5th of the sent failed with 503 and the rest accepted", c)
	}
	if len(sum.Failures) == 0 || sum.Failures[0].Kind != "503" || !strings.Contains(sum.Failures[0].Info, "boom") {
		t.Fatalf("failures = %+v, want 503s with the body", sum.Failures)
	}
}

func TestLoadgenNoEdgeReachableIsAConnectFailure(t *testing.T) {
	sum, err := runLoad(context.Background(), loadOptions{
		URLs: []string{closedURL(t)}, APIKey: "sk-test", Model: "m", Requests: 2, Concurrency: 1,
		Rate: 1000, Retries: 1, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := sum.Chat; c.Failed != 2 || c.FailedBy["connect"] != 2 || c.Accepted != 0 || c.Retried != 2 {
		t.Fatalf("chat = %+v, want 2 connect failures, each retried", c)
	}
}

func TestWholeChat(t *testing.T) {
	for _, tc := range []struct {
		body   string
		stream bool
		want   bool
	}{
		{`{"object":"chat.completion"}`, false, true},
		{`{"object":"chat.compl`, false, false},
		{"data: {}\n\ndata: [DONE]\n\n", true, true},
		{"data: {}\n\n", true, false},
	} {
		if got := wholeChat([]byte(tc.body), tc.stream); got != tc.want {
			t.Errorf("wholeChat(%q, %v) = %v, want %v", tc.body, tc.stream, got, tc.want)
		}
	}
}
