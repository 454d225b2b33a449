package registry_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sealed"
)

const engineKey = "sk-engine-registry-test-0123"

func TestPutModelRefusesClearKey(t *testing.T) {
	s, _ := open(t)
	m := validModel("chat")
	m.Engine.APIKey = engineKey
	err := s.PutModel(testCtx(t), m)
	if !errors.Is(err, registry.ErrInvalid) || strings.Contains(err.Error(), engineKey) {
		t.Fatalf("PutModel(clear key) = %v", err)
	}
}

func TestEngineKeySealing(t *testing.T) {
	priv, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := sealed.Generate()
	m := validModel("chat")
	m.Engine.APIKey = engineKey
	if err := m.SealEngineKey(priv.Public()); err != nil {
		t.Fatal(err)
	}
	if m.Engine.APIKey != "" || m.Engine.APIKeySealed == "" {
		t.Fatalf("sealed engine = %+v", m.Engine)
	}
	if r := m.Redacted(); r.Engine.APIKey != "redacted" || r.Engine.APIKeySealed != "" {
		t.Fatalf("Redacted = %+v", r.Engine)
	}
	o, err := m.OpenEngineKey(priv)
	if err != nil || o.Engine.APIKey != engineKey || o.Engine.APIKeySealed != "" {
		t.Fatalf("OpenEngineKey = %+v, %v", o.Engine, err)
	}

	// A sealed key moved into another binding, or pointed at another
	// engine, does not open; neither does it open with another key or none.
	moved := m
	moved.Name = "other"
	redirected := m
	redirected.Engine.BaseURL = "http://attacker.example/v1"
	for what, c := range map[string]struct {
		m    registry.Model
		k    *sealed.PrivateKey
		want error
	}{
		"moved":      {moved, priv, sealed.ErrContext},
		"redirected": {redirected, priv, sealed.ErrContext},
		"other key":  {m, other, sealed.ErrWrongKey},
		"no key":     {m, nil, registry.ErrNoSecretsKey},
	} {
		_, err := c.m.OpenEngineKey(c.k)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), `"`+c.m.Name+`"`) || strings.Contains(err.Error(), engineKey) {
			t.Errorf("%s: OpenEngineKey = %v, want %v naming the model", what, err, c.want)
		}
	}

	// A binding written before keys were sealed opens as it is.
	legacy := validModel("legacy")
	legacy.Engine.APIKey = engineKey
	if o, err := legacy.OpenEngineKey(nil); err != nil || o.Engine.APIKey != engineKey {
		t.Fatalf("legacy OpenEngineKey = %+v, %v", o.Engine, err)
	}
}

// TestSealLegacyEngineKeys writes a binding the way aiforge did before keys
// were sealed, then migrates it: the key is sealed, opens, and is gone from
// every revision the bucket keeps.
func TestSealLegacyEngineKeys(t *testing.T) {
	s, js := open(t)
	ctx := testCtx(t)
	priv, _ := sealed.Generate()
	models, err := js.KeyValue(ctx, events.BucketModels)
	if err != nil {
		t.Fatal(err)
	}
	legacy := validModel("legacy")
	legacy.Engine.APIKey = engineKey
	raw, _ := json.Marshal(legacy)
	if !strings.Contains(string(raw), `"api_key":"`+engineKey) {
		t.Fatalf("legacy encoding %s", raw)
	}
	// Two revisions in clear, as a re-registration left them.
	for range 2 {
		if _, err := models.Put(ctx, registry.ModelKey("legacy"), raw); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutModel(ctx, validModel("keyless")); err != nil {
		t.Fatal(err)
	}

	done, err := s.SealLegacyEngineKeys(ctx, priv.Public())
	if err != nil || len(done) != 1 || done[0] != "legacy" {
		t.Fatalf("SealLegacyEngineKeys = %q, %v", done, err)
	}
	m, err := s.GetModel(ctx, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	if o, err := m.OpenEngineKey(priv); err != nil || o.Engine.APIKey != engineKey {
		t.Fatalf("migrated binding opens to %q, %v", o.Engine.APIKey, err)
	}
	// Every message left in the bucket's stream, history included.
	st, err := js.Stream(ctx, "KV_"+events.BucketModels)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		msg, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(msg.Data), engineKey) {
			t.Fatalf("message %d of the models bucket still holds the key in clear: %s", seq, msg.Data)
		}
	}
	// Idempotent: nothing left to seal.
	if done, err := s.SealLegacyEngineKeys(ctx, priv.Public()); err != nil || len(done) != 0 {
		t.Fatalf("second SealLegacyEngineKeys = %q, %v", done, err)
	}
}
