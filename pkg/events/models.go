package events

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The model flow: an upload or a hub pull puts a model version's files in the
// object store and publishes ModelUploadedV1; the guardian scans them and
// publishes its verdict (ModelVerdictV2; the MODELS stream also holds
// ModelVerdictV1 from before); the catalog (BucketCatalog) records the
// outcome. Only a published version can be deployed or served. Every model
// event is keyed by model name (subjects.go).

// Model kinds.
const (
	ModelKindModel   = "model"
	ModelKindAdapter = "adapter"
)

// Model sources.
const (
	ModelSourceUpload = "upload"
	ModelSourceHub    = "hub"
	// ModelSourceOCI: an OCI artifact (ORAS files or a KitOps ModelKit):
	// Repo is REGISTRY/REPOSITORY, Revision the reference asked for (a tag
	// or a digest) and Commit the manifest digest it was pinned to
	// (sha256:...), the fields a hub source fills the same way.
	ModelSourceOCI = "oci"
	// ModelSourceBucket: a folder of a tenant's model bucket (S3), imported
	// by the guardian when its manifest appeared or changed.
	ModelSourceBucket = "bucket"
)

// Verdict statuses.
const (
	VerdictPublished = "published"
	VerdictRejected  = "rejected"
)

// ModelFile is one file of a model version.
type ModelFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ModelSource says where a version came from: an upload, a hub repository
// pinned to a commit, an OCI artifact pinned to its manifest digest, or a
// folder of a tenant's model bucket: Repo "s3://<bucket>/<folder key
// prefix>" and Commit its manifest's ETag (the owner tenant is the catalog
// entry's and the event's tenant).
type ModelSource struct {
	Type     string `json:"type"` // upload, hub
	Repo     string `json:"repo,omitempty"`
	Revision string `json:"revision,omitempty"`
	Commit   string `json:"commit,omitempty"` // an OCI source's manifest digest
}

func (s ModelSource) validate() error {
	switch s.Type {
	case ModelSourceUpload:
		return nil
	case ModelSourceHub:
		if s.Repo == "" || s.Commit == "" {
			return errors.New("a hub source needs repo and commit")
		}
		return nil
	case ModelSourceOCI:
		if s.Repo == "" || !strings.HasPrefix(s.Commit, "sha256:") {
			return errors.New("an oci source needs repo and its manifest digest as commit")
		}
		return nil
	case ModelSourceBucket:
		if !strings.HasPrefix(s.Repo, "s3://") || s.Commit == "" {
			return errors.New("a bucket source needs repo (s3://bucket/prefix/) and commit (the manifest's ETag)")
		}
		return nil
	}
	return fmt.Errorf("source type %q is not upload, hub, oci or bucket", s.Type)
}

// ModelReason is one typed cause of a rejection: a stable code, the file it
// concerns (empty for the whole version) and a human message.
type ModelReason struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	File    string `json:"file,omitempty"`
}

// ModelUploadedV1: a version's files are in the object store under Prefix
// (the key of a file is Prefix + Path) and must be scanned.
type ModelUploadedV1 struct {
	Name      string      `json:"name"`
	Version   int         `json:"version"`
	Kind      string      `json:"kind"`
	BaseModel string      `json:"base_model,omitempty"`
	Source    ModelSource `json:"source"`
	Prefix    string      `json:"prefix"`
	// Files are as stored: sizes and SHA-256 computed while writing.
	Files []ModelFile `json:"files"`
	// Manifest holds the expected SHA-256 of files (path -> hex) given by
	// the uploader or the hub's LFS pointers; the guardian compares them.
	Manifest   map[string]string `json:"manifest,omitempty"`
	UploadedAt time.Time         `json:"uploaded_at"`
}

func (ModelUploadedV1) EventType() string { return TypeModelUploadedV1 }

func (e ModelUploadedV1) Subject() string { return Subject(TypeModelUploadedV1, e.Name) }

func (e ModelUploadedV1) Validate() error {
	errs := []error{validateModelRef(e.Name, e.Version, e.Kind, e.BaseModel), e.Source.validate()}
	if e.Prefix == "" || !strings.HasSuffix(e.Prefix, "/") {
		errs = append(errs, errors.New("prefix is required and ends with /"))
	}
	for _, f := range e.Files {
		if f.Path == "" || f.Size < 0 {
			errs = append(errs, fmt.Errorf("file %q: path is required and size must not be negative", f.Path))
		}
	}
	return errors.Join(errs...)
}

// ModelVerdictV1 is the guardian's verdict on a version, as shipped first.
// Any error during the scan is a rejection (fail-closed). Shipped: never
// change its fields; ModelVerdictV2 adds to it.
type ModelVerdictV1 struct {
	Name    string        `json:"name"`
	Version int           `json:"version"`
	Status  string        `json:"status"` // published, rejected
	Reasons []ModelReason `json:"reasons,omitempty"`
	Files   []ModelFile   `json:"files"`
	// License is an SPDX-like id, or "needs-review".
	License string `json:"license"`
	// Parameters is computed from the tensor shapes.
	Parameters int64 `json:"parameters"`
	// DTypes holds parameters per dtype.
	DTypes    map[string]int64 `json:"dtypes,omitempty"`
	Format    string           `json:"format,omitempty"` // safetensors, gguf
	ScannedAt time.Time        `json:"scanned_at"`
}

func (ModelVerdictV1) EventType() string { return TypeModelVerdictV1 }

func (e ModelVerdictV1) Subject() string { return Subject(TypeModelVerdictV1, e.Name) }

// Latest implements ModelVerdict: a v1 verdict has no licence name or link
// and no chat template.
func (e ModelVerdictV1) Latest() ModelVerdictV2 { return ModelVerdictV2{ModelVerdictV1: e} }

func (e ModelVerdictV1) Validate() error {
	errs := []error{validateModelRef(e.Name, e.Version, ModelKindModel, "")}
	switch e.Status {
	case VerdictPublished:
		if len(e.Reasons) > 0 {
			errs = append(errs, errors.New("a published verdict has no reasons"))
		}
	case VerdictRejected:
		if len(e.Reasons) == 0 {
			errs = append(errs, errors.New("a rejected verdict needs at least one reason"))
		}
	default:
		errs = append(errs, fmt.Errorf("status %q is not published or rejected", e.Status))
	}
	for _, r := range e.Reasons {
		if r.Code == "" || r.Message == "" {
			errs = append(errs, errors.New("every reason needs a code and a message"))
			break
		}
	}
	return errors.Join(errs...)
}

// ModelVerdict is a verdict of any version read as the current one: what a
// consumer of verdicts takes, since the MODELS stream holds both v1 and v2.
type ModelVerdict interface {
	Event
	Latest() ModelVerdictV2
}

// ModelVerdictV2 is ModelVerdictV1 plus what the guardian learned to read
// since: the model card's licence name and link, and the chat template. Its
// JSON is V1's fields, flat, plus these.
type ModelVerdictV2 struct {
	ModelVerdictV1
	// LicenseName and LicenseLink are the model card's license_name and
	// license_link: what the reviewer of a "needs-review" licence reads.
	LicenseName string `json:"license_name,omitempty"`
	LicenseLink string `json:"license_link,omitempty"`
	// ChatTemplate is the upload's chat template, as text for review; it is
	// never rendered. ChatTemplateTruncated: cut at the scanner's bound.
	ChatTemplate          string `json:"chat_template,omitempty"`
	ChatTemplateTruncated bool   `json:"chat_template_truncated,omitempty"`
}

func (ModelVerdictV2) EventType() string { return TypeModelVerdictV2 }

func (e ModelVerdictV2) Subject() string { return Subject(TypeModelVerdictV2, e.Name) }

// Latest implements ModelVerdict.
func (e ModelVerdictV2) Latest() ModelVerdictV2 { return e }

func (e ModelVerdictV2) Validate() error { return e.ModelVerdictV1.Validate() }

// ModelPullRequestedV1 asks the mirror to pull Repo at Revision into the
// catalog under Name. The hub token is the guardian's own configuration and
// never travels on the bus. An OCI pull has Repo oci://REGISTRY/REPOSITORY
// and Revision a tag or sha256 digest; its Kind may be empty (the artifact
// decides: a ModelKit's Kitfile or an aiforge artifact's annotations), and
// registry credentials are the guardian's too.
type ModelPullRequestedV1 struct {
	PullID      string    `json:"pull_id"`
	Name        string    `json:"name"`
	Kind        string    `json:"kind"`
	BaseModel   string    `json:"base_model,omitempty"`
	Repo        string    `json:"repo"`
	Revision    string    `json:"revision"`
	RequestedAt time.Time `json:"requested_at"`
}

func (ModelPullRequestedV1) EventType() string { return TypeModelPullRequestedV1 }

func (e ModelPullRequestedV1) Subject() string { return Subject(TypeModelPullRequestedV1, e.Name) }

func (e ModelPullRequestedV1) Validate() error {
	kind := e.Kind
	if kind == "" && strings.HasPrefix(e.Repo, "oci://") {
		kind = ModelKindModel // the artifact decides; only the name is checked
	}
	errs := []error{validateModelRef(e.Name, 1, kind, e.BaseModel)}
	if e.PullID == "" || e.Repo == "" || e.Revision == "" {
		errs = append(errs, errors.New("pull_id, repo and revision are required"))
	}
	return errors.Join(errs...)
}

func validateModelRef(name string, version int, kind, base string) error {
	var errs []error
	if name == "" {
		errs = append(errs, errors.New("name is required"))
	}
	if version < 1 {
		errs = append(errs, fmt.Errorf("version %d must be at least 1", version))
	}
	switch kind {
	case ModelKindModel:
	case ModelKindAdapter:
		if base == "" {
			errs = append(errs, errors.New("an adapter needs base_model"))
		}
	default:
		errs = append(errs, fmt.Errorf("kind %q is not model or adapter", kind))
	}
	return errors.Join(errs...)
}
