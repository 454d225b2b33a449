// Package sealed encrypts secrets kept on the bus (an engine's API key in a
// model binding) so that only the holders of one private key can read them.
//
// The scheme is NaCl's anonymous sealed box (golang.org/x/crypto/nacl/box
// SealAnonymous: an ephemeral X25519 key agreement with the recipient's
// public key, then XSalsa20-Poly1305). It is public-key on purpose: the
// writer of a secret (the edge, from the admin API) holds only the public
// key, the readers (the workers) hold the private key, so a stolen edge or
// bus credential cannot open what is stored. A symmetric AEAD would put the
// decryption key on every writer too.
//
// A sealed box has no associated data, so Seal puts a context (for an engine
// key: the model name and the engine URL) in front of the secret and Open
// refuses a box whose context differs: someone who can write the bucket
// cannot move a sealed key into a binding that points at their own server.
//
// Key files hold one line: the 32-byte key in base64 (standard or URL
// alphabet, padding optional); any 32 random bytes are a private key
// (`openssl rand -base64 32`). Sealed values read "v1.<key id>.<base64url>",
// where the key id names the public key they were sealed to, so a worker
// holding another key says so instead of failing obscurely.
package sealed

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/nacl/box"
)

// Errors Open's callers can tell apart. None of them carries the secret.
var (
	ErrMalformed = errors.New("sealed: malformed value")
	ErrWrongKey  = errors.New("sealed: sealed to another key")
	ErrOpen      = errors.New("sealed: cannot be opened (corrupted, or not sealed to this key)")
	ErrContext   = errors.New("sealed: sealed for another context")
)

const version = "v1"

// PublicKey seals secrets; it is not secret.
type PublicKey [32]byte

// PrivateKey opens what was sealed to its public key.
type PrivateKey struct {
	priv [32]byte
	pub  PublicKey
}

// Generate makes a new private key.
func Generate() (*PrivateKey, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("sealed: generate: %w", err)
	}
	return privateFromRaw(raw)
}

func privateFromRaw(raw [32]byte) (*PrivateKey, error) {
	k, err := ecdh.X25519().NewPrivateKey(raw[:])
	if err != nil {
		return nil, fmt.Errorf("sealed: private key: %w", err)
	}
	p := &PrivateKey{priv: raw}
	copy(p.pub[:], k.PublicKey().Bytes())
	return p, nil
}

// Public is the key's public half.
func (k *PrivateKey) Public() PublicKey { return k.pub }

// String never shows the key.
func (k *PrivateKey) String() string { return "sealed.PrivateKey(" + k.pub.ID() + ")" }

// GoString never shows the key either (%#v).
func (k *PrivateKey) GoString() string { return k.String() }

// String is the public key in base64, as its file holds it.
func (p PublicKey) String() string { return base64.StdEncoding.EncodeToString(p[:]) }

// ID names the key: 8 hex digits of its SHA-256.
func (p PublicKey) ID() string {
	h := sha256.Sum256(p[:])
	return hex.EncodeToString(h[:4])
}

func decodeKey(text []byte) ([32]byte, error) {
	var out [32]byte
	s := strings.TrimRight(strings.TrimSpace(string(text)), "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		b, err := enc.DecodeString(s)
		if err == nil && len(b) == 32 {
			copy(out[:], b)
			return out, nil
		}
	}
	return out, errors.New("want 32 bytes in base64")
}

// ParsePrivateKey reads a private key as its file holds it.
func ParsePrivateKey(text []byte) (*PrivateKey, error) {
	raw, err := decodeKey(text)
	if err != nil {
		return nil, fmt.Errorf("sealed: private key: %w", err)
	}
	return privateFromRaw(raw)
}

// ParsePublicKey reads a public key as its file holds it.
func ParsePublicKey(text []byte) (PublicKey, error) {
	raw, err := decodeKey(text)
	if err != nil {
		return PublicKey{}, fmt.Errorf("sealed: public key: %w", err)
	}
	return PublicKey(raw), nil
}

// Seal encrypts secret for the holder of p's private key, bound to context.
func (p PublicKey) Seal(secret []byte, context string) (string, error) {
	msg := make([]byte, 0, 4+len(context)+len(secret))
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(context)))
	msg = append(msg, context...)
	msg = append(msg, secret...)
	pub := [32]byte(p)
	out, err := box.SealAnonymous(nil, msg, &pub, rand.Reader)
	clear(msg)
	if err != nil {
		return "", fmt.Errorf("sealed: seal: %w", err)
	}
	return version + "." + p.ID() + "." + base64.RawURLEncoding.EncodeToString(out), nil
}

// KeyID returns the id of the public key a sealed value was sealed to.
func KeyID(sealedValue string) (string, error) {
	v, id, _, ok := split(sealedValue)
	if !ok || v != version {
		return "", ErrMalformed
	}
	return id, nil
}

func split(s string) (v, id, body string, ok bool) {
	v, rest, ok1 := strings.Cut(s, ".")
	id, body, ok2 := strings.Cut(rest, ".")
	return v, id, body, ok1 && ok2
}

// Open decrypts a value sealed to k's public key for context. Its errors
// are ErrMalformed, ErrWrongKey, ErrOpen or ErrContext, and never contain
// the secret.
func (k *PrivateKey) Open(sealedValue, context string) ([]byte, error) {
	v, id, body, ok := split(sealedValue)
	if !ok || v != version {
		return nil, ErrMalformed
	}
	if id != k.pub.ID() {
		return nil, fmt.Errorf("%w: the value names key %s, this process holds key %s", ErrWrongKey, id, k.pub.ID())
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return nil, ErrMalformed
	}
	pub, priv := [32]byte(k.pub), k.priv
	msg, ok := box.OpenAnonymous(nil, raw, &pub, &priv)
	if !ok {
		return nil, ErrOpen
	}
	if len(msg) < 4 {
		return nil, ErrMalformed
	}
	n := binary.BigEndian.Uint32(msg)
	if uint64(n) > uint64(len(msg)-4) {
		return nil, ErrMalformed
	}
	if !bytes.Equal(msg[4:4+n], []byte(context)) {
		clear(msg)
		return nil, ErrContext
	}
	secret := bytes.Clone(msg[4+n:])
	clear(msg)
	return secret, nil
}

// LoadPrivateKeyFile reads a private key file. It also reports whether
// the file can be read by every user (any permission for others), which
// callers should warn about. Group read is not: a Kubernetes Secret volume
// gives a pod that runs as non-root its files that way (mode 0440, group
// fsGroup).
func LoadPrivateKeyFile(path string) (key *PrivateKey, tooOpen bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("sealed: read private key: %w", err)
	}
	k, err := ParsePrivateKey(b)
	clear(b)
	if err != nil {
		return nil, false, fmt.Errorf("%w (in %s)", err, path)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, false, fmt.Errorf("sealed: %w", err)
	}
	return k, st.Mode().Perm()&0o007 != 0, nil
}

// LoadPublicKeyFile reads a public key file.
func LoadPublicKeyFile(path string) (PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return PublicKey{}, fmt.Errorf("sealed: read public key: %w", err)
	}
	p, err := ParsePublicKey(b)
	if err != nil {
		return PublicKey{}, fmt.Errorf("%w (in %s)", err, path)
	}
	return p, nil
}

// LoadOrCreate reads the private key at path, or, when there is no file
// there, generates one (mode 0600, its directory 0700) and writes its
// public half to pubPath (mode 0644) when pubPath is not empty. created
// reports a new key.
func LoadOrCreate(path, pubPath string) (key *PrivateKey, created, tooOpen bool, err error) {
	key, tooOpen, err = LoadPrivateKeyFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, false, tooOpen, err
	}
	if key, err = Generate(); err != nil {
		return nil, false, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, false, fmt.Errorf("sealed: %w", err)
	}
	text := []byte(base64.StdEncoding.EncodeToString(key.priv[:]) + "\n")
	// O_EXCL: two processes starting at once must not overwrite each
	// other's key; the loser reads the winner's.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		key, tooOpen, err = LoadPrivateKeyFile(path)
		return key, false, tooOpen, err
	}
	if err != nil {
		return nil, false, false, fmt.Errorf("sealed: write private key: %w", err)
	}
	_, werr := f.Write(text)
	clear(text)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return nil, false, false, fmt.Errorf("sealed: write private key: %w", werr)
	}
	if pubPath != "" {
		if err := WritePublicKeyFile(pubPath, key.Public()); err != nil {
			return nil, false, false, err
		}
	}
	return key, true, false, nil
}

// WritePublicKeyFile stores p at path (mode 0644).
func WritePublicKeyFile(path string, p PublicKey) error {
	if err := os.WriteFile(path, []byte(p.String()+"\n"), 0o644); err != nil {
		return fmt.Errorf("sealed: write public key: %w", err)
	}
	return nil
}
