package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// S3 part size limits (the S3 API's).
const (
	DefaultPartSize = 16 << 20
	MinPartSize     = 5 << 20
	MaxPartSize     = 5 << 30
	maxParts        = 10000
)

// StagingPrefix is where the S3 backend uploads bodies too large to buffer
// before it knows their SHA-256; see S3. Keys under it are reserved: Put, Get,
// Stat, Delete and List refuse them and List at the root hides them. Give the
// bucket a lifecycle rule expiring this prefix after a day and aborting
// incomplete multipart uploads, to collect leftovers of a crashed process.
const StagingPrefix = ".objstore-staging/"

// metaSHA256 is the user-metadata name of the body's SHA-256
// (x-amz-meta-sha256 on the wire).
const metaSHA256 = "Sha256"

// S3Config configures a Store on an S3-compatible service.
type S3Config struct {
	// Endpoint is host[:port] of the S3 API, without scheme (UseSSL picks
	// https). Required.
	Endpoint string
	// Region of the bucket; empty lets the client discover it.
	Region string
	// Bucket holds the objects. Required.
	Bucket string
	// AccessKeyID and SecretAccessKey sign requests. Required. The secret is
	// never logged nor included in errors.
	AccessKeyID     string
	SecretAccessKey string
	// UseSSL talks https to Endpoint.
	UseSSL bool
	// CreateBucket creates Bucket when it is missing; otherwise a missing
	// bucket fails NewS3.
	CreateBucket bool
	// PartSize is the multipart part size in bytes, and the largest body Put
	// buffers in memory to upload in one request. Bodies of unknown size can
	// be at most 10 000 parts (160 GiB at the 16 MiB default). 0 means
	// DefaultPartSize; otherwise between MinPartSize and MaxPartSize.
	PartSize int64
	// Logger receives warnings about best-effort cleanups. Optional.
	Logger *slog.Logger
}

// Validate reports every problem with the configuration.
func (c S3Config) Validate() error {
	var errs []error
	switch {
	case c.Endpoint == "":
		errs = append(errs, errors.New("objstore: S3Config.Endpoint is required"))
	case strings.Contains(c.Endpoint, "://"):
		errs = append(errs, fmt.Errorf("objstore: S3Config.Endpoint %q must be host[:port] without a scheme (set UseSSL for https)", c.Endpoint))
	default:
		if u, err := url.Parse("//" + c.Endpoint); err != nil || u.Host != c.Endpoint || u.User != nil {
			errs = append(errs, fmt.Errorf("objstore: S3Config.Endpoint %q must be host[:port]", c.Endpoint))
		}
	}
	if c.Bucket == "" {
		errs = append(errs, errors.New("objstore: S3Config.Bucket is required"))
	} else if err := s3utils.CheckValidBucketNameStrict(c.Bucket); err != nil {
		errs = append(errs, fmt.Errorf("objstore: S3Config.Bucket %q: %w", c.Bucket, err))
	}
	if c.AccessKeyID == "" {
		errs = append(errs, errors.New("objstore: S3Config.AccessKeyID is required"))
	}
	if c.SecretAccessKey == "" {
		errs = append(errs, errors.New("objstore: S3Config.SecretAccessKey is required"))
	}
	if c.PartSize != 0 && (c.PartSize < MinPartSize || c.PartSize > MaxPartSize) {
		errs = append(errs, fmt.Errorf("objstore: S3Config.PartSize %d must be between %d and %d bytes", c.PartSize, MinPartSize, MaxPartSize))
	}
	return errors.Join(errs...)
}

// String describes the configuration with the secret redacted, so printing a
// config with %v or %+v cannot leak it.
func (c S3Config) String() string {
	return fmt.Sprintf("S3Config{Endpoint:%s Region:%s Bucket:%s AccessKeyID:%s SecretAccessKey:%s UseSSL:%t CreateBucket:%t PartSize:%d}",
		c.Endpoint, c.Region, c.Bucket, c.AccessKeyID, redactedMark(c.SecretAccessKey), c.UseSSL, c.CreateBucket, c.PartSize)
}

// LogValue implements slog.LogValuer with the secret redacted.
func (c S3Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("endpoint", c.Endpoint),
		slog.String("region", c.Region),
		slog.String("bucket", c.Bucket),
		slog.String("access_key_id", c.AccessKeyID),
		slog.String("secret_access_key", redactedMark(c.SecretAccessKey)),
		slog.Bool("use_ssl", c.UseSSL),
		slog.Bool("create_bucket", c.CreateBucket),
		slog.Int64("part_size", c.PartSize),
	)
}

func redactedMark(secret string) string {
	if secret == "" {
		return ""
	}
	return "[REDACTED]"
}

// S3 is a Store on an S3-compatible service.
//
// The SHA-256 is kept as user metadata (x-amz-meta-sha256), which S3 only
// accepts when an upload starts. A body of at most PartSize bytes is therefore
// buffered, hashed and uploaded in one PUT with its metadata. A larger body is
// streamed (multipart, PartSize parts) to a staging key under StagingPrefix
// while it is hashed, then copied server-side to its key with the hash and
// content type, and the staging object is deleted. Either way the object
// appears whole or not at all: a failed multipart upload is aborted and never
// becomes visible.
type S3 struct {
	client   *minio.Client
	endpoint string
	bucket   string
	partSize int64
	secret   string
	log      *slog.Logger
}

var _ Store = (*S3)(nil)

// NewS3 connects to the service and checks (or, with CreateBucket, creates)
// the bucket. ctx bounds that check.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, ""),
		Secure: cfg.UseSSL,
		Region: cfg.Region,
	})
	if err != nil {
		return nil, redact(fmt.Errorf("objstore: s3 client for %s: %w", cfg.Endpoint, err), cfg.SecretAccessKey)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &S3{
		client:   client,
		endpoint: cfg.Endpoint,
		bucket:   cfg.Bucket,
		partSize: cfg.PartSize,
		secret:   cfg.SecretAccessKey,
		log:      log.With("component", "objstore.s3", "bucket", cfg.Bucket),
	}
	if s.partSize == 0 {
		s.partSize = DefaultPartSize
	}
	if err := s.ensureBucket(ctx, cfg.CreateBucket, cfg.Region); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *S3) ensureBucket(ctx context.Context, create bool, region string) error {
	exists, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		hint := ""
		if minio.ToErrorResponse(err).StatusCode == http.StatusForbidden {
			hint = " (check AccessKeyID, SecretAccessKey and the bucket's policy)"
		}
		return s.fail(fmt.Errorf("objstore: s3 check bucket %q at %s%s: %w", s.bucket, s.endpoint, hint, err))
	}
	if exists {
		return nil
	}
	if !create {
		return fmt.Errorf("objstore: s3 bucket %q does not exist (set CreateBucket to create it)", s.bucket)
	}
	if err := s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: region}); err != nil {
		code := minio.ToErrorResponse(err).Code
		if code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			return nil // created concurrently
		}
		return s.fail(fmt.Errorf("objstore: s3 create bucket %q: %w", s.bucket, err))
	}
	s.log.Info("created bucket")
	return nil
}

// Bucket returns the bucket name.
func (s *S3) Bucket() string { return s.bucket }

// Client exposes the underlying minio client, for tests and administration.
func (s *S3) Client() *minio.Client { return s.client }

func (s *S3) checkKey(key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if strings.HasPrefix(key, StagingPrefix) {
		return fmt.Errorf("%w: %s: %q is reserved", ErrInvalidKey, quoteKey(key), StagingPrefix)
	}
	return nil
}

// redactedError carries a message scrubbed of the secret while keeping the
// original chain for errors.Is and errors.As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func redact(err error, secret string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if len(secret) >= 4 && strings.Contains(msg, secret) {
		msg = strings.ReplaceAll(msg, secret, "[REDACTED]")
	}
	return &redactedError{msg: msg, err: err}
}

func (s *S3) fail(err error) error { return redact(err, s.secret) }

func isS3NotFound(err error) bool {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return false
	}
	return resp.Code == "NoSuchKey" || resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket"
}

func (s *S3) opError(op, key string, err error) error {
	if isS3NotFound(err) {
		return notFound(key)
	}
	return s.fail(fmt.Errorf("objstore: s3 %s %s: %w", op, quoteKey(key), err))
}

// hashCounter hashes and counts what is written to it.
type hashCounter struct {
	h hash.Hash
	n int64
}

func (c *hashCounter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

// Put implements Store.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Info, error) {
	ct, err := validatePut(key, r, size, contentType)
	if err != nil {
		return Info{}, err
	}
	if err := s.checkKey(key); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, putError("s3 put", key, err, nil)
	}
	body, src, finish := bodyReader(ctx, key, r, size)

	if size < 0 || size <= s.partSize {
		// Buffer up to one part: most documents and batch files fit, and
		// then one PUT carries the hash.
		limit, capacity := s.partSize+1, int64(64<<10)
		if size >= 0 {
			limit = size + 1 // the exact reader reports a longer body itself
			capacity = limit
		}
		buf := bytes.NewBuffer(make([]byte, 0, capacity))
		if _, err := buf.ReadFrom(io.LimitReader(body, limit)); err != nil {
			return Info{}, s.fail(putError("s3 put", key, err, src))
		}
		if size >= 0 || int64(buf.Len()) <= s.partSize {
			if err := finish(); err != nil {
				return Info{}, s.fail(putError("s3 put", key, err, src))
			}
			return s.putSmall(ctx, key, buf.Bytes(), ct, src)
		}
		// Larger than a part: stream the buffered head and the rest.
		return s.putLarge(ctx, key, io.MultiReader(buf, body), -1, ct, src, finish)
	}
	return s.putLarge(ctx, key, body, size, ct, src, finish)
}

func (s *S3) putSmall(ctx context.Context, key string, data []byte, ct string, src *srcReader) (Info, error) {
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	up, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{
		ContentType:  ct,
		UserMetadata: map[string]string{metaSHA256: hexSum},
		PartSize:     uint64(s.partSize),
	})
	if err != nil {
		return Info{}, s.fail(putError("s3 put", key, err, src))
	}
	return Info{Key: key, Size: int64(len(data)), SHA256: hexSum, ContentType: ct, Modified: modified(up.LastModified)}, nil
}

func (s *S3) putLarge(ctx context.Context, key string, body io.Reader, size int64, ct string, src *srcReader, finish func() error) (Info, error) {
	staging, err := stagingKey()
	if err != nil {
		return Info{}, putError("s3 put", key, err, nil)
	}
	partSize := s.partSize
	if size > 0 {
		// Keep a known size within 10 000 parts (whole MiB parts).
		if need := (size + maxParts - 1) / maxParts; need > partSize {
			partSize = min((need+(1<<20)-1)&^((1<<20)-1), MaxPartSize)
		}
	}
	hc := &hashCounter{h: sha256.New()}
	_, err = s.client.PutObject(ctx, s.bucket, staging, io.TeeReader(body, hc), size, minio.PutObjectOptions{
		ContentType: ct,
		PartSize:    uint64(partSize),
	})
	if err == nil {
		err = finish()
	}
	defer s.removeStaging(ctx, staging)
	if err != nil {
		return Info{}, s.fail(putError("s3 put", key, err, src))
	}
	hexSum := hex.EncodeToString(hc.h.Sum(nil))
	// Content-Type among the metadata too: ComposeObject's multipart copy (over
	// 5 GiB) passes only the metadata map to the new upload.
	up, err := s.client.ComposeObject(ctx, minio.CopyDestOptions{
		Bucket:          s.bucket,
		Object:          key,
		ReplaceMetadata: true,
		UserMetadata:    map[string]string{metaSHA256: hexSum, "Content-Type": ct},
		ContentType:     ct,
		PartSize:        uint64(min(max(partSize, 512<<20), MaxPartSize)),
	}, minio.CopySrcOptions{Bucket: s.bucket, Object: staging})
	if err != nil {
		return Info{}, s.fail(putError("s3 put", key, fmt.Errorf("copy from staging: %w", err), src))
	}
	return Info{Key: key, Size: hc.n, SHA256: hexSum, ContentType: ct, Modified: modified(up.LastModified)}, nil
}

func stagingKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return StagingPrefix + time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:]), nil
}

// removeStaging deletes a staging object even when ctx is already cancelled.
func (s *S3) removeStaging(ctx context.Context, staging string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.client.RemoveObject(ctx, s.bucket, staging, minio.RemoveObjectOptions{}); err != nil && !isS3NotFound(err) {
		s.log.Warn("remove staging object", "key", staging, "err", s.fail(err))
	}
}

func modified(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now().UTC()
	}
	return t.UTC()
}

func infoFromObject(key string, oi minio.ObjectInfo) Info {
	info := Info{Key: key, Size: oi.Size, ContentType: oi.ContentType, Modified: oi.LastModified.UTC()}
	for k, v := range oi.UserMetadata {
		if strings.EqualFold(k, metaSHA256) {
			info.SHA256 = strings.ToLower(v)
		}
	}
	if info.ContentType == "" {
		info.ContentType = DefaultContentType
	}
	return info
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	if err := s.checkKey(key); err != nil {
		return Info{}, err
	}
	oi, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.opError("stat", key, err)
	}
	return infoFromObject(key, oi), nil
}

// Get implements Store. The body is read over ctx: cancelling it stops the
// transfer. A read error mid-body is returned by Read, never a short body
// passed off as whole.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := s.checkKey(key); err != nil {
		return nil, Info{}, err
	}
	// One GET: the info comes from the headers of the very response whose
	// body is returned, so a concurrent overwrite cannot mix versions.
	// (minio.Client.GetObject sends a HEAD first and then a conditional GET,
	// which fails with PreconditionFailed when the object changes between.)
	body, oi, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, Info{}, s.opError("get", key, err)
	}
	return body, infoFromObject(key, oi), nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := s.checkKey(key); err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil && !isS3NotFound(err) {
		return s.opError("delete", key, err)
	}
	return nil
}

// List implements Store. Pages of up to 1000 keys are fetched as the
// sequence is consumed. Keys that objstore could not address (written by
// other tools, such as "dir/" folder markers) and staging objects are
// skipped.
func (s *S3) List(ctx context.Context, prefix string) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		if err := ValidatePrefix(prefix); err != nil {
			yield(Info{}, err)
			return
		}
		if strings.HasPrefix(prefix, StagingPrefix) {
			yield(Info{}, fmt.Errorf("%w: prefix %s: %q is reserved", ErrInvalidKey, quoteKey(prefix), StagingPrefix))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // stops the lister when the consumer breaks early
		prev := ""
		for oi := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if oi.Err != nil {
				yield(Info{}, s.opError("list", prefix, oi.Err))
				return
			}
			if strings.HasPrefix(oi.Key, StagingPrefix) || ValidateKey(oi.Key) != nil {
				continue
			}
			if prev != "" && oi.Key <= prev {
				yield(Info{}, fmt.Errorf("objstore: s3 list %s: server returned keys out of order (%s after %s)", quoteKey(prefix), quoteKey(oi.Key), quoteKey(prev)))
				return
			}
			prev = oi.Key
			if !yield(Info{Key: oi.Key, Size: oi.Size, Modified: oi.LastModified.UTC()}, nil) {
				return
			}
		}
	}
}
