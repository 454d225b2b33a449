package bucket

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/objstore"
)

// ManifestName is the file that marks a model folder complete. Until it
// exists the folder is left alone, so a tenant uploads the weights first
// and the manifest last.
const ManifestName = "aiforge-model.json"

// Manifest is the content of ManifestName:
//
//	{
//	  "kind": "model",                  // or "adapter" (then base_model is required)
//	  "base_model": "",                 // the catalog name an adapter applies to
//	  "name": "tiny",                   // optional; default: the folder's name
//	  "files": [
//	    {"path": "model.safetensors", "size": 104, "sha256": "<64 hex digits>"},
//	    {"path": "config.json", "size": 40, "sha256": "..."}
//	  ]
//	}
//
// The catalog name is always "<tenant>/<name>". Files lists every file of
// the folder but the manifest itself, with paths relative to the folder.
type Manifest struct {
	Kind      string             `json:"kind"`
	BaseModel string             `json:"base_model,omitempty"`
	Name      string             `json:"name,omitempty"`
	Files     []events.ModelFile `json:"files"`
}

// Limits bound what a manifest may ask for.
type Limits struct {
	MaxManifestBytes int64
	MaxFiles         int
	MaxFileBytes     int64
	MaxVersionBytes  int64
}

// parseManifest reads and checks a manifest. Every problem is a reason
// with a stable code.
func parseManifest(r io.Reader, lim Limits) (Manifest, []events.ModelReason) {
	raw, err := io.ReadAll(io.LimitReader(r, lim.MaxManifestBytes+1))
	if err != nil {
		return Manifest{}, []events.ModelReason{{Code: CodeManifestInvalid, File: ManifestName, Message: "reading the manifest: " + err.Error()}}
	}
	if int64(len(raw)) > lim.MaxManifestBytes {
		return Manifest{}, []events.ModelReason{{Code: CodeManifestInvalid, File: ManifestName, Message: fmt.Sprintf("the manifest is larger than %d bytes", lim.MaxManifestBytes)}}
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, []events.ModelReason{{Code: CodeManifestInvalid, File: ManifestName, Message: "the manifest is not valid JSON of the documented shape: " + err.Error()}}
	}
	var reasons []events.ModelReason
	bad := func(code, file, msg string) {
		reasons = append(reasons, events.ModelReason{Code: code, File: file, Message: msg})
	}
	switch m.Kind {
	case events.ModelKindModel:
		if m.BaseModel != "" {
			bad(CodeManifestInvalid, ManifestName, "base_model is for adapters only")
		}
	case events.ModelKindAdapter:
		if m.BaseModel == "" {
			bad(CodeManifestInvalid, ManifestName, "an adapter needs base_model")
		}
	default:
		bad(CodeManifestInvalid, ManifestName, fmt.Sprintf("kind %q is not model or adapter", bounded(m.Kind)))
	}
	if m.Name != "" && (strings.Contains(m.Name, "/") || objstore.ValidateKey(m.Name) != nil) {
		bad(CodeManifestInvalid, ManifestName, fmt.Sprintf("name %q must be one path segment", bounded(m.Name)))
	}
	if len(m.Files) == 0 {
		bad(CodeManifestInvalid, ManifestName, "the manifest lists no files")
	}
	if len(m.Files) > lim.MaxFiles {
		bad(CodeTooManyFiles, ManifestName, fmt.Sprintf("the manifest lists %d files; at most %d are allowed", len(m.Files), lim.MaxFiles))
		return m, reasons
	}
	seen := map[string]bool{}
	var total int64
	for _, f := range m.Files {
		switch {
		case !safePath(f.Path):
			bad(CodeUnsafePath, bounded(f.Path), "the path is not a safe relative path (no leading \"/\", \"\\\", empty, \".\" or \"..\" segments)")
			continue
		case f.Path == ManifestName:
			bad(CodeManifestInvalid, ManifestName, "the manifest lists itself")
			continue
		case seen[f.Path]:
			bad(CodeManifestInvalid, f.Path, "the file is listed twice")
			continue
		}
		seen[f.Path] = true
		if len(f.SHA256) != 64 || !isHex(f.SHA256) {
			bad(CodeManifestInvalid, f.Path, "sha256 must be 64 hex digits")
		}
		switch {
		case f.Size < 0:
			bad(CodeManifestInvalid, f.Path, "size must not be negative")
		case f.Size > lim.MaxFileBytes:
			bad(CodeTooLarge, f.Path, fmt.Sprintf("the file is %d bytes; at most %d are allowed", f.Size, lim.MaxFileBytes))
		}
		total += max(f.Size, 0)
	}
	if total > lim.MaxVersionBytes {
		bad(CodeTooLarge, "", fmt.Sprintf("the files are %d bytes in all; at most %d are allowed", total, lim.MaxVersionBytes))
	}
	return m, reasons
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// safePath reports whether p is a relative path the object store takes as
// a key suffix, without backslashes (a Windows separator on a client).
func safePath(p string) bool {
	return p != "" && len(p) <= 512 && !strings.Contains(p, "\\") && objstore.ValidateKey(p) == nil
}

func bounded(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
