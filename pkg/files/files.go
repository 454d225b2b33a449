// Package files is the record of a file of OpenAI's Files API, shared by the
// edge (which serves the API and stores uploads) and the batch service
// (which reads batch input files and writes their output and error files):
// bytes in the object store under the tenant's prefix, the record in
// events.BucketFiles under the tenant's key prefix, so another tenant's
// file id is simply not found.
package files

import (
	"github.com/aiforge/aiforge/pkg/objstore"
)

// Purposes of files.
const (
	PurposeAssistants = "assistants"
	PurposeUserData   = "user_data"
	// PurposeBatch is a Batch API input file (JSONL request lines).
	PurposeBatch = "batch"
	// PurposeBatchOutput is a batch's output or error file, written by the
	// batch service; clients cannot upload it.
	PurposeBatchOutput = "batch_output"
)

// UploadPurposes are the purposes a client may upload a file with.
var UploadPurposes = []string{PurposeAssistants, PurposeUserData, PurposeBatch}

// StatusProcessed is the status of every stored file.
const StatusProcessed = "processed"

// File is OpenAI's file object.
type File struct {
	ID        string  `json:"id"`
	Object    string  `json:"object"`
	Bytes     int64   `json:"bytes"`
	CreatedAt int64   `json:"created_at"`
	ExpiresAt *int64  `json:"expires_at,omitempty"`
	Filename  string  `json:"filename"`
	Purpose   string  `json:"purpose"`
	Status    string  `json:"status"`
	SHA256    string  `json:"sha256,omitempty"`
	Tenant    string  `json:"-"`
	ObjectKey string  `json:"-"`
	Details   *string `json:"status_details,omitempty"`
}

// Record is what the bucket stores (the tenant and object key included).
type Record struct {
	File
	Tenant    string `json:"tenant"`
	ObjectKey string `json:"object_key"`
	// Lines counts the newline-terminated lines of a batch input file
	// (purpose batch), counted as it was uploaded, so a batch can be
	// refused up front when its tenant's enqueued limit would be passed.
	Lines int64 `json:"lines,omitempty"`
}

// Key is the record's key in events.BucketFiles.
func Key(tenant, id string) string { return tenant + "." + id }

// ObjectKey is where a file's bytes are stored.
func ObjectKey(tenant, id string) string { return objstore.TenantPrefix(tenant) + "files/" + id }
