// Package ociref parses the OCI artifact references that `aiforge models
// pull` and `push` take: oci://REGISTRY/REPOSITORY:TAG or
// oci://REGISTRY/REPOSITORY@sha256:HEX. The grammar is the distribution
// spec's, stricter where it is loose (one of tag or digest, sha256 only), so
// that the edge refuses at once what the guardian could never pull.
package ociref

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Scheme prefixes an OCI reference.
const Scheme = "oci://"

// Ref is a parsed reference: exactly one of Tag and Digest is set.
type Ref struct {
	Registry   string // host[:port]
	Repository string // lower-case path, e.g. acme/lora
	Tag        string
	Digest     string // sha256:<64 hex>
}

var (
	registryRE = regexp.MustCompile(`^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*(?::[0-9]{1,5})?$`)
	repoRE     = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$`)
	tagRE      = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
	digestRE   = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
)

// ErrInvalid wraps every parse failure.
var ErrInvalid = errors.New("invalid OCI reference")

// IsOCI reports whether s is meant as an OCI reference (it may still be
// invalid).
func IsOCI(s string) bool { return strings.HasPrefix(s, Scheme) }

// Parse parses oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:HEX.
func Parse(s string) (Ref, error) {
	if !IsOCI(s) {
		return Ref{}, fmt.Errorf("%w: %q does not start with %s", ErrInvalid, s, Scheme)
	}
	rest := strings.TrimPrefix(s, Scheme)
	if len(rest) > 512 {
		return Ref{}, fmt.Errorf("%w: longer than 512 characters", ErrInvalid)
	}
	var r Ref
	name := rest
	if at := strings.IndexByte(rest, '@'); at >= 0 {
		name, r.Digest = rest[:at], rest[at+1:]
		if !digestRE.MatchString(r.Digest) {
			return Ref{}, fmt.Errorf("%w: digest %q is not sha256:<64 lower-case hex>", ErrInvalid, r.Digest)
		}
	}
	reg, repo, ok := strings.Cut(name, "/")
	if !ok {
		return Ref{}, fmt.Errorf("%w: %q has no repository (oci://REGISTRY/REPO:TAG)", ErrInvalid, s)
	}
	if colon := strings.LastIndexByte(repo, ':'); colon >= 0 {
		if r.Digest != "" {
			return Ref{}, fmt.Errorf("%w: give either :TAG or @sha256:DIGEST, not both", ErrInvalid)
		}
		repo, r.Tag = repo[:colon], repo[colon+1:]
		if !tagRE.MatchString(r.Tag) {
			return Ref{}, fmt.Errorf("%w: tag %q", ErrInvalid, r.Tag)
		}
	}
	if r.Tag == "" && r.Digest == "" {
		return Ref{}, fmt.Errorf("%w: %q names neither :TAG nor @sha256:DIGEST", ErrInvalid, s)
	}
	if !registryRE.MatchString(reg) {
		return Ref{}, fmt.Errorf("%w: registry %q is not a lower-case host[:port]", ErrInvalid, reg)
	}
	if len(repo) > 255 || !repoRE.MatchString(repo) {
		return Ref{}, fmt.Errorf("%w: repository %q is not a lower-case path of [a-z0-9._-] components", ErrInvalid, repo)
	}
	r.Registry, r.Repository = reg, repo
	return r, nil
}

// Reference is the tag or the digest.
func (r Ref) Reference() string {
	if r.Digest != "" {
		return r.Digest
	}
	return r.Tag
}

// Repo is oci://REGISTRY/REPOSITORY, the repository without reference.
func (r Ref) Repo() string { return Scheme + r.Registry + "/" + r.Repository }

// Name is REGISTRY/REPOSITORY, as recorded in a catalog source.
func (r Ref) Name() string { return r.Registry + "/" + r.Repository }

// String is the reference as Parse takes it.
func (r Ref) String() string {
	if r.Digest != "" {
		return r.Repo() + "@" + r.Digest
	}
	return r.Repo() + ":" + r.Tag
}

// Join builds a reference string from a repository (oci://REGISTRY/REPO)
// and a revision (a tag or a sha256 digest), as a pull request carries them.
func Join(repo, revision string) string {
	if strings.HasPrefix(revision, "sha256:") {
		return repo + "@" + revision
	}
	return repo + ":" + revision
}

// What `aiforge models push` publishes and the guardian reads back: an
// ORAS-style artifact, one layer per file titled with its path
// (org.opencontainers.image.title), and these manifest annotations.
const (
	ArtifactTypeModel   = "application/vnd.aiforge.model.v1"
	MediaTypeFile       = "application/vnd.aiforge.model.file.v1"
	AnnotationName      = "ai.aiforge.model.name"
	AnnotationVersion   = "ai.aiforge.model.version"
	AnnotationKind      = "ai.aiforge.model.kind"
	AnnotationBaseModel = "ai.aiforge.model.base_model"
	// AnnotationSHA256s holds {path: sha256 hex} of every file, as JSON.
	AnnotationSHA256s = "ai.aiforge.model.sha256s"
)
