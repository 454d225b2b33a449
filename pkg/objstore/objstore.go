// Package objstore stores blobs — uploaded documents, model weights, batch
// input and output files — behind one small interface with two backends: a
// local directory (the embedded default) and any S3-compatible service
// through minio-go (MinIO, Ceph RGW, AWS, versitygw).
//
// Every Put streams its body, computes the SHA-256 while writing and is
// atomic: readers see either the previous object or the complete new one,
// never a partial body, and a failed Put leaves nothing behind.
//
// Keys are relative, "/"-separated paths (see ValidateKey). WithPrefix confines
// a Store to one key prefix, and TenantPrefix names the prefix of a tenant, so
// a service hands each tenant a Store that cannot reach another tenant's keys.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes, that ValidateKey accepts (the S3
// limit).
const MaxKeyLen = 1024

// DefaultContentType is recorded when Put is given an empty content type.
const DefaultContentType = "application/octet-stream"

var (
	// ErrNotFound is returned (wrapped) by Get and Stat for a missing key.
	ErrNotFound = errors.New("objstore: object not found")
	// ErrInvalidKey is returned (wrapped) for a key or prefix that
	// ValidateKey rejects, or that a backend reserves for itself.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrConflict is returned (wrapped) by the Local backend when a key
	// collides with another key's directory: a filesystem cannot hold both
	// "a" and "a/b". S3 has no such limit.
	ErrConflict = errors.New("objstore: key conflicts with an existing key")
)

// Info describes a stored object.
type Info struct {
	// Key is the object's key as the caller named it (without any prefix a
	// WithPrefix wrapper added).
	Key string
	// Size is the body length in bytes.
	Size int64
	// SHA256 is the lowercase hex SHA-256 of the body, computed while the body
	// was written. List leaves it empty (use Stat); it is also empty for an S3
	// object that was written by something other than objstore.
	SHA256 string
	// ContentType is the media type given to Put (DefaultContentType when none
	// was given). List leaves it empty.
	ContentType string
	// Modified is when the object was last written.
	Modified time.Time
}

// Store is a flat namespace of immutable-per-version blobs.
type Store interface {
	// Put stores the body read from r under key, replacing any object there.
	// size is the exact body length, or -1 when unknown; a reader that
	// yields a different number of bytes fails the Put. An empty contentType
	// records DefaultContentType. Put is atomic: on any error (including an
	// error from r, which it wraps) no new or partial object is visible.
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Info, error)
	// Get opens the object for reading. The caller must Close the reader.
	// It returns an error wrapping ErrNotFound for a missing key.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat describes the object without reading its body; ErrNotFound for a
	// missing key.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the object. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List yields the objects whose keys start with prefix, sorted by key
	// (byte order). It fills Key, Size and Modified only. An error ends the
	// sequence. prefix need not end at a "/": "docs/re" matches "docs/report".
	List(ctx context.Context, prefix string) iter.Seq2[Info, error]
}

// ValidateKey reports whether key is a valid object key: non-empty, at most
// MaxKeyLen bytes of valid UTF-8, relative ("/"-separated, no leading "/"),
// with no empty, "." or ".." segments and no control characters. The error
// wraps ErrInvalidKey.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %s: longer than %d bytes", ErrInvalidKey, quoteKey(key), MaxKeyLen)
	}
	if err := checkChars(key); err != nil {
		return err
	}
	if key[0] == '/' {
		return fmt.Errorf("%w: %s: must be relative (no leading \"/\")", ErrInvalidKey, quoteKey(key))
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w: %s: empty path segment", ErrInvalidKey, quoteKey(key))
		case ".", "..":
			return fmt.Errorf("%w: %s: %q path segment", ErrInvalidKey, quoteKey(key), seg)
		}
	}
	return nil
}

// ValidatePrefix reports whether prefix is valid for List: empty, or its
// complete segments (everything up to the last "/") form a valid key and the
// trailing partial segment has no control characters. The error wraps
// ErrInvalidKey.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > MaxKeyLen {
		return fmt.Errorf("%w: prefix %s: longer than %d bytes", ErrInvalidKey, quoteKey(prefix), MaxKeyLen)
	}
	if err := checkChars(prefix); err != nil {
		return err
	}
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		if err := ValidateKey(prefix[:i]); err != nil {
			return fmt.Errorf("prefix %s: %w", quoteKey(prefix), err)
		}
	}
	return nil
}

func checkChars(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s: not valid UTF-8", ErrInvalidKey, quoteKey(s))
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s: control character %U", ErrInvalidKey, quoteKey(s), r)
		}
	}
	return nil
}

// quoteKey quotes a key for an error message, shortened so a hostile 1 KiB key
// does not flood logs.
func quoteKey(key string) string {
	const maxShown = 80
	if len(key) > maxShown {
		return fmt.Sprintf("%q…", key[:maxShown])
	}
	return fmt.Sprintf("%q", key)
}

// TenantPrefix returns the key prefix that holds a tenant's objects:
// "tenants/<tenant>/". The tenant is path-escaped into one segment, so a tenant
// named "a/b" can never reach into tenant "a"'s keys. An empty tenant, "." or
// ".." yield a prefix that WithPrefix refuses.
func TenantPrefix(tenant string) string {
	return "tenants/" + url.PathEscape(tenant) + "/"
}

// normalizeContentType returns the content type to record, or an error for a
// value that is not a media type (which also keeps header injection out).
func normalizeContentType(ct string) (string, error) {
	if ct == "" {
		return DefaultContentType, nil
	}
	if _, _, err := mime.ParseMediaType(ct); err != nil {
		return "", fmt.Errorf("objstore: invalid content type %q: %w", ct, err)
	}
	return ct, nil
}

func validatePut(key string, r io.Reader, size int64, contentType string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	if r == nil {
		return "", fmt.Errorf("objstore: put %s: nil reader", quoteKey(key))
	}
	if size < -1 {
		return "", fmt.Errorf("objstore: put %s: invalid size %d (use -1 for unknown)", quoteKey(key), size)
	}
	return normalizeContentType(contentType)
}

func notFound(key string) error {
	return fmt.Errorf("%w: %s", ErrNotFound, quoteKey(key))
}

// ctxReader fails reads once ctx is done, so a long copy stops on cancel.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// srcReader wraps the caller's reader: it records the first non-EOF error the
// caller's reader returned (so Put can wrap it whatever the backend did with
// it) and counts bytes.
type srcReader struct {
	r   io.Reader
	n   int64
	err error
}

func (s *srcReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n += int64(n)
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

// exactReader enforces a declared size: it returns io.EOF after exactly size
// bytes, errShort if the source ends before, and errLong if the source has
// more (detected by reading one byte past the end).
type exactReader struct {
	r    io.Reader
	left int64
	size int64
	key  string
	err  error
}

var errSizeMismatch = errors.New("objstore: body length does not match the declared size")

func (e *exactReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.left == 0 {
		var one [1]byte
		n, err := io.ReadFull(e.r, one[:])
		switch {
		case n > 0:
			e.err = fmt.Errorf("%w: %s: more than %d bytes", errSizeMismatch, quoteKey(e.key), e.size)
		case err == io.EOF:
			e.err = io.EOF
		default:
			e.err = err
		}
		return 0, e.err
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF {
		if e.left > 0 {
			e.err = fmt.Errorf("%w: %s: got %d of %d bytes", errSizeMismatch, quoteKey(e.key), e.size-e.left, e.size)
			return n, e.err
		}
		err = nil
	}
	return n, err
}

// finish checks that the source holds no bytes past the declared size; a
// consumer that stops after exactly size bytes never asks for them.
func (e *exactReader) finish() error {
	if e.err == nil && e.left > 0 {
		return fmt.Errorf("%w: %s: only %d of %d bytes consumed", errSizeMismatch, quoteKey(e.key), e.size-e.left, e.size)
	}
	var one [1]byte
	if _, err := e.Read(one[:]); err != io.EOF {
		return err
	}
	return nil
}

// bodyReader builds the reader a backend consumes: cancellable, error
// recording and, for a known size, length enforcing.
// finish (never nil) must be called after the consumer stops reading: it
// reports bytes beyond a declared size.
func bodyReader(ctx context.Context, key string, r io.Reader, size int64) (body io.Reader, src *srcReader, finish func() error) {
	src = &srcReader{r: r}
	body = ctxReader{ctx: ctx, r: src}
	if size < 0 {
		return body, src, func() error { return nil }
	}
	ex := &exactReader{r: body, left: size, size: size, key: key}
	return ex, src, ex.finish
}

// putError wraps a failed Put, making sure the caller's reader error is
// reachable with errors.Is even when the backend replaced it.
func putError(op, key string, err error, src *srcReader) error {
	if src != nil && src.err != nil && !errors.Is(err, src.err) {
		err = errors.Join(err, src.err)
	}
	return fmt.Errorf("objstore: %s %s: %w", op, quoteKey(key), err)
}
