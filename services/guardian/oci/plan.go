package oci

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/ociref"
)

// Media types and annotations the guardian maps to files.
const (
	// KitOps ModelKit: the config is the Kitfile as JSON; each layer is a
	// tar (optionally gzipped) of the paths the Kitfile names.
	MediaTypeKitConfig = "application/vnd.kitops.modelkit.config.v1+json"
	// ArtifactTypeModel is what `aiforge models push` publishes: ORAS
	// files, one layer per file titled with its path.
	ArtifactTypeModel = ociref.ArtifactTypeModel
	// AnnotationTitle names an ORAS file layer's path.
	AnnotationTitle = ocispec.AnnotationTitle
	// ORAS marks a directory packed as tar+gzip with this annotation.
	annotationORASUnpack = "io.deis.oras.content.unpack"
)

// kitLayerRE matches KitOps layer media types: the role, then whether the
// tar is gzipped.
var kitLayerRE = regexp.MustCompile(`^application/vnd\.kitops\.modelkit\.(model|modelpart|dataset|code|docs|prompts)\.v1\.tar(\+gzip)?$`)

// Layer is one layer as the guardian stores it.
type Layer struct {
	Desc ocispec.Descriptor
	// Path is an ORAS file layer's path (its title); empty for archives.
	Path string
	// Archive: a tar to extract (Gzip: compressed); Role is the KitOps role.
	Archive bool
	Gzip    bool
	Role    string
}

// Plan is how an artifact maps to a catalog version.
type Plan struct {
	Format string // "files" (ORAS) or "modelkit"
	// Kind and BaseModel are what the artifact declares ("" if nothing).
	Kind, BaseModel string
	Layers          []Layer
	// SHA256s are expected file digests (path -> hex) the artifact states.
	SHA256s map[string]string
	// Root is the directory of an adapter kit's LoRA part: its files are
	// stored at the version's root, where engines look for
	// adapter_config.json.
	Root string
}

// IsModelKit reports whether m is a KitOps ModelKit (its config is a
// Kitfile that must be fetched to plan it).
func IsModelKit(m Manifest) bool { return m.Config.MediaType == MediaTypeKitConfig }

// PlanFiles maps an ORAS artifact: every layer is a file named by its
// title annotation, a safe relative path used once.
func PlanFiles(m Manifest) (Plan, error) {
	p := Plan{Format: "files"}
	seen := map[string]bool{}
	for i, l := range m.Layers {
		title := l.Annotations[AnnotationTitle]
		if title == "" {
			return Plan{}, fmt.Errorf("%w: layer %d (%s) has no %s annotation naming its file", ErrUnsupported, i, l.MediaType, AnnotationTitle)
		}
		if l.Annotations[annotationORASUnpack] == "true" {
			return Plan{}, fmt.Errorf("%w: layer %q is a packed directory; push its files one by one", ErrUnsupported, title)
		}
		if err := ValidatePath(title); err != nil {
			return Plan{}, fmt.Errorf("layer %d: %w", i, err)
		}
		if seen[title] {
			return Plan{}, fmt.Errorf("%w: two layers are titled %q", ErrUnsafePath, title)
		}
		seen[title] = true
		p.Layers = append(p.Layers, Layer{Desc: l, Path: title})
	}
	switch m.Annotations[ociref.AnnotationKind] {
	case "adapter":
		p.Kind, p.BaseModel = "adapter", m.Annotations[ociref.AnnotationBaseModel]
	case "model":
		p.Kind = "model"
	}
	if s := m.Annotations[ociref.AnnotationSHA256s]; s != "" {
		if err := json.Unmarshal([]byte(s), &p.SHA256s); err != nil {
			return Plan{}, fmt.Errorf("%w: annotation %s is not a JSON object: %v", ErrUnsupported, ociref.AnnotationSHA256s, err)
		}
	}
	return p, nil
}

// Kitfile is the part of a KitOps Kitfile the guardian reads.
type Kitfile struct {
	ManifestVersion string `json:"manifestVersion"`
	Package         struct {
		Name    string `json:"name,omitempty"`
		License string `json:"license,omitempty"`
	} `json:"package"`
	Model *struct {
		Name       string         `json:"name,omitempty"`
		Path       string         `json:"path,omitempty"`
		Parts      []KitModelPart `json:"parts,omitempty"`
		Parameters map[string]any `json:"parameters,omitempty"`
	} `json:"model,omitempty"`
}

// KitModelPart is a Kitfile model part.
type KitModelPart struct {
	Name string `json:"name,omitempty"`
	Path string `json:"path,omitempty"`
	Type string `json:"type,omitempty"`
}

// adapterPartTypes are the Kitfile part types that make the kit a LoRA
// adapter.
var adapterPartTypes = []string{"lora", "qlora", "adapter", "peft"}

// PlanModelKit maps a ModelKit: every layer a KitOps tar; the Kitfile
// decides the kind — a model part of type lora (or adapter), or a model
// whose parameters name a base_model, makes it an adapter.
func PlanModelKit(m Manifest, kitfile []byte) (Plan, error) {
	var kf Kitfile
	if err := json.Unmarshal(kitfile, &kf); err != nil {
		return Plan{}, fmt.Errorf("%w: the Kitfile config is not JSON: %v", ErrUnsupported, err)
	}
	p := Plan{Format: "modelkit", Kind: "model"}
	if kf.Model != nil {
		for _, part := range kf.Model.Parts {
			for _, t := range adapterPartTypes {
				if strings.EqualFold(part.Type, t) && p.Kind != "adapter" {
					p.Kind, p.Root = "adapter", part.Path
				}
			}
		}
		for _, k := range []string{"base_model", "baseModel", "base"} {
			if b, ok := kf.Model.Parameters[k].(string); ok && b != "" {
				p.BaseModel = b
				if p.Kind != "adapter" {
					p.Kind, p.Root = "adapter", kf.Model.Path
				}
				break
			}
		}
		p.Root = strings.Trim(strings.TrimPrefix(p.Root, "./"), "/")
		if p.Root == "." {
			p.Root = ""
		}
		if p.Root != "" && ValidatePath(p.Root) != nil {
			return Plan{}, fmt.Errorf("%w: the Kitfile's adapter path %q", ErrUnsafePath, p.Root)
		}
	}
	for i, l := range m.Layers {
		g := kitLayerRE.FindStringSubmatch(l.MediaType)
		if g == nil {
			return Plan{}, fmt.Errorf("%w: layer %d has media type %q, not a KitOps layer", ErrUnsupported, i, l.MediaType)
		}
		p.Layers = append(p.Layers, Layer{Desc: l, Archive: true, Gzip: g[2] != "", Role: g[1]})
	}
	return p, nil
}

// ErrUnsafePath: a file path of the artifact is absolute, escapes the
// version, or is used twice.
var ErrUnsafePath = errors.New("oci: unsafe file path")

// ValidatePath accepts what can be a file of a version: a valid object
// store key (objstore.ValidateKey: relative, slash-separated, no empty, "."
// or ".." segments, no control characters, valid UTF-8, at most 1024
// bytes) without backslashes or a drive letter.
func ValidatePath(p string) error {
	if strings.Contains(p, "\\") || len(p) >= 2 && p[1] == ':' {
		return fmt.Errorf("%w: %q is not a relative slash-separated path", ErrUnsafePath, p)
	}
	if err := objstore.ValidateKey(p); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsafePath, err)
	}
	return nil
}

// Extractor unpacks archive layers within bounds shared across the layers
// of one pull: the number of entries, their total size, and unique paths.
type Extractor struct {
	Limits Limits
	// Root, when set, is a directory whose files are stored without it.
	Root  string
	seen  map[string]bool
	n     int
	bytes int64
}

// Extract reads a (gzipped) tar from r and calls put for every regular
// file with its cleaned path, a reader of exactly size bytes and the size.
// Directories are skipped; links, devices and anything else refuse the
// archive, as do unsafe or repeated paths and exceeded bounds.
func (x *Extractor) Extract(r io.Reader, gz bool, put func(p string, r io.Reader, size int64) error) error {
	if x.seen == nil {
		x.seen = map[string]bool{}
		x.Limits = x.Limits.withDefaults()
	}
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return fmt.Errorf("%w: not gzip: %v", ErrUnsupported, err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: reading the tar: %v", ErrUnsupported, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		switch h.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		case tar.TypeXGlobalHeader:
			continue
		default:
			return fmt.Errorf("%w: entry %q is a link or special file (type %q); only regular files are extracted", ErrUnsafePath, h.Name, string(h.Typeflag))
		}
		if err := ValidatePath(name); err != nil || path.Clean(name) != name {
			return fmt.Errorf("%w: archive entry %q", ErrUnsafePath, h.Name)
		}
		if x.Root != "" && strings.HasPrefix(name, x.Root+"/") {
			name = strings.TrimPrefix(name, x.Root+"/")
		}
		if x.seen[name] {
			return fmt.Errorf("%w: %q is in the artifact twice", ErrUnsafePath, name)
		}
		x.seen[name] = true
		x.n++
		if x.n > x.Limits.MaxEntries {
			return fmt.Errorf("%w: more than %d files in the archives", ErrLimit, x.Limits.MaxEntries)
		}
		if h.Size < 0 || x.bytes+h.Size > x.Limits.MaxTotalBytes {
			return fmt.Errorf("%w: the archives unpack to more than %d bytes", ErrLimit, x.Limits.MaxTotalBytes)
		}
		x.bytes += h.Size
		if err := put(name, io.LimitReader(tr, h.Size), h.Size); err != nil {
			return err
		}
	}
}

// Files are the paths extracted so far.
func (x *Extractor) Files() int { return x.n }
