package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"
)

// TestOllamaFigures measures what aiforge adds in front of a real engine:
// streamed time to the first content token and non-streamed latency,
// through aiforge and straight to Ollama, interleaved pair by pair, and
// whether the token counts equal the engine's. It prints figures and asserts
// only the token counts; it runs when AIFORGE_OLLAMA_FIGURES is set (to the
// number of pairs, default 30):
//
//	AIFORGE_OLLAMA_FIGURES=30 go test -count=1 -run OllamaFigures -v ./e2e/
func TestOllamaFigures(t *testing.T) {
	env := os.Getenv("AIFORGE_OLLAMA_FIGURES")
	if env == "" {
		t.Skip("set AIFORGE_OLLAMA_FIGURES=30 to measure aiforge's added latency in front of Ollama")
	}
	pairs, err := strconv.Atoi(env)
	if err != nil || pairs < 1 {
		pairs = 30
	}
	f := startOllamaFixture(t)
	plain := fmt.Sprintf(chatFmt, 8, "")
	stream := fmt.Sprintf(chatFmt, 8, `,"stream":true,"stream_options":{"include_usage":true}`)
	viaURL, directURL := f.stack.url+"/v1/chat/completions", "http://"+f.engine.addr+"/v1/chat/completions"

	timePlain := func(url, key, model string) (time.Duration, oaiUsage) {
		start := time.Now()
		st, b, _ := httpDo(url, key, "POST", fmt.Sprintf(plain, model))
		d := time.Since(start)
		if st != 200 {
			t.Fatalf("%s: %d %s", url, st, b)
		}
		return d, *decodeAnswer(t, url, b).Usage
	}
	timeFirstToken := func(url, key, model string) (time.Duration, oaiUsage) {
		start := time.Now()
		var first time.Duration
		a := sseRead(context.Background(), url, key, fmt.Sprintf(stream, model), func(_ int, data string) {
			if first == 0 {
				if s := readStream(t, []string{data}); s.text != "" {
					first = time.Since(start)
				}
			}
		})
		s := readStream(t, a.events)
		if a.status != 200 || !a.done || first == 0 || s.usage == nil {
			t.Fatalf("%s: stream %d done=%v %v", url, a.status, a.done, a.events)
		}
		return first, *s.usage
	}
	// warm both paths (connections, the runner's prompt cache)
	for i := 0; i < 3; i++ {
		timePlain(viaURL, f.key, tinyServed)
		timePlain(directURL, "", ollamaModel)
		_, _ = timeFirstToken(viaURL, f.key, tinyServed)
		_, _ = timeFirstToken(directURL, "", ollamaModel)
	}
	var pv, pd, sv, sd, addedPlain, addedTTFT []time.Duration
	var last oaiUsage
	for i := 0; i < pairs; i++ {
		var v, d time.Duration
		var uv, ud oaiUsage
		if i%2 == 0 { // alternate which goes first
			v, uv = timePlain(viaURL, f.key, tinyServed)
			d, ud = timePlain(directURL, "", ollamaModel)
		} else {
			d, ud = timePlain(directURL, "", ollamaModel)
			v, uv = timePlain(viaURL, f.key, tinyServed)
		}
		if uv != ud {
			t.Fatalf("pair %d: usage through aiforge %+v, ollama's %+v", i, uv, ud)
		}
		pv, pd, addedPlain = append(pv, v), append(pd, d), append(addedPlain, v-d)
		if i%2 == 0 {
			v, uv = timeFirstToken(viaURL, f.key, tinyServed)
			d, ud = timeFirstToken(directURL, "", ollamaModel)
		} else {
			d, ud = timeFirstToken(directURL, "", ollamaModel)
			v, uv = timeFirstToken(viaURL, f.key, tinyServed)
		}
		if uv != ud {
			t.Fatalf("pair %d: streamed usage through aiforge %+v, ollama's %+v", i, uv, ud)
		}
		sv, sd, addedTTFT = append(sv, v), append(sd, d), append(addedTTFT, v-d)
		last = uv
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
	t.Logf("%d interleaved pairs, chat with 8 completion tokens, Ollama %s, tiny GGUF:", pairs, ollamaVersion)
	t.Logf("non-streamed latency p50: direct %s, through aiforge %s; added p50 of pairs %s (p90 %s); ratio %.2f",
		ms(pct(pd, 50)), ms(pct(pv, 50)), ms(pct(addedPlain, 50)), ms(pct(addedPlain, 90)), float64(pct(pv, 50))/float64(pct(pd, 50)))
	t.Logf("streamed TTFT p50: direct %s, through aiforge %s; added p50 of pairs %s (p90 %s); ratio %.2f",
		ms(pct(sd, 50)), ms(pct(sv, 50)), ms(pct(addedTTFT, 50)), ms(pct(addedTTFT, 90)), float64(pct(sv, 50))/float64(pct(sd, 50)))
	t.Logf("token counts: equal to the engine's in all %d non-streamed and %d streamed pairs (prompt %d, completion %d)",
		pairs, pairs, last.PromptTokens, last.CompletionTokens)
}

// pct is the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}
