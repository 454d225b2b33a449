package busauth

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Identity is one bus identity: a user nkey. Seed is the secret (the
// content of its seed file); PublicKey ("U...") is what the server knows.
type Identity struct {
	Name      string
	PublicKey string
	seed      []byte
}

// Seed returns the identity's nkey seed (a secret).
func (id Identity) Seed() []byte { return bytes.Clone(id.seed) }

// SeedFile is where an identity's seed lives in a credentials directory.
func SeedFile(dir, identity string) string { return filepath.Join(dir, identity+".nk") }

// LoadOrCreate reads every identity's seed from dir (<name>.nk), creating
// the ones missing (the directory with mode 0700, each file with mode
// 0600). Existing seeds are kept, so a restart keeps every credential.
func LoadOrCreate(dir string) (map[string]Identity, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("busauth: credentials dir: %w", err)
	}
	out := map[string]Identity{}
	for _, name := range Identities() {
		path := SeedFile(dir, name)
		id, err := Load(name, path)
		if errors.Is(err, os.ErrNotExist) {
			id, err = create(name, path)
		}
		if err != nil {
			return nil, err
		}
		out[name] = id
	}
	return out, nil
}

// Load reads one identity's seed file.
func Load(name, path string) (Identity, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Identity{}, fmt.Errorf("busauth: %s seed: %w", name, err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
	if err != nil {
		return Identity{}, fmt.Errorf("busauth: %s seed %s: not a user nkey seed", name, path)
	}
	pub, err := kp.PublicKey()
	if err != nil || !strings.HasPrefix(pub, "U") {
		return Identity{}, fmt.Errorf("busauth: %s seed %s: not a user nkey seed", name, path)
	}
	return Identity{Name: name, PublicKey: pub, seed: bytes.TrimSpace(b)}, nil
}

func create(name, path string) (Identity, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return Identity{}, fmt.Errorf("busauth: new nkey: %w", err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	// O_EXCL: two processes starting on one data dir must not overwrite
	// each other's seeds; the loser reads the winner's.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return Load(name, path)
	}
	if err != nil {
		return Identity{}, fmt.Errorf("busauth: write %s seed: %w", name, err)
	}
	_, werr := f.Write(append(seed, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return Identity{}, fmt.Errorf("busauth: write %s seed: %w", name, werr)
	}
	return Identity{Name: name, PublicKey: pub, seed: seed}, nil
}

// ServerPermissions are an identity's permissions as nats-server takes
// them.
func ServerPermissions(identity string) (*server.Permissions, error) {
	p, ok := For(identity)
	if !ok {
		return nil, fmt.Errorf("busauth: unknown identity %q", identity)
	}
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.Publish},
		Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
	}
	if p.Responses != nil {
		sp.Response = &server.ResponsePermission{MaxMsgs: p.Responses.MaxMsgs, Expires: p.Responses.Expires}
	}
	return sp, nil
}

// ServerUsers are the nkey users of an embedded server: every identity
// with its permissions.
func ServerUsers(ids map[string]Identity) ([]*server.NkeyUser, error) {
	var out []*server.NkeyUser
	for _, name := range Identities() {
		id, ok := ids[name]
		if !ok {
			continue
		}
		perms, err := ServerPermissions(name)
		if err != nil {
			return nil, err
		}
		out = append(out, &server.NkeyUser{Nkey: id.PublicKey, Permissions: perms})
	}
	return out, nil
}

// Option authenticates a connection as the identity, with its inbox
// prefix (the only inbox it may subscribe to).
func (id Identity) Option() nats.Option {
	seed := id.Seed()
	return func(o *nats.Options) error {
		kp, err := nkeys.FromSeed(seed)
		if err != nil {
			return fmt.Errorf("busauth: %s seed: not a user nkey seed", id.Name)
		}
		sign := func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }
		if err := nats.Nkey(id.PublicKey, sign)(o); err != nil {
			return err
		}
		return nats.CustomInboxPrefix(InboxPrefix(id.Name))(o)
	}
}
