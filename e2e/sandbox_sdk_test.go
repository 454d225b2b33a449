package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/sandbox"
)

// TestContainersWithTheSDK drives the Containers API with the official
// OpenAI Go SDK against real gVisor sandboxes: a container made with a
// file of the Files API, an upload, code that reads both and writes a
// result, the result listed and downloaded, the container deleted.
func TestContainersWithTheSDK(t *testing.T) {
	s := sandboxStack(t)
	key, _ := s.tenantKey("acme")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))

	data, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("region,amount\nnorth,120\nsouth,80\nnorth,30\n"), "sales.csv", "text/csv"), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	ct, err := client.Containers.New(ctx, openai.ContainerNewParams{Name: "analysis", FileIDs: []string{data.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ct.ID, "cntr_") || ct.Name != "analysis" || ct.Status != sandbox.StatusRunning || ct.Object != "container" {
		t.Fatalf("container = %s", ct.RawJSON())
	}
	got, err := client.Containers.Get(ctx, ct.ID)
	if err != nil || got.ID != ct.ID || got.MemoryLimit != "1g" || got.ExpiresAfter.Minutes != sandbox.DefaultExpiresMinutes {
		t.Fatalf("get = %v %s", err, got.RawJSON())
	}
	page, err := client.Containers.List(ctx, openai.ContainerListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != ct.ID {
		t.Fatalf("list = %v %+v", err, page)
	}
	up, err := client.Containers.Files.New(ctx, ct.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("north\n"), "regions.txt", "text/plain")})
	if err != nil {
		t.Fatal(err)
	}
	if up.Path != "/mnt/data/regions.txt" || up.Bytes != 6 || up.Source != sandbox.SourceUser {
		t.Fatalf("upload = %s", up.RawJSON())
	}

	// exec is aiforge's extension: plain HTTP.
	c := &sbxClient{t: t, s: s, key: key}
	r := c.exec(ct.ID, "python", `import csv
want = open("regions.txt").read().split()
total = sum(int(r["amount"]) for r in csv.DictReader(open("sales.csv")) if r["region"] in want)
open("total.txt", "w").write(str(total))
print(total)`, 30_000)
	if r.Stdout != "150\n" || r.ExitCode != 0 || len(r.Files) != 1 || r.Files[0].Path != "/mnt/data/total.txt" || r.Files[0].Source != sandbox.SourceAssistant {
		t.Fatalf("exec = %+v", r)
	}

	files, err := client.Containers.Files.List(ctx, ct.ID, openai.ContainerFileListParams{})
	if err != nil || len(files.Data) != 3 {
		t.Fatalf("files = %v %+v", err, files)
	}
	resp, err := client.Containers.Files.Content.Get(ctx, ct.ID, r.Files[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "150" {
		t.Fatalf("content = %q", body)
	}
	if err := client.Containers.Files.Delete(ctx, ct.ID, up.ID); err != nil {
		t.Fatal(err)
	}
	if r := c.exec(ct.ID, "bash", "ls /mnt/data", 10_000); r.Stdout != "sales.csv\ntotal.txt\n" {
		t.Fatalf("after the delete: %+v", r)
	}
	if err := client.Containers.Delete(ctx, ct.ID); err != nil {
		t.Fatal(err)
	}
	_, err = client.Containers.Get(ctx, ct.ID)
	var apiErr *openai.Error
	if !asOpenAIError(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != sandbox.CodeContainerNotFound {
		t.Fatalf("get after delete: %v", err)
	}
}

// TestCodeInterpreterRunsInASandbox: /v1/responses with the code_interpreter
// tool, the model (the engine simulator, which calls the code tool with the
// user's fenced code) answered by code run in a real gVisor sandbox.
func TestCodeInterpreterRunsInASandbox(t *testing.T) {
	_, base := sim(t, enginesim.Config{Models: []string{"up"}})
	s := sandboxStack(t)
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))

	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "chat",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Which user runs this?\n```python\nimport os, sys\nprint(os.getuid(), sys.version_info[0])\n```")},
		Tools: []responses.ToolUnionParam{{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
			Container: responses.ToolCodeInterpreterContainerUnionParam{OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var call responses.ResponseCodeInterpreterToolCall
	for _, item := range resp.Output {
		if item.Type == "code_interpreter_call" {
			call = item.AsCodeInterpreterCall()
		}
	}
	if call.ID == "" || call.Status != "completed" || !strings.HasPrefix(call.ContainerID, "cntr_") || len(call.Outputs) != 1 {
		t.Fatalf("response = %s", resp.RawJSON())
	}
	if logs := call.Outputs[0].Logs; logs != "1000 3\n" {
		t.Fatalf("the code's output = %q, want the sandbox's uid and Python 3", logs)
	}
	if resp.OutputText() == "" {
		t.Fatalf("no answer after the code ran: %s", resp.RawJSON())
	}
	// The container the tool made is the tenant's.
	raw, _ := json.Marshal(call)
	st, body := (&sbxClient{t: t, s: s, key: key}).do("GET", "/v1/containers/"+call.ContainerID, nil)
	if st != http.StatusOK {
		t.Fatalf("the tool's container %s: %d %s (%s)", call.ContainerID, st, body, raw)
	}
}

func asOpenAIError(err error, target **openai.Error) bool {
	e, ok := err.(*openai.Error)
	if ok {
		*target = e
	}
	return ok
}
