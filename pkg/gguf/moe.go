package gguf

import (
	"strconv"
	"strings"
)

// MoE is a mixture-of-experts model's expert layout, from the header.
type MoE struct {
	Architecture string
	// ExpertCount is the experts per MoE layer, ExpertUsedCount those a
	// token is routed to (the model's own; engines must not lower it).
	ExpertCount     uint64
	ExpertUsedCount uint64
	// BlockCount is the model's layers.
	BlockCount uint64
	// LayerExpertBytes[i] is the bytes of layer i's routed-expert tensors
	// (blk.i.ffn_*_exps): what an engine may keep off the accelerator and
	// stream through mmap. Zero for a dense layer.
	LayerExpertBytes []uint64
	// ExpertBytes is their sum; OtherBytes every other tensor's bytes
	// (attention, shared experts, embeddings): what stays resident.
	ExpertBytes uint64
	OtherBytes  uint64
	// KVBytesPerToken estimates the KV cache per token of context at f16
	// (0 when the header does not say enough).
	KVBytesPerToken uint64
}

// MoELayers is the number of layers with expert tensors.
func (m MoE) MoELayers() int {
	n := 0
	for _, b := range m.LayerExpertBytes {
		if b > 0 {
			n++
		}
	}
	return n
}

// expertLayer reports the layer of a routed-expert tensor name, as
// llama.cpp's --cpu-moe / --n-cpu-moe patterns match them
// (blk.N.ffn_{up,down,gate,gate_up}_exps and their _chexps variants).
func expertLayer(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false
	}
	num, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	layer, err := strconv.ParseUint(num, 10, 32)
	if err != nil {
		return 0, false
	}
	base, _, _ := strings.Cut(rest, ".")
	if !strings.HasPrefix(base, "ffn_") || !(strings.HasSuffix(base, "_exps") || strings.HasSuffix(base, "_chexps")) {
		return 0, false
	}
	return layer, true
}

// MoE reads the expert layout; false when the model has no routed
// experts (no expert_count, or no expert tensors).
func (f *File) MoE() (MoE, bool) {
	arch := f.Architecture()
	m := MoE{Architecture: arch}
	if arch == "" {
		return m, false
	}
	m.ExpertCount, _ = f.Uint(arch + ".expert_count")
	m.ExpertUsedCount, _ = f.Uint(arch + ".expert_used_count")
	m.BlockCount, _ = f.Uint(arch + ".block_count")
	if m.ExpertCount == 0 || m.BlockCount == 0 || m.BlockCount > 1<<16 {
		return m, false
	}
	m.LayerExpertBytes = make([]uint64, m.BlockCount)
	for _, t := range f.Tensors {
		if l, ok := expertLayer(t.Name); ok && l < m.BlockCount {
			m.LayerExpertBytes[l] += t.Bytes
			m.ExpertBytes += t.Bytes
			continue
		}
		m.OtherBytes += t.Bytes
	}
	if m.ExpertBytes == 0 {
		return m, false
	}
	m.KVBytesPerToken = f.kvBytesPerToken(arch, m.BlockCount)
	return m, true
}

// kvBytesPerToken is 2 (K and V) x layers x kv heads x head size x 2
// bytes (f16), from the attention keys the header has.
func (f *File) kvBytesPerToken(arch string, layers uint64) uint64 {
	heads, _ := f.Uint(arch + ".attention.head_count")
	kvHeads, ok := f.Uint(arch + ".attention.head_count_kv")
	if !ok {
		kvHeads = heads
	}
	embd, _ := f.Uint(arch + ".embedding_length")
	keyLen, ok := f.Uint(arch + ".attention.key_length")
	if !ok && heads > 0 {
		keyLen = embd / heads
	}
	valLen, ok := f.Uint(arch + ".attention.value_length")
	if !ok {
		valLen = keyLen
	}
	if kvHeads == 0 || keyLen+valLen == 0 || kvHeads > 1<<16 || keyLen > 1<<20 || valLen > 1<<20 {
		return 0
	}
	return layers * kvHeads * (keyLen + valLen) * 2
}
