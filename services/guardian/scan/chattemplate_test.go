package scan

import (
	"strings"
	"testing"
)

// The chat template is kept as text for review, never rendered: a template
// that would run code if rendered is just a string here.
func TestChatTemplateKeptAsText(t *testing.T) {
	evil := `{{ cycler.__init__.__globals__.os.popen('id').read() }}`
	st := writeST(nil, stT{name: "w", dtype: "F32", shape: []int64{2}})
	v := scanFiles(map[string][]byte{
		"model.safetensors":     st,
		"tokenizer_config.json": []byte(`{"chat_template": "` + evil + `", "eos_token": "</s>"}`),
	}, nil)
	if !v.Accepted || v.ChatTemplate != evil || v.ChatTemplateTruncated {
		t.Fatalf("verdict %+v", v)
	}

	// The list form: "default" wins, else the first.
	v = scanFiles(map[string][]byte{
		"model.safetensors": st,
		"tokenizer_config.json": []byte(`{"chat_template": [{"name": "tool_use", "template": "T"},
			{"name": "default", "template": "D"}]}`),
	}, nil)
	if v.ChatTemplate != "D" {
		t.Fatalf("list form: %q", v.ChatTemplate)
	}

	// A GGUF's tokenizer.chat_template, and the bound on its length.
	long := strings.Repeat("é", MaxChatTemplate) // 2 bytes a rune
	kvs := []ggufKV{{"general.alignment", ggufU32, uint32(32)}, {"tokenizer.chat_template", ggufString, long}}
	g := writeGGUF(3, 32, kvs, []ggufT{{"w", []uint64{8}, 0, 0}}, 32)
	v = scanFiles(map[string][]byte{"model.gguf": g}, nil)
	if !v.Accepted || !v.ChatTemplateTruncated || len(v.ChatTemplate) > MaxChatTemplate || !strings.HasPrefix(long, v.ChatTemplate) {
		t.Fatalf("gguf: accepted %v truncated %v len %d reasons %+v", v.Accepted, v.ChatTemplateTruncated, len(v.ChatTemplate), v.Reasons)
	}
}
