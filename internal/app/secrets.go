package app

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/aiforge/aiforge/pkg/sealed"
)

// Key files in the data dir.
const (
	secretsKeyName    = "secrets.key"
	secretsPubKeyName = "secrets.pub"
)

type secretsResult struct {
	priv *sealed.PrivateKey
	pub  *sealed.PublicKey
	err  error
}

// runsModule reports whether the targets run the service name (no module
// depends on the edge or the workers, so only groups can bring them in).
func (a *App) runsModule(name string) bool {
	for _, t := range a.opts.Targets {
		if t == name || slices.Contains(groups[t], name) {
			return true
		}
	}
	return false
}

// secretsKeys loads, once, the key material of the modules in this
// process: the private key for the workers (which open the sealed engine
// keys) and the batch service (which opens the sealed webhook secrets),
// the guardian (which opens the sealed credentials of tenants' model
// buckets), the public key for the edge (which seals them). The edge alone never
// reads the private key. Either may be nil, with a warning: the
// workers then serve only models without a sealed key, the edge refuses
// engine keys.
func (a *App) secretsKeys() (*sealed.PrivateKey, *sealed.PublicKey, error) {
	a.secretsOnce.Do(func() { a.secrets = a.loadSecrets() })
	return a.secrets.priv, a.secrets.pub, a.secrets.err
}

func (a *App) loadSecrets() (r secretsResult) {
	if a.runsModule("workers") || a.runsModule("batch") || a.runsModule("guardian") {
		r.priv, r.err = a.loadPrivateKey()
		if r.err != nil {
			return r
		}
	}
	if !a.runsModule("edge") {
		return r
	}
	var pub sealed.PublicKey
	path := a.opts.SecretsPublicKeyFile
	switch {
	case path != "":
		var err error
		if pub, err = sealed.LoadPublicKeyFile(path); err != nil {
			r.err = fmt.Errorf("secrets public key (AIFORGE_SECRETS_PUBLIC_KEY_FILE): %w", err)
			return r
		}
		if r.priv != nil && r.priv.Public() != pub {
			r.err = fmt.Errorf("secrets public key %s (key %s) is not the public half of the workers' key (key %s)", path, pub.ID(), r.priv.Public().ID())
			return r
		}
	case r.priv != nil:
		pub = r.priv.Public()
	case a.opts.DataDir != "":
		p, err := sealed.LoadPublicKeyFile(filepath.Join(a.opts.DataDir, secretsPubKeyName))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.err = fmt.Errorf("secrets public key: %w", err)
			return r
		}
		if err == nil {
			pub = p
			break
		}
		fallthrough
	default:
		a.log.Warn("the edge has no secrets public key: the admin API refuses engine API keys (set AIFORGE_SECRETS_PUBLIC_KEY_FILE to the workers' secrets.pub)")
		return r
	}
	r.pub = &pub
	return r
}

func (a *App) loadPrivateKey() (*sealed.PrivateKey, error) {
	var (
		k       *sealed.PrivateKey
		created bool
		tooOpen bool
		err     error
	)
	path := a.opts.SecretsKeyFile
	switch {
	case path != "":
		// A key given from outside (a secret mount) is never generated.
		if k, tooOpen, err = sealed.LoadPrivateKeyFile(path); err != nil {
			return nil, fmt.Errorf("secrets key (AIFORGE_SECRETS_KEY_FILE): %w", err)
		}
	case a.opts.DataDir != "":
		path = filepath.Join(a.opts.DataDir, secretsKeyName)
		if k, created, tooOpen, err = sealed.LoadOrCreate(path, filepath.Join(a.opts.DataDir, secretsPubKeyName)); err != nil {
			return nil, fmt.Errorf("secrets key: %w", err)
		}
	default:
		a.log.Warn("no secrets key: the workers serve no model whose engine API key is sealed, the batch service delivers no signed webhook, the guardian watches no tenant model bucket (set AIFORGE_SECRETS_KEY_FILE or give a data dir)")
		return nil, nil
	}
	if created {
		a.log.Info("generated the secrets key that seals engine API keys; give its public half to edges that run elsewhere",
			"key_file", path, "public_key_file", filepath.Join(a.opts.DataDir, secretsPubKeyName), "key_id", k.Public().ID())
	}
	if tooOpen {
		a.log.Warn("the secrets key file can be read by other users; chmod 600 it", "key_file", path)
	}
	return k, nil
}
