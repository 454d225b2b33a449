package objstoretest

import (
	"bytes"
	"errors"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/objstore"
)

// VersityGWInstall is the command that installs the S3 server the tests use.
const VersityGWInstall = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// VersityGWEnv names an environment variable that may point at the versitygw
// binary; otherwise it is looked up on PATH and in $GOPATH/bin.
const VersityGWEnv = "VERSITYGW_BIN"

// S3Server is a running versitygw (POSIX backend) on a loopback port.
type S3Server struct {
	Endpoint        string // host:port, plain http
	Region          string
	AccessKeyID     string
	SecretAccessKey string
	// Dir is the gateway's data directory: one sub-directory per bucket.
	Dir string

	buckets atomic.Int64
}

// Config returns an S3Config for bucket on this server, with CreateBucket set.
func (s *S3Server) Config(bucket string) objstore.S3Config {
	return objstore.S3Config{
		Endpoint:        s.Endpoint,
		Region:          s.Region,
		Bucket:          bucket,
		AccessKeyID:     s.AccessKeyID,
		SecretAccessKey: s.SecretAccessKey,
		CreateBucket:    true,
	}
}

// NewBucketName returns a bucket name not used before on this server.
func (s *S3Server) NewBucketName() string {
	return "objstore-test-" + strconv.FormatInt(s.buckets.Add(1), 10)
}

// FindVersityGW returns the path of the versitygw binary, or "" when it is not
// installed.
func FindVersityGW() string {
	if p := os.Getenv(VersityGWEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		gopath = build.Default.GOPATH
	}
	for _, dir := range filepath.SplitList(gopath) {
		if p := filepath.Join(dir, "bin", "versitygw"); isExecutable(p) {
			return p
		}
	}
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		if p := filepath.Join(gobin, "versitygw"); isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// StartVersityGW starts versitygw with a POSIX backend in a temporary
// directory on a free loopback port, waits until it answers and stops it when
// the test ends. When the binary is missing the test fails if CI=true and is
// skipped (loudly) otherwise.
func StartVersityGW(t testing.TB) *S3Server {
	t.Helper()
	bin := FindVersityGW()
	if bin == "" {
		msg := "versitygw (S3 server) not found on PATH, in $GOPATH/bin or $" + VersityGWEnv + "; install it with: " + VersityGWInstall
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING S3 tests: " + msg)
	}
	var lastErr error
	for range 3 { // the free port may be taken between probe and bind
		srv, err := startVersityGW(t, bin)
		if err == nil {
			return srv
		}
		lastErr = err
	}
	t.Fatalf("objstoretest: start versitygw: %v", lastErr)
	return nil
}

// lockedBuffer collects the gateway's output for failure reports.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startVersityGW(t testing.TB, bin string) (*S3Server, error) {
	base := t.TempDir() // removed after the process is stopped (cleanups run LIFO)
	dataDir := filepath.Join(base, "data")
	metaDir := filepath.Join(base, "meta")
	for _, d := range []string{dataDir, metaDir} {
		if err := os.Mkdir(d, 0o750); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	srv := &S3Server{
		Endpoint:        net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Region:          "us-east-1",
		AccessKeyID:     "objstoretest",
		SecretAccessKey: "objstoretest-secret-key",
		Dir:             dataDir,
	}
	args := []string{"--port", srv.Endpoint, "--region", srv.Region, "--quiet", "posix"}
	if !xattrSupported(dataDir) {
		// Without xattrs versitygw keeps metadata in a sidecar directory,
		// written apart from the data: a GET racing an overwrite can then
		// return one version's headers with another's body, which the
		// contract's ConcurrentOverwrite check will catch.
		t.Logf("WARNING: %s has no user xattrs; versitygw falls back to sidecar metadata, which is not atomic with the data (ConcurrentOverwrite may fail). Point TMPDIR at ext4/xfs/btrfs.", dataDir)
		args = append(args, "--sidecar", metaDir)
	}
	cmd := exec.Command(bin, append(args, dataDir)...)
	// Credentials through the environment, not argv; nothing else inherited
	// so a developer's VGW_* settings cannot change the server.
	cmd.Env = []string{
		"ROOT_ACCESS_KEY_ID=" + srv.AccessKeyID,
		"ROOT_SECRET_ACCESS_KEY=" + srv.SecretAccessKey,
		"HOME=" + base,
	}
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}

	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := client.Get("http://" + srv.Endpoint + "/")
		if err == nil {
			_ = resp.Body.Close()
			break // any HTTP answer (403 without credentials) means it serves
		}
		select {
		case werr := <-exited:
			return nil, fmt.Errorf("versitygw exited before serving (%v): %s", werr, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, errors.New("versitygw did not answer within 15s: " + out.String())
		}
	}
	client.CloseIdleConnections()
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("versitygw output:\n%s", out.String())
		}
	})
	return srv, nil
}
