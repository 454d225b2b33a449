// Package enginesim is a deterministic SIMULATOR of an OpenAI-compatible
// inference engine (the HTTP surface of vLLM, llama-server, Ollama or TEI).
//
// It exists only for tests and benchmarks: it stands in for a real engine so
// that the gateway can be exercised end to end without a GPU, and it serves as
// the zero-cost baseline in latency benchmarks. It is not a model and must
// never be offered to users as one: its "completions" are words drawn from a
// fixed list, seeded by an FNV hash of the prompt, and its "embeddings" are
// a weak lexical model (feature hashing of word stems and trigrams, see
// Embed), not learned ones.
//
// The simulator speaks the OpenAI wire format for
//
//	GET  /v1/models, /v1/models/{id}
//	GET  /health, /v1/health
//	POST /v1/chat/completions   (streaming and not, tool calls)
//	POST /v1/completions        (streaming and not)
//	POST /v1/embeddings         (float and base64 encodings)
//	POST /v1/load_lora_adapter, /v1/unload_lora_adapter (vLLM's runtime LoRA API)
//
// and can be told to be slow (time to first token, tokens per second) or to
// fail in specific ways (error before the first token with any status,
// error event mid-stream, hang until the client gives up, abrupt
// disconnect, llama-server's `error:` line after a 200, `event: error`, a
// context window) so that the gateway's timeout, retry, cancellation and
// error-mapping paths can be tested deterministically.
//
// It can also behave like the real engines where they differ from OpenAI:
// error bodies in llama-server's, vLLM's or Ollama's shape (ErrorStyle),
// usage on the last chunk with choices (UsageOnLastChunk), /v1/models open
// while inference needs the key (OpenModels), and headers and body in
// separate writes without TCP_NODELAY (SplitWrites), which makes a client
// that delays its ACKs wait about 40 ms per kept-alive call. LlamaLike
// turns all of llama-server's on. `aiforge enginesim` has a flag for each. Stats exposes counters (in flight, completed, canceled by
// the client, injected failures, tokens written) so tests can assert, for
// example, that a client disconnect at the gateway cancels the engine request.
//
// Tool calls: a chat request with tools answers a call to the first
// function (or the one tool_choice names) with arguments {"q":"<word>"}.
// A code tool — the first function, with a "code" property in its
// parameters (the gateway's code interpreter offers one) — is called with
// {"code": <the last fenced code block of the last user message, or that
// whole message>}, and once the last message is a tool result the answer
// is text, so that a tool loop ends after one call.
//
// Typical use:
//
//	sim, baseURL, closeFn, err := enginesim.Start(enginesim.Config{Models: []string{"m"}})
//	if err != nil { ... }
//	defer closeFn()
//	// point the component under test at baseURL ("http://127.0.0.1:PORT/v1")
package enginesim
