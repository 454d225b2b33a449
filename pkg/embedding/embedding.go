// Package embedding asks a served embedding model for vectors over the bus,
// the way a client of /v1/embeddings would, so that internal embedding work
// (document chunks, search queries) is routed, retried and metered like any
// other request. It goes out on the embedding subject family
// (events.Embed, bridge.FamilyEmbed), not on the edge's inference subjects:
// the services that embed may publish there only, and workers serve nothing
// but embeddings on it.
package embedding

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/events"
)

// ErrRejected wraps answers that retrying cannot fix (the model refused the
// input, or answered something that is not an embeddings list).
var ErrRejected = errors.New("embedding: rejected")

// NewClient returns the bridge client Embed needs: cfg on the embedding
// subject family (bridge.FamilyEmbed, whatever cfg.Family says).
func NewClient(nc *nats.Conn, cfg bridge.ClientConfig) (*bridge.Client, error) {
	cfg.Family = bridge.FamilyEmbed
	return bridge.NewClient(nc, cfg)
}

// Request names who spends the tokens.
type Request struct {
	Model  string
	Tenant string
	KeyID  string
	Inputs []string
}

// Embed returns one vector per input, in order, asked through c (from
// NewClient). Errors wrapping ErrRejected are permanent; others (no worker,
// engine down) are worth retrying.
func Embed(ctx context.Context, c *bridge.Client, req Request) ([][]float32, error) {
	body, _ := json.Marshal(map[string]any{"model": req.Model, "input": req.Inputs, "encoding_format": "base64"})
	var out bytes.Buffer
	res, err := c.Do(ctx, &bridge.OutRequest{
		Model: req.Model, ID: "emb_" + events.NewID()[:24], Tenant: req.Tenant, KeyID: req.KeyID,
		Endpoint: events.EndpointEmbeddings, Body: body,
	}, func(p []byte) error { out.Write(p); return nil })
	if err != nil {
		var be *bridge.Error
		if errors.As(err, &be) && be.Status >= 400 && be.Status < 500 && be.Status != 429 {
			return nil, fmt.Errorf("%w: the model %q refused the input: %s", ErrRejected, req.Model, be.Error())
		}
		return nil, err
	}
	if res.Status != 200 {
		return nil, fmt.Errorf("embedding: status %d", res.Status)
	}
	var resp struct {
		Data []struct {
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		return nil, fmt.Errorf("%w: not an embeddings answer: %v", ErrRejected, err)
	}
	vecs := make([][]float32, len(req.Inputs))
	for _, d := range resp.Data {
		if d.Index < 0 || d.Index >= len(vecs) {
			return nil, fmt.Errorf("%w: an index out of range", ErrRejected)
		}
		v, err := Decode(d.Embedding)
		if err != nil {
			return nil, err
		}
		vecs[d.Index] = v
	}
	for i, v := range vecs {
		if v == nil {
			return nil, fmt.Errorf("%w: no vector for input %d", ErrRejected, i)
		}
	}
	return vecs, nil
}

// Decode reads an OpenAI embedding: a base64 string of little-endian
// float32s, or a JSON array of numbers.
func Decode(raw json.RawMessage) ([]float32, error) {
	var b64 string
	if json.Unmarshal(raw, &b64) == nil {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(b)%4 != 0 {
			return nil, fmt.Errorf("%w: bad base64 embedding", ErrRejected)
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v, nil
	}
	var f []float32
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%w: bad embedding", ErrRejected)
	}
	return f, nil
}
