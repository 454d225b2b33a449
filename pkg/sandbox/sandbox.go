// Package sandbox is what the edge and the sandbox service share about
// agent code sandboxes: OpenAI's container and container file objects, the
// aiforge exec extension, the limits, the error codes, the record of a
// container in events.BucketContainers and the request/reply contract on
// the bus (events.SandboxRequest, events.SandboxContainer).
//
// A container is a gVisor sandbox owned by one sandbox service replica.
// The replica that creates it writes its record and subscribes to its
// subject (events.SandboxContainer(id, op)); every call on the container
// goes there, so a container whose replica is gone answers "no
// responders", which the edge reports as not found. Requests carry the
// caller's tenant and key in headers (bridge.HdrTenant, bridge.HdrKeyID),
// trusted because only the edge may publish on aiforge.sandbox.v1.>; a
// container of another tenant is answered as not found.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"
)

// Object names, as OpenAI's.
const (
	ObjectContainer        = "container"
	ObjectContainerFile    = "container.file"
	ObjectContainerDeleted = "container.deleted"
	ObjectFileDeleted      = "container.file.deleted"
	ObjectExec             = "container.exec"
	ObjectList             = "list"
)

// Statuses of a container.
const (
	StatusRunning = "running"
	StatusExpired = "expired"
	StatusDeleted = "deleted"
)

// Memory limits a container may ask for (OpenAI's), and the default.
var MemoryLimits = []string{"1g", "4g", "16g", "64g"}

// DefaultMemoryLimit is OpenAI's default.
const DefaultMemoryLimit = "1g"

// MemoryBytes is a memory limit's size in bytes, or an error naming the
// accepted values.
func MemoryBytes(limit string) (int64, error) {
	switch limit {
	case "1g":
		return 1 << 30, nil
	case "4g":
		return 4 << 30, nil
	case "16g":
		return 16 << 30, nil
	case "64g":
		return 64 << 30, nil
	}
	return 0, fmt.Errorf("memory_limit %q is not one of 1g, 4g, 16g, 64g", limit)
}

// Languages an exec may run.
const (
	LanguagePython = "python"
	LanguageBash   = "bash"
)

// Network policy types, as OpenAI's.
const (
	NetworkDisabled  = "disabled"
	NetworkAllowlist = "allowlist"
)

// Limits of the API (the service may configure tighter ones).
const (
	// DefaultExpiresMinutes is how long an idle container lives by default.
	DefaultExpiresMinutes = 20
	// MaxExpiresMinutes bounds expires_after.minutes.
	MaxExpiresMinutes = 24 * 60
	// MaxNameLen bounds a container's name.
	MaxNameLen = 256
	// MaxFileIDs bounds file_ids at create.
	MaxFileIDs = 100
	// MaxAllowedDomains bounds network_policy.allowed_domains.
	MaxAllowedDomains = 64
	// MaxCodeBytes bounds an exec's code.
	MaxCodeBytes = 256 << 10
	// DefaultTimeout is an exec's wall-clock limit when none is asked.
	DefaultTimeout = 30 * time.Second
	// MaxTimeout bounds timeout_ms.
	MaxTimeout = 10 * time.Minute
	// MaxFileBytes bounds one container file (upload or download).
	MaxFileBytes = 64 << 20
	// MaxPathLen bounds a container file's path.
	MaxPathLen = 1024
)

// Error codes, stable, in OpenAI error bodies (pkg/contracts maps them to
// HTTP statuses at the edge).
const (
	// CodeContainerNotFound: no container with that id for this tenant (or
	// its replica is gone).
	CodeContainerNotFound = "container_not_found"
	// CodeFileNotFound: no such file in the container.
	CodeFileNotFound = "container_file_not_found"
	// CodeContainerExpired: the container expired or was deleted.
	CodeContainerExpired = "container_expired"
	// CodeInvalidPath: a file name that is empty, too long, not UTF-8,
	// absolute outside /mnt/data, or climbing out with "..".
	CodeInvalidPath = "invalid_path"
	// CodeFileTooLarge: a file over MaxFileBytes, or the sandbox's disk is
	// full.
	CodeFileTooLarge = "file_too_large"
	// CodeExecTimeout: the code ran past its wall-clock limit and was
	// killed; the sandbox was replaced.
	CodeExecTimeout = "exec_timeout"
	// CodeCPULimit: the code used up its CPU time.
	CodeCPULimit = "cpu_limit_exceeded"
	// CodeMemoryLimit: the code went over the container's memory limit
	// and the sandbox was killed and replaced.
	CodeMemoryLimit = "memory_limit_exceeded"
	// CodePidsLimit: the code started more processes and threads than the
	// sandbox may run (a fork bomb); the sandbox was stopped and replaced.
	CodePidsLimit = "pids_limit_exceeded"
	// CodeSandboxBusy: another exec is running in the container.
	CodeSandboxBusy = "sandbox_busy"
	// CodeSandboxCapacity: this replica runs as many sandboxes as it may.
	CodeSandboxCapacity = "sandbox_capacity_exceeded"
	// CodeSandboxUnavailable: the sandbox runtime (runsc) is missing or
	// failing on this replica.
	CodeSandboxUnavailable = "sandbox_unavailable"
	// CodeSandboxCrashed: the sandbox died for another reason.
	CodeSandboxCrashed = "sandbox_crashed"
	// CodeInvalidRequest: a bad field (its param names it).
	CodeInvalidRequest = "invalid_request"
	// CodeDomainNotAllowed: an allow-list entry that is not a domain name,
	// or that names an address.
	CodeDomainNotAllowed = "domain_not_allowed"
)

// ExpiresAfter is OpenAI's container expiry.
type ExpiresAfter struct {
	Anchor  string `json:"anchor"`
	Minutes int    `json:"minutes"`
}

// NetworkPolicy is OpenAI's network policy: disabled (the default), or an
// allow-list of domain names reached through the sandbox's egress proxy,
// which refuses every loopback, link-local, private and cluster address
// whatever a name resolves to.
type NetworkPolicy struct {
	Type           string   `json:"type"`
	AllowedDomains []string `json:"allowed_domains,omitempty"`
}

// Container is OpenAI's container object.
type Container struct {
	ID            string         `json:"id"`
	Object        string         `json:"object"`
	CreatedAt     int64          `json:"created_at"`
	Status        string         `json:"status"`
	ExpiresAfter  ExpiresAfter   `json:"expires_after"`
	LastActiveAt  int64          `json:"last_active_at"`
	Name          string         `json:"name"`
	MemoryLimit   string         `json:"memory_limit"`
	NetworkPolicy *NetworkPolicy `json:"network_policy,omitempty"`
}

// CreateRequest is the body of POST /v1/containers.
type CreateRequest struct {
	Name          string         `json:"name"`
	ExpiresAfter  *ExpiresAfter  `json:"expires_after,omitempty"`
	FileIDs       []string       `json:"file_ids,omitempty"`
	MemoryLimit   string         `json:"memory_limit,omitempty"`
	NetworkPolicy *NetworkPolicy `json:"network_policy,omitempty"`
}

// FieldError is a request field that is wrong.
type FieldError struct {
	Param   string
	Code    string
	Message string
}

func (e *FieldError) Error() string { return e.Param + ": " + e.Message }

func fieldErr(param, code, format string, a ...any) *FieldError {
	return &FieldError{Param: param, Code: code, Message: fmt.Sprintf(format, a...)}
}

// Normalize fills defaults and checks every field; the error is a
// *FieldError.
func (r *CreateRequest) Normalize() error {
	if len(r.Name) > MaxNameLen || !utf8.ValidString(r.Name) {
		return fieldErr("name", CodeInvalidRequest, "name must be UTF-8 of at most %d bytes", MaxNameLen)
	}
	if r.ExpiresAfter == nil {
		r.ExpiresAfter = &ExpiresAfter{Anchor: "last_active_at", Minutes: DefaultExpiresMinutes}
	}
	if r.ExpiresAfter.Anchor == "" {
		r.ExpiresAfter.Anchor = "last_active_at"
	}
	if r.ExpiresAfter.Anchor != "last_active_at" {
		return fieldErr("expires_after.anchor", CodeInvalidRequest, "anchor must be last_active_at")
	}
	if r.ExpiresAfter.Minutes < 1 || r.ExpiresAfter.Minutes > MaxExpiresMinutes {
		return fieldErr("expires_after.minutes", CodeInvalidRequest, "minutes must be between 1 and %d", MaxExpiresMinutes)
	}
	if len(r.FileIDs) > MaxFileIDs {
		return fieldErr("file_ids", CodeInvalidRequest, "at most %d file_ids", MaxFileIDs)
	}
	for i, id := range r.FileIDs {
		if id == "" || len(id) > 128 {
			return fieldErr(fmt.Sprintf("file_ids[%d]", i), CodeInvalidRequest, "not a file id")
		}
	}
	if r.MemoryLimit == "" {
		r.MemoryLimit = DefaultMemoryLimit
	}
	if _, err := MemoryBytes(r.MemoryLimit); err != nil {
		return fieldErr("memory_limit", CodeInvalidRequest, "%v", err)
	}
	if r.NetworkPolicy == nil {
		r.NetworkPolicy = &NetworkPolicy{Type: NetworkDisabled}
	}
	switch r.NetworkPolicy.Type {
	case NetworkDisabled:
		if len(r.NetworkPolicy.AllowedDomains) > 0 {
			return fieldErr("network_policy.allowed_domains", CodeInvalidRequest, "allowed_domains needs type allowlist")
		}
	case NetworkAllowlist:
		n := len(r.NetworkPolicy.AllowedDomains)
		if n == 0 || n > MaxAllowedDomains {
			return fieldErr("network_policy.allowed_domains", CodeInvalidRequest, "an allowlist names 1 to %d domains", MaxAllowedDomains)
		}
		for i, d := range r.NetworkPolicy.AllowedDomains {
			nd, err := NormalizeDomain(d)
			if err != nil {
				return fieldErr(fmt.Sprintf("network_policy.allowed_domains[%d]", i), CodeDomainNotAllowed, "%v", err)
			}
			r.NetworkPolicy.AllowedDomains[i] = nd
		}
	default:
		return fieldErr("network_policy.type", CodeInvalidRequest, "type must be disabled or allowlist")
	}
	return nil
}

// NormalizeDomain lower-cases a domain name of an allow-list and checks it
// is one: labels of letters, digits and hyphens, at least two of them, an
// optional leading "*." for every subdomain, never an IP address or
// "localhost".
func NormalizeDomain(d string) (string, error) {
	d = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
	name := strings.TrimPrefix(d, "*.")
	if name == "" || len(name) > 253 {
		return "", errors.New("not a domain name")
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return "", fmt.Errorf("%q is not a fully qualified domain name", d)
	}
	allDigits := true
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("%q is not a domain name", d)
		}
		for _, c := range l {
			switch {
			case c >= 'a' && c <= 'z', c == '-':
				allDigits = false
			case c >= '0' && c <= '9':
			default:
				return "", fmt.Errorf("%q is not a domain name", d)
			}
		}
	}
	if allDigits {
		return "", fmt.Errorf("%q is an address, not a domain name", d)
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") || strings.HasSuffix(name, ".local") || strings.HasSuffix(name, ".internal") {
		return "", fmt.Errorf("%q names a local host", d)
	}
	return d, nil
}

// DomainAllowed reports whether host matches an allow-list (normalized
// entries; "*.example.com" matches every subdomain of example.com, not
// example.com itself).
func DomainAllowed(allow []string, host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, a := range allow {
		if rest, ok := strings.CutPrefix(a, "*."); ok {
			if strings.HasSuffix(host, "."+rest) {
				return true
			}
		} else if host == a {
			return true
		}
	}
	return false
}

// File sources, as OpenAI's: uploaded by the user, or written by code.
const (
	SourceUser      = "user"
	SourceAssistant = "assistant"
)

// DataDir is where a container's files live inside the sandbox.
const DataDir = "/mnt/data"

// File is OpenAI's container file object.
type File struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	CreatedAt   int64  `json:"created_at"`
	Bytes       int64  `json:"bytes"`
	ContainerID string `json:"container_id"`
	Path        string `json:"path"`
	Source      string `json:"source"`
}

// CleanPath turns a file name from a request into its path in the
// sandbox: relative names are under DataDir, absolute ones must be; "..",
// NUL, control characters and empty components are refused, never
// resolved. The sandbox resolves the result itself, inside the sandbox,
// without following symbolic links out of DataDir.
func CleanPath(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty file name")
	}
	if len(name) > MaxPathLen || !utf8.ValidString(name) {
		return "", fmt.Errorf("file name must be UTF-8 of at most %d bytes", MaxPathLen)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return "", errors.New("file name holds a control character")
		}
	}
	p := name
	if !strings.HasPrefix(p, "/") {
		p = DataDir + "/" + p
	}
	for _, part := range strings.Split(p, "/")[1:] {
		if part == ".." {
			return "", errors.New(`file name climbs with ".."`)
		}
	}
	c := path.Clean(p)
	if !strings.HasPrefix(c, DataDir+"/") {
		return "", fmt.Errorf("file must be under %s", DataDir)
	}
	return c, nil
}

// ExecRequest is the body of POST /v1/containers/{id}/exec.
type ExecRequest struct {
	Language  string `json:"language"`
	Code      string `json:"code"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	Stream    bool   `json:"stream,omitempty"`
}

// Normalize checks an exec request; the error is a *FieldError.
func (r *ExecRequest) Normalize() error {
	switch r.Language {
	case LanguagePython, LanguageBash:
	case "":
		return fieldErr("language", "missing_required_parameter", "language is required: python or bash")
	default:
		return fieldErr("language", CodeInvalidRequest, "language must be python or bash")
	}
	if r.Code == "" {
		return fieldErr("code", "missing_required_parameter", "code is required")
	}
	if len(r.Code) > MaxCodeBytes {
		return fieldErr("code", CodeInvalidRequest, "code is over %d bytes", MaxCodeBytes)
	}
	if !utf8.ValidString(r.Code) || strings.ContainsRune(r.Code, 0) {
		return fieldErr("code", CodeInvalidRequest, "code must be UTF-8 without NUL")
	}
	if r.TimeoutMS < 0 || time.Duration(r.TimeoutMS)*time.Millisecond > MaxTimeout {
		return fieldErr("timeout_ms", CodeInvalidRequest, "timeout_ms must be between 1 and %d", MaxTimeout.Milliseconds())
	}
	if r.TimeoutMS == 0 {
		r.TimeoutMS = DefaultTimeout.Milliseconds()
	}
	return nil
}

// ExecResult is the answer to an exec (the last event of a streamed one).
// Error, when set, says why the code did not finish on its own (a timeout,
// a limit); ExitCode is then -1 unless the process exited.
type ExecResult struct {
	ID              string     `json:"id"`
	Object          string     `json:"object"`
	ContainerID     string     `json:"container_id"`
	Stdout          string     `json:"stdout"`
	Stderr          string     `json:"stderr"`
	ExitCode        int        `json:"exit_code"`
	DurationMS      int64      `json:"duration_ms"`
	CPUMS           int64      `json:"cpu_ms"`
	StdoutTruncated bool       `json:"stdout_truncated,omitempty"`
	StderrTruncated bool       `json:"stderr_truncated,omitempty"`
	Files           []File     `json:"files"`
	Error           *ExecError `json:"error,omitempty"`
}

// ExecError is why an exec was stopped.
type ExecError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Stream event types of a streamed exec (SSE "event:" names, and the type
// field of each data line).
const (
	EventStdout = "exec.stdout"
	EventStderr = "exec.stderr"
	EventDone   = "exec.completed"
	EventError  = "error"
)

// ExecChunk is one piece of a streamed exec's output.
type ExecChunk struct {
	Type string `json:"type"`
	Data string `json:"data"`
}

// Record is a container's record in events.BucketContainers, keyed by
// RecordKey: the container object plus what the service needs to find and
// bill it.
type Record struct {
	Container
	Tenant string `json:"tenant"`
	KeyID  string `json:"key_id"`
	// Node is the sandbox replica that runs it.
	Node string `json:"node"`
	// Files are the container's files by id.
	Files map[string]File `json:"files,omitempty"`
}

// RecordKey is a container's key: tenant, then id, so one tenant's
// containers list with one key filter.
func RecordKey(tenant, id string) string { return tenant + "." + id }

// Marshal encodes a record.
func (r *Record) Marshal() ([]byte, error) { return json.Marshal(r) }

// Bus operations: the last token of events.SandboxRequest (create, list)
// and events.SandboxContainer (the rest).
const (
	OpCreate      = "create"
	OpList        = "list"
	OpGet         = "get"
	OpDelete      = "delete"
	OpExec        = "exec"
	OpFileCreate  = "file_create"
	OpFileList    = "file_list"
	OpFileGet     = "file_get"
	OpFileContent = "file_content"
	OpFileDelete  = "file_delete"
)

// ListRequest lists a tenant's containers (OpList) or a container's files
// (OpFileList), OpenAI's cursor pagination.
type ListRequest struct {
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
	Order string `json:"order,omitempty"`
	Name  string `json:"name,omitempty"`
}

// List is OpenAI's list object.
type List[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	FirstID string `json:"first_id"`
	LastID  string `json:"last_id"`
	HasMore bool   `json:"has_more"`
}

// FileRequest names a file of a container (OpFileGet, OpFileContent,
// OpFileDelete) or adds one (OpFileCreate): from the tenant's files
// (FileID, read from the object store), or from an upload the edge stored
// at ObjectKey in the object store (Name, the upload's file name; Bytes).
type FileRequest struct {
	ID        string `json:"id,omitempty"`
	FileID    string `json:"file_id,omitempty"`
	ObjectKey string `json:"object_key,omitempty"`
	Name      string `json:"name,omitempty"`
	Bytes     int64  `json:"bytes,omitempty"`
}

// ContentReply answers OpFileContent: the service copied the file out of
// the sandbox to ObjectKey in the object store, which the edge streams to
// the client and removes.
type ContentReply struct {
	File      File   `json:"file"`
	ObjectKey string `json:"object_key"`
}

// UploadKey is where the edge stores an upload for a container, and
// ContentKey where the service copies a file out: both under
// "containers/<tenant>/".
func UploadKey(tenant, container, token string) string {
	return "containers/" + tenant + "/" + container + "/in/" + token
}

// ContentKey is where a file's content is copied out for a download.
func ContentKey(tenant, container, token string) string {
	return "containers/" + tenant + "/" + container + "/out/" + token
}

// Deleted answers a delete.
type Deleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// Reply headers of the bus contract. A reply with HdrStatus other than
// 200 carries an ErrorBody; a streamed exec sends ExecChunk messages with
// HdrEvent set to their type, then one message with HdrEvent EventDone
// carrying the ExecResult (or EventError with an ErrorBody).
const (
	HdrStatus = "Aiforge-Sandbox-Status"
	HdrEvent  = "Aiforge-Sandbox-Event"
	// HdrStream asks for a streamed exec; its value is the subject the
	// chunks go to (under the caller's events.SandboxReplies).
	HdrStream = "Aiforge-Sandbox-Stream"
)

// ErrorBody is a failed call's error: an HTTP status and a stable code.
type ErrorBody struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
}

func (e *ErrorBody) Error() string {
	return fmt.Sprintf("sandbox: %d %s: %s", e.Status, e.Code, e.Message)
}
