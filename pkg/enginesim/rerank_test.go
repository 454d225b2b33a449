package enginesim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"testing"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// The reranker is lexical and deterministic: the document sharing the
// most of the query's terms (per its length) ranks first, on both
// protocols.
func TestReranker(t *testing.T) {
	_, base, stop, err := enginesim.Start(enginesim.Config{Models: []string{"rr"}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	root := base[:len(base)-len("/v1")]
	if s := enginesim.RerankScore("Wireless headset", "the wireless headset"); s != 2/math.Sqrt(6) {
		t.Fatalf("score %v", s)
	}
	if enginesim.RerankScore("x", "") != 0 || enginesim.RerankScore("Pair", "pair") != 1 {
		t.Fatal("score bounds")
	}
	docs := `["billing and invoices", "pair the wireless headset", {"text": "the headset"}]`
	st, b := post(t, base+"/rerank", `{"model":"rr","query":"pair wireless headset","documents":`+docs+`,"top_n":2,"return_documents":true}`)
	var v1 struct {
		Model   string `json:"model"`
		Results []struct {
			Index          int               `json:"index"`
			RelevanceScore float64           `json:"relevance_score"`
			Document       map[string]string `json:"document"`
		} `json:"results"`
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &v1); err != nil || st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	if v1.Model != "rr" || len(v1.Results) != 2 || v1.Results[0].Index != 1 || v1.Results[1].Index != 2 ||
		v1.Results[0].Document["text"] != "pair the wireless headset" || v1.Usage.TotalTokens != 3*3+3+4+2 {
		t.Fatalf("v1 answer %s", b)
	}
	st, b = post(t, root+"/rerank", `{"query":"pair wireless headset","texts":["billing and invoices","pair the wireless headset","the headset"]}`)
	var tei []struct {
		Index int     `json:"index"`
		Score float64 `json:"score"`
	}
	if err := json.Unmarshal(b, &tei); err != nil || st != 200 || len(tei) != 3 || tei[0].Index != 1 || tei[1].Index != 2 || tei[2].Index != 0 || tei[2].Score != 0 {
		t.Fatalf("tei answer %d %s", st, b)
	}
	resp, err := http.Get(root + "/info")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(info, []byte(`"model_id":"rr"`)) {
		t.Fatalf("info %s", info)
	}
	if st, _ := post(t, base+"/rerank", `{"model":"rr","query":"","documents":["a"]}`); st != 400 {
		t.Errorf("empty query: %d", st)
	}
	if st, _ := post(t, base+"/rerank", `{"model":"nope","query":"q","documents":["a"]}`); st != 404 {
		t.Errorf("unknown model: %d", st)
	}
}

// A fixed Reply is the answer, cut at max_tokens.
func TestReply(t *testing.T) {
	_, base, stop, err := enginesim.Start(enginesim.Config{Models: []string{"m"}, Reply: `Say "hi" now.`})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	_, b := post(t, base+"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	if !bytes.Contains(b, []byte(`"content":"Say \"hi\" now."`)) || !bytes.Contains(b, []byte(`"finish_reason":"stop"`)) {
		t.Fatalf("answer %s", b)
	}
	_, b = post(t, base+"/chat/completions", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`)
	if !bytes.Contains(b, []byte(`"content":"Say \"hi\""`)) || !bytes.Contains(b, []byte(`"finish_reason":"length"`)) {
		t.Fatalf("cut answer %s", b)
	}
}
