package models

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// maxBucketEventBytes bounds an S3 event notification's body.
const maxBucketEventBytes = 1 << 20

// bucketManifestSuffix is the key ending that completes a model folder
// (the guardian's bucket.ManifestName).
const bucketManifestSuffix = "/aiforge-model.json"

// s3Event is what is read of an S3 event notification (AWS, MinIO and Ceph
// send this shape): the keys of the records.
type s3Event struct {
	Records []struct {
		EventName string `json:"eventName"`
		S3        struct {
			Object struct {
				Key string `json:"key"`
			} `json:"object"`
		} `json:"s3"`
	} `json:"Records"`
}

// bucketEvent takes an S3 event notification for the model bucket of the
// key's tenant (a webhook target authenticated with one of its API keys:
// MinIO's auth_token, for one). When a record names a manifest, the
// guardian is told to list the tenant's bucket now rather than at its
// next poll; the poll stays the source of truth, so nothing in the event
// is trusted beyond that hint.
func (s *Service) bucketEvent(w http.ResponseWriter, r *http.Request) {
	k := httpapi.Authenticate(s.d.Directory, w, r)
	if k == nil {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBucketEventBytes+1))
	if err != nil {
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, "The event body could not be read."))
		return
	}
	if len(body) > maxBucketEventBytes {
		contracts.Write(w, contracts.ErrBodyTooLarge(maxBucketEventBytes))
		return
	}
	var ev s3Event
	if err := json.Unmarshal(body, &ev); err != nil {
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The body is not an S3 event notification (JSON with Records)."))
		return
	}
	manifest := false
	for _, rec := range ev.Records {
		key, err := url.QueryUnescape(rec.S3.Object.Key) // S3 sends keys URL-encoded
		if err != nil {
			key = rec.S3.Object.Key
		}
		if strings.HasSuffix(key, bucketManifestSuffix) && (rec.EventName == "" || strings.Contains(rec.EventName, "ObjectCreated")) {
			manifest = true
		}
	}
	if manifest {
		if err := s.d.JS.Conn().Publish(events.ModelBucketNotify(k.Tenant), nil); err != nil {
			s.log.Warn("telling the guardian of a bucket event", "tenant", k.Tenant, "err", err)
		}
	}
	httpapi.WriteJSON(w, http.StatusAccepted, map[string]any{"object": "model_bucket.event", "tenant": k.Tenant, "records": len(ev.Records), "notified": manifest})
}
