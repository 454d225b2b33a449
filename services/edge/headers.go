package edge

import "github.com/aiforge/aiforge/services/edge/internal/models"

// Headers of the model upload and model files APIs (their clients set and
// check them).
const (
	// HeaderPartSHA256 carries the SHA-256 a client computed for a part.
	HeaderPartSHA256 = models.HeaderPartSHA256
	// HeaderModelFileSHA256 carries the catalog's SHA-256 of a model file.
	HeaderModelFileSHA256 = models.HeaderModelFileSHA256
)
