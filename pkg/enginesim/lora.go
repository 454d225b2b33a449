package enginesim

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// LoRA adapters, loaded at run time the way vLLM does when started with
// VLLM_ALLOW_RUNTIME_LORA_UPDATING=True:
//
//	POST /v1/load_lora_adapter   {"lora_name": "...", "lora_path": "..."}
//	POST /v1/unload_lora_adapter {"lora_name": "..."}
//
// Success is 200 with a plain-text message; a bad request (a name already
// loaded or not found, a path that is not an adapter directory) is 400 with
// an OpenAI-shaped error. A loaded adapter is listed by GET /v1/models with
// "parent" (the base model) and "root" (its path), and is accepted as
// "model" in requests. The simulator checks that lora_path is a directory
// holding adapter_config.json, as vLLM fails to load anything else.

// LoRAAdapter is an adapter loaded into the simulator.
type LoRAAdapter struct {
	Name string
	Path string
}

// LoRAAdapters returns the adapters loaded now, in load order.
func (s *Sim) LoRAAdapters() []LoRAAdapter {
	s.loraMu.RLock()
	defer s.loraMu.RUnlock()
	out := make([]LoRAAdapter, 0, len(s.loraOrder))
	for _, n := range s.loraOrder {
		out = append(out, LoRAAdapter{Name: n, Path: s.loras[n]})
	}
	return out
}

// LoRALoadCalls counts POST /v1/load_lora_adapter requests that passed
// authentication, successful or not.
func (s *Sim) LoRALoadCalls() int64 { return s.loraLoads.Load() }

// LoRAUnloadCalls counts POST /v1/unload_lora_adapter requests that passed
// authentication, successful or not.
func (s *Sim) LoRAUnloadCalls() int64 { return s.loraUnloads.Load() }

// DropLoRAAdapters forgets every loaded adapter, as an engine restart does.
func (s *Sim) DropLoRAAdapters() {
	s.loraMu.Lock()
	s.loras = nil
	s.loraOrder = nil
	s.loraMu.Unlock()
}

// loraPath returns the path of a loaded adapter.
func (s *Sim) loraPath(name string) (string, bool) {
	s.loraMu.RLock()
	p, ok := s.loras[name]
	s.loraMu.RUnlock()
	return p, ok
}

func appendLoRAModel(b []byte, id, parent, root string) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, modelsCreated, 10)
	b = append(b, `,"owned_by":"enginesim","root":`...)
	b = appendJSONString(b, root)
	b = append(b, `,"parent":`...)
	b = appendJSONString(b, parent)
	return append(b, '}')
}

// modelList returns the GET /v1/models body: the base models, then the
// loaded adapters.
func (s *Sim) modelList() []byte {
	s.loraMu.RLock()
	defer s.loraMu.RUnlock()
	if len(s.loraOrder) == 0 {
		return s.modelsJSON
	}
	b := append([]byte(nil), s.modelsJSON[:len(s.modelsJSON)-2]...) // without "]}"
	for _, n := range s.loraOrder {
		b = append(b, ',')
		b = appendLoRAModel(b, n, s.models[0], s.loras[n])
	}
	return append(b, "]}"...)
}

func loraText(w http.ResponseWriter, msg string) {
	w.Header()["Content-Type"] = hdrText
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(msg))
}

type loraRequest struct {
	LoRAName string `json:"lora_name"`
	LoRAPath string `json:"lora_path"`
}

func (s *Sim) readLoRARequest(w http.ResponseWriter, r *http.Request) (loraRequest, bool) {
	var req loraRequest
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, badRequest("could not read request body: "+err.Error(), ""))
		return req, false
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, badRequest("request body is not valid JSON: "+err.Error(), ""))
		return req, false
	}
	return req, true
}

func (s *Sim) loadLoRA(w http.ResponseWriter, r *http.Request) {
	s.loraLoads.Add(1)
	req, ok := s.readLoRARequest(w, r)
	if !ok {
		return
	}
	if req.LoRAName == "" || req.LoRAPath == "" {
		writeError(w, badRequest("Both 'lora_name' and 'lora_path' must be provided.", ""))
		return
	}
	if _, base := s.modelSet[req.LoRAName]; base {
		writeError(w, badRequest("The lora adapter '"+req.LoRAName+"' has already been loaded.", "lora_name"))
		return
	}
	if fi, err := os.Stat(req.LoRAPath); err != nil || !fi.IsDir() {
		writeError(w, badRequest("Loading lora "+req.LoRAName+" failed: No adapter found for "+req.LoRAPath, "lora_path"))
		return
	}
	if fi, err := os.Stat(filepath.Join(req.LoRAPath, "adapter_config.json")); err != nil || !fi.Mode().IsRegular() {
		writeError(w, badRequest("Loading lora "+req.LoRAName+" failed: No adapter found for "+req.LoRAPath, "lora_path"))
		return
	}
	s.loraMu.Lock()
	if _, dup := s.loras[req.LoRAName]; dup {
		s.loraMu.Unlock()
		writeError(w, badRequest("The lora adapter '"+req.LoRAName+"' has already been loaded.", "lora_name"))
		return
	}
	if s.loras == nil {
		s.loras = make(map[string]string)
	}
	s.loras[req.LoRAName] = req.LoRAPath
	s.loraOrder = append(s.loraOrder, req.LoRAName)
	s.loraMu.Unlock()
	loraText(w, "Success: LoRA adapter '"+req.LoRAName+"' added successfully.")
}

func (s *Sim) unloadLoRA(w http.ResponseWriter, r *http.Request) {
	s.loraUnloads.Add(1)
	req, ok := s.readLoRARequest(w, r)
	if !ok {
		return
	}
	if req.LoRAName == "" {
		writeError(w, badRequest("'lora_name' needs to be provided to unload a LoRA adapter.", ""))
		return
	}
	s.loraMu.Lock()
	if _, ok := s.loras[req.LoRAName]; !ok {
		s.loraMu.Unlock()
		writeError(w, badRequest("The lora adapter '"+req.LoRAName+"' cannot be found.", "lora_name"))
		return
	}
	delete(s.loras, req.LoRAName)
	s.loraOrder = slices.DeleteFunc(s.loraOrder, func(n string) bool { return n == req.LoRAName })
	s.loraMu.Unlock()
	loraText(w, "Success: LoRA adapter '"+req.LoRAName+"' removed successfully.")
}

// serveLoRA handles the adapter endpoints; false when path is not one.
func (s *Sim) serveLoRA(w http.ResponseWriter, r *http.Request, path string) bool {
	var h func(http.ResponseWriter, *http.Request)
	switch path {
	case "/v1/load_lora_adapter":
		h = s.loadLoRA
	case "/v1/unload_lora_adapter":
		h = s.unloadLoRA
	default:
		return false
	}
	if r.Method != http.MethodPost {
		w.Header()["Allow"] = hdrAllowPost
		writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
			msg: "Method " + r.Method + " not allowed on " + path + "; use POST"})
		return true
	}
	h(w, r)
	return true
}

// modelObject returns the GET /v1/models/{id} body of a base model or a
// loaded adapter.
func (s *Sim) modelObject(id string) ([]byte, bool) {
	if _, ok := s.modelSet[id]; ok {
		return appendModel(nil, id), true
	}
	if p, ok := s.loraPath(id); ok {
		return appendLoRAModel(nil, id, s.models[0], p), true
	}
	return nil, false
}
