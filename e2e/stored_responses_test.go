package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
)

// apiStatus is the HTTP status and error code of an SDK error.
func apiStatus(err error) (int, string, string) {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return ae.StatusCode, ae.Code, ae.Param
	}
	return 0, "", ""
}

// TestResponsesStoredAndChained: the official SDK, unchanged, reads a
// stored response, its input items and deletes it; previous_response_id
// sends the earlier turns to the model and bills them as input; another
// tenant sees none of it; store false keeps nothing. A response cut at
// max_output_tokens is stored incomplete and a chain onto it reads its
// partial answer.
func TestResponsesStoredAndChained(t *testing.T) {
	// Answers end by themselves after 5 tokens: a max of 6 is a finished
	// answer, 4 cuts it.
	engine, base := sim(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 5})
	s := startStack(t, stackOpts{})
	keyA, _ := s.tenantKey("acme")
	keyB, _ := s.tenantKey("bravo")
	s.register("chat", base, "up")
	s.waitServed(keyA, "chat")
	ctx := context.Background()
	a := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	b := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(keyB), option.WithMaxRetries(0))

	r1, err := a.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", MaxOutputTokens: openai.Int(6),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("My name is Zebulon and I live in Quito.")}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{Include: []responses.ResponseIncludable{responses.ResponseIncludableFileSearchCallResults}})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != r1.ID || got.OutputText() != r1.OutputText() || got.OutputText() == "" || got.Usage.InputTokens != r1.Usage.InputTokens || got.Status != responses.ResponseStatusCompleted {
		t.Fatalf("stored %s, answered %s", got.RawJSON(), r1.RawJSON())
	}
	items, err := a.Responses.InputItems.List(ctx, r1.ID, responses.InputItemListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(items.Data) != 1 || items.HasMore {
		t.Fatalf("input items %s", items.RawJSON())
	}
	if m := items.Data[0].AsMessage(); m.ID == "" || m.Role != "user" || len(m.Content) != 1 || m.Content[0].Text != "My name is Zebulon and I live in Quito." {
		t.Fatalf("input item %s", items.Data[0].RawJSON())
	}

	// Turn two chains onto turn one: the model reads both, the input
	// billed grows.
	r2, err := a.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", MaxOutputTokens: openai.Int(6), PreviousResponseID: openai.String(r1.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What is my name?")}})
	if err != nil {
		t.Fatal(err)
	}
	body := string(engine.LastBody())
	for _, want := range []string{"Zebulon and I live in Quito", r1.OutputText(), "What is my name?"} {
		if !strings.Contains(body, jsonText(want)) {
			t.Fatalf("turn two's model input lacks %q: %s", want, body)
		}
	}
	if r2.PreviousResponseID != r1.ID || r2.Usage.InputTokens <= r1.Usage.InputTokens+r1.Usage.OutputTokens {
		t.Fatalf("turn two: previous %q, input tokens %d after %d+%d", r2.PreviousResponseID, r2.Usage.InputTokens, r1.Usage.InputTokens, r1.Usage.OutputTokens)
	}
	if r1.Status != responses.ResponseStatusCompleted || r2.Status != responses.ResponseStatusCompleted || r2.IncompleteDetails.Reason != "" {
		t.Fatalf("finished answers: %s, %s", r1.Status, r2.RawJSON())
	}
	// Turn three, streamed, chains onto two: all three turns reach the
	// model. Its answer is cut at max_output_tokens: the stream ends with
	// response.incomplete.
	stream := a.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "chat", MaxOutputTokens: openai.Int(4), PreviousResponseID: openai.String(r2.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("And where do I live?")}})
	var r3 *responses.Response
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.incomplete":
			r := ev.Response
			r3 = &r
		case "response.completed":
			t.Fatalf("a cut stream completed: %s", ev.RawJSON())
		}
	}
	if err := stream.Err(); err != nil || r3 == nil {
		t.Fatalf("stream: %v, incomplete %v", err, r3 != nil)
	}
	if r3.Status != responses.ResponseStatusIncomplete || r3.IncompleteDetails.Reason != "max_output_tokens" || r3.OutputText() == "" ||
		r3.Output[0].AsMessage().Status != responses.ResponseOutputMessageStatusIncomplete || r3.Usage.OutputTokens != 4 {
		t.Fatalf("cut stream's response %s", r3.RawJSON())
	}
	body = string(engine.LastBody())
	for _, want := range []string{"Zebulon", r1.OutputText(), "What is my name?", r2.OutputText(), "And where do I live?"} {
		if !strings.Contains(body, jsonText(want)) {
			t.Fatalf("turn three's model input lacks %q: %s", want, body)
		}
	}
	if r3.Usage.InputTokens <= r2.Usage.InputTokens {
		t.Fatalf("turn three billed %d input tokens after %d", r3.Usage.InputTokens, r2.Usage.InputTokens)
	}
	if g3, err := a.Responses.Get(ctx, r3.ID, responses.ResponseGetParams{}); err != nil || g3.PreviousResponseID != r2.ID || g3.OutputText() != r3.OutputText() ||
		g3.Status != responses.ResponseStatusIncomplete || g3.IncompleteDetails.Reason != "max_output_tokens" {
		t.Fatalf("streamed response stored: %v %+v", err, g3)
	}
	// A chain onto the incomplete turn sends its partial answer.
	r4, err := a.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", MaxOutputTokens: openai.Int(6), PreviousResponseID: openai.String(r3.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Go on.")}})
	if err != nil || r4.Status != responses.ResponseStatusCompleted {
		t.Fatalf("chain onto an incomplete response: %v %+v", err, r4)
	}
	if body := string(engine.LastBody()); !strings.Contains(body, jsonText(r3.OutputText())) || !strings.Contains(body, "Go on.") {
		t.Fatalf("the chain onto the incomplete turn lacks its partial answer %q: %s", r3.OutputText(), body)
	}
	t.Logf("input tokens billed per turn: %d, %d, %d", r1.Usage.InputTokens, r2.Usage.InputTokens, r3.Usage.InputTokens)

	// Another tenant: 404 for everything of acme's.
	if _, err := b.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{}); func() bool { st, _, _ := apiStatus(err); return st != http.StatusNotFound }() {
		t.Fatalf("tenant B read tenant A's response: %v", err)
	}
	if _, err := b.Responses.InputItems.List(ctx, r1.ID, responses.InputItemListParams{}); func() bool { st, _, _ := apiStatus(err); return st != http.StatusNotFound }() {
		t.Fatalf("tenant B listed tenant A's input items: %v", err)
	}
	_, err = b.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", PreviousResponseID: openai.String(r1.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if st, code, param := apiStatus(err); st != http.StatusNotFound || code != "previous_response_not_found" || param != "previous_response_id" {
		t.Fatalf("tenant B chained onto tenant A's response: %v", err)
	}
	if err := b.Responses.Delete(ctx, r1.ID); func() bool { st, _, _ := apiStatus(err); return st != http.StatusNotFound }() {
		t.Fatalf("tenant B deleted tenant A's response: %v", err)
	}

	// store false: answered, never kept.
	unstored, err := a.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", MaxOutputTokens: openai.Int(2), Store: openai.Bool(false),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("forget me")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Responses.Get(ctx, unstored.ID, responses.ResponseGetParams{}); func() bool { st, _, _ := apiStatus(err); return st != http.StatusNotFound }() {
		t.Fatalf("a store false response was kept: %v", err)
	}

	// Input items page, newest first by default.
	r5, err := a.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", MaxOutputTokens: openai.Int(2),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("first", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfMessage("second", responses.EasyInputMessageRoleAssistant),
			responses.ResponseInputItemParamOfMessage("third", responses.EasyInputMessageRoleUser),
		}}})
	if err != nil {
		t.Fatal(err)
	}
	page, err := a.Responses.InputItems.List(ctx, r5.ID, responses.InputItemListParams{Limit: openai.Int(2)})
	if err != nil || len(page.Data) != 2 || !page.HasMore {
		t.Fatalf("first page: %v %s", err, page.RawJSON())
	}
	var texts []string
	iter := a.Responses.InputItems.ListAutoPaging(ctx, r5.ID, responses.InputItemListParams{Limit: openai.Int(2)})
	for iter.Next() {
		it := iter.Current()
		var m struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		_ = json.Unmarshal([]byte(it.RawJSON()), &m)
		texts = append(texts, m.Content[0].Text)
	}
	if err := iter.Err(); err != nil || strings.Join(texts, ",") != "third,second,first" {
		t.Fatalf("all items, desc: %v %v", texts, err)
	}

	// Delete: gone for reads and chaining; a later turn that chained onto
	// it keeps its conversation.
	if err := a.Responses.Delete(ctx, r1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{}); func() bool { st, _, _ := apiStatus(err); return st != http.StatusNotFound }() {
		t.Fatalf("a deleted response is read: %v", err)
	}
	_, err = a.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", PreviousResponseID: openai.String(r1.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if st, code, _ := apiStatus(err); st != http.StatusNotFound || code != "previous_response_not_found" {
		t.Fatalf("chained onto a deleted response: %v", err)
	}
	if _, err := a.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", MaxOutputTokens: openai.Int(2), PreviousResponseID: openai.String(r2.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("again")}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(engine.LastBody()), "Zebulon") {
		t.Fatalf("chaining onto turn two after turn one was deleted lost turn one: %s", engine.LastBody())
	}
}

// jsonText is s as it appears inside a JSON string.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// TestPromptVersionsABAndRollback: prompt templates through /v1/prompts;
// the SDK's prompt {id, variables} with no version follows the production
// label, an A/B split by weight measured over 1,000 requests is within 5
// points, a rollback takes effect, and the version used is in the
// response and in the usage events.
func TestPromptVersionsABAndRollback(t *testing.T) {
	ns := natstest.Server(t)
	engine, base := sim(t, enginesim.Config{Models: []string{"up"}})
	s := externalStack(t, ns.ClientURL(), []string{"all"}, nil)
	key, _ := s.tenantKey("acme")
	keyB, _ := s.tenantKey("bravo")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))

	post := func(k, path string, body any) map[string]any {
		t.Helper()
		raw, _ := json.Marshal(body)
		st, out := s.post(k, path, string(raw))
		var m map[string]any
		_ = json.Unmarshal(out, &m)
		if st != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, st, out)
		}
		return m
	}
	p := post(key, "/v1/prompts", map[string]any{"name": "support", "instructions": "You are the support agent of {{company}}.",
		"input": []map[string]any{{"role": "user", "content": "Customer {{customer}} asks:"}}})
	id := p["id"].(string)
	post(key, "/v1/prompts/"+id+"/versions", map[string]any{"instructions": "You are the friendly support agent of {{company}}, version two."})

	params := func(version string) responses.ResponseNewParams {
		pp := responses.ResponsePromptParam{ID: id, Variables: map[string]responses.ResponsePromptVariableUnionParam{
			"company":  {OfString: openai.String("Initech")},
			"customer": {OfInputText: &responses.ResponseInputTextParam{Text: "Milton"}},
		}}
		if version != "" {
			pp.Version = openai.String(version)
		}
		return responses.ResponseNewParams{Model: "chat", MaxOutputTokens: openai.Int(1), Prompt: pp, Store: openai.Bool(false),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Where is my stapler?")}}
	}
	r, err := client.Responses.New(ctx, params(""))
	if err != nil {
		t.Fatal(err)
	}
	if r.Prompt.ID != id || r.Prompt.Version != "1" {
		t.Fatalf("production: prompt %s", r.Prompt.RawJSON())
	}
	// max_output_tokens 1 cuts every answer (the simulator always generates
	// the max): incomplete, and billed as generated (usage events "ok" with
	// its one completion token, below).
	if r.Status != responses.ResponseStatusIncomplete || r.IncompleteDetails.Reason != "max_output_tokens" || r.Usage.OutputTokens != 1 {
		t.Fatalf("a cut answer: %s", r.RawJSON())
	}
	body := string(engine.LastBody())
	for _, want := range []string{"You are the support agent of Initech.", "Customer Milton asks:", "Where is my stapler?"} {
		if !strings.Contains(body, want) {
			t.Fatalf("model input lacks %q: %s", want, body)
		}
	}
	if r, err := client.Responses.New(ctx, params("2")); err != nil || r.Prompt.Version != "2" ||
		!strings.Contains(string(engine.LastBody()), "friendly support agent of Initech, version two") {
		t.Fatalf("version 2: %v %+v", err, r)
	}
	// A missing variable is a 400 naming it; another tenant has no such
	// prompt.
	bad := params("")
	delete(bad.Prompt.Variables, "customer")
	_, err = client.Responses.New(ctx, bad)
	var ae *openai.Error
	if st, code, _ := apiStatus(err); st != http.StatusBadRequest || code != "missing_prompt_variable" || !errors.As(err, &ae) || !strings.Contains(ae.Message, "'customer'") {
		t.Fatalf("missing variable: %v", err)
	}
	clientB := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(keyB), option.WithMaxRetries(0))
	if _, err := clientB.Responses.New(ctx, params("")); func() bool {
		st, code, _ := apiStatus(err)
		return st != http.StatusNotFound || code != "prompt_not_found"
	}() {
		t.Fatalf("tenant B used tenant A's prompt: %v", err)
	}

	// A/B: production 80/20 between versions 1 and 2, 1,000 requests.
	post(key, "/v1/prompts/"+id+"/labels", map[string]any{"label": "production",
		"versions": []map[string]any{{"version": "1", "weight": 80}, {"version": "2", "weight": 20}}})
	const n = 1000
	counts := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	errs := make(chan error, n)
	for range 8 {
		wg.Go(func() {
			for range work {
				r, err := client.Responses.New(ctx, params(""))
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				counts[r.Prompt.Version]++
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	share := float64(counts["1"]) * 100 / n
	t.Logf("80/20 split over %d requests: %v (%.1f%% version 1) in %s", n, counts, share, time.Since(start).Round(time.Millisecond))
	if share < 75 || share > 85 || counts["1"]+counts["2"] != n {
		t.Fatalf("an 80/20 split over %d requests gave %v", n, counts)
	}

	// Roll back: production is version 1 alone again.
	post(key, "/v1/prompts/"+id+"/labels", map[string]any{"label": "production", "version": "1"})
	for range 20 {
		if r, err := client.Responses.New(ctx, params("")); err != nil || r.Prompt.Version != "1" {
			t.Fatalf("after the rollback: %v %+v", err, r)
		}
	}

	// Every request from the prompt has a usage v5 event with the version
	// it used: the 1,000 split as answered.
	nc := natstest.Conn(t, ns, "reader")
	js, _ := jetstream.New(nc)
	want := 1 + 1 + n + 20
	var byVersion map[string]int
	eventually(t, 30*time.Second, func() bool {
		byVersion = map[string]int{}
		st, err := js.Stream(ctx, events.StreamUsage)
		if err != nil {
			return false
		}
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.Subject(events.TypeUsageRecordedV5, "acme")}})
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		if err != nil || int(info.NumPending) < want {
			return false
		}
		for range info.NumPending {
			m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			if err != nil {
				return false
			}
			var ev events.UsageRecordedV5
			if json.Unmarshal(m.Data(), &ev) != nil || ev.Validate() != nil || ev.PromptID != id || ev.Status != events.UsageStatusOK || ev.CompletionTokens != 1 {
				t.Fatalf("usage v5 %s", m.Data())
			}
			byVersion[ev.PromptVersion]++
		}
		return true
	}, fmt.Sprintf("%d usage v5 events", want))
	if byVersion["1"] != counts["1"]+1+20 || byVersion["2"] != counts["2"]+1 {
		t.Fatalf("usage v5 by version %v, answered %v (+1 of each, +20 of version 1)", byVersion, counts)
	}
}
