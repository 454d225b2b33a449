package chunk

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
)

// Hash returns the SHA-256 of a file's content as lowercase hex. Ingest keys
// documents by it so that re-ingesting an unchanged file is a no-op.
func Hash(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", fmt.Errorf("chunk: hash: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashText(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
