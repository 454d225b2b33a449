package enginesim

// Ollama (checked against v0.6.5's openai middleware) answers a streamed
// /v1/completions request that asks for include_usage with
//
//	data: {..."choices":[{"text":"y",...}],...,"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}
//	...
//	data: {..."choices":[],...,"usage":{"prompt_tokens":8,"completion_tokens":3,"total_tokens":11}}
//	data: [DONE]
//
// where OpenAI writes "usage":null on every chunk but the last: a client
// (or a gateway) that takes each usage it sees as the count meters a stream
// cut before its last chunk at 0 tokens. Config.ZeroUsageChunks reproduces
// it (on chat streams too, which Ollama does not).

// zeroUsageEnd closes a chunk whose choice has been appended, with zero
// usage.
const zeroUsageEnd = `],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}` + "\n\n"
