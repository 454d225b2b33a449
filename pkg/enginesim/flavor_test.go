package enginesim

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFlavor(t *testing.T) {
	const key = "sk-flavor"
	sim, base, closeFn, err := StartFlavor(Config{Models: []string{"a", "b"}, APIKey: key},
		Flavor{TotalSlots: 3, NCtx: 4096, MaxModelLen: 8192, OpenModels: true})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	root := strings.TrimSuffix(base, "/v1")
	call := func(method, url, bearer, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	// /props as llama-server: behind the key.
	if st, _ := call("GET", root+"/props", "", ""); st != http.StatusUnauthorized {
		t.Fatalf("/props without the key: %d", st)
	}
	st, b := call("GET", root+"/props", key, "")
	var p struct {
		TotalSlots int `json:"total_slots"`
		Settings   struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if st != http.StatusOK || json.Unmarshal(b, &p) != nil || p.TotalSlots != 3 || p.Settings.NCtx != 4096 {
		t.Fatalf("/props: %d %s", st, b)
	}

	// /v1/models open, with max_model_len; the rest still needs the key.
	st, b = call("GET", base+"/models", "", "")
	var l struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if st != http.StatusOK || json.Unmarshal(b, &l) != nil || len(l.Data) != 2 || l.Data[1].ID != "b" || l.Data[1].MaxModelLen != 8192 {
		t.Fatalf("/v1/models: %d %s", st, b)
	}
	if st, _ := call("POST", base+"/chat/completions", "wrong", "{}"); st != http.StatusUnauthorized {
		t.Fatalf("chat with a wrong key: %d", st)
	}
	if st, _ := call("POST", base+"/chat/completions", key, "{}"); st != http.StatusBadRequest {
		t.Fatalf("chat with the key and an empty body: %d", st)
	}

	// The zero flavor changes nothing: no /props, /v1/models behind the key.
	plain := httptestServer(t, sim.With(Flavor{}))
	if st, _ := call("GET", plain+"/props", key, ""); st != http.StatusNotFound {
		t.Fatalf("/props of the zero flavor: %d", st)
	}
	if st, _ := call("GET", plain+"/v1/models", "", ""); st != http.StatusUnauthorized {
		t.Fatalf("/v1/models of the zero flavor without the key: %d", st)
	}
	// Open models without max_model_len: the sim's own list.
	open := httptestServer(t, sim.With(Flavor{OpenModels: true}))
	if st, b := call("GET", open+"/v1/models", "", ""); st != http.StatusOK || !strings.Contains(string(b), `"id":"a"`) {
		t.Fatalf("open /v1/models: %d %s", st, b)
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}
