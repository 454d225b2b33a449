package enginesim

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Flavor makes a Sim answer the few requests where real engines differ
// from one another and that a gateway reads to learn an engine's limits.
// The zero Flavor changes nothing.
type Flavor struct {
	// TotalSlots and NCtx, when either is set, make GET /props answer as
	// llama.cpp's llama-server does: {"total_slots":TotalSlots,
	// "default_generation_settings":{"n_ctx":NCtx}} (behind the API key,
	// like every endpoint but /health and /v1/models there). Without them
	// /props is 404, as on vLLM, SGLang, Ollama and TEI.
	TotalSlots, NCtx int
	// MaxModelLen, when set, adds "max_model_len" to every GET /v1/models
	// entry, as vLLM lists its models.
	MaxModelLen int
	// OpenModels makes GET /v1/models answer without the API key while
	// every other endpoint still requires it, as llama-server does with
	// --api-key: listing models proves nothing about the key.
	OpenModels bool
}

// With returns s's handler answering as f says.
func (s *Sim) With(f Flavor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/props" && (f.TotalSlots > 0 || f.NCtx > 0):
			if !s.authorized(r) {
				writeError(w, errUnauthorized)
				return
			}
			b := []byte(`{"total_slots":`)
			b = strconv.AppendInt(b, int64(f.TotalSlots), 10)
			b = append(b, `,"default_generation_settings":{"n_ctx":`...)
			b = strconv.AppendInt(b, int64(f.NCtx), 10)
			writeJSON(w, http.StatusOK, append(b, `}}`...))
			return
		case r.URL.Path == "/v1/models" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			if !f.OpenModels && !s.authorized(r) {
				writeError(w, errUnauthorized)
				return
			}
			if f.MaxModelLen <= 0 {
				if f.OpenModels && s.authHeader != "" {
					r = r.Clone(r.Context())
					r.Header.Set("Authorization", s.authHeader)
				}
				s.ServeHTTP(w, r)
				return
			}
			b := []byte(`{"object":"list","data":[`)
			for i, m := range s.models {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendModel(b, m)
				b = append(b[:len(b)-1], `,"max_model_len":`...)
				b = strconv.AppendInt(b, int64(f.MaxModelLen), 10)
				b = append(b, '}')
			}
			writeJSON(w, http.StatusOK, append(b, "]}"...))
			return
		}
		s.ServeHTTP(w, r)
	})
}

// StartFlavor is Start with the simulator answering as f says.
func StartFlavor(cfg Config, f Flavor) (sim *Sim, baseURL string, closeFn func(), err error) {
	sim = New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", func() {}, err
	}
	srv := &http.Server{Handler: sim.With(f), ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	closeFn = func() { once.Do(func() { _ = srv.Close() }) }
	return sim, "http://" + ln.Addr().String() + "/v1", closeFn, nil
}
