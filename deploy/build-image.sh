#!/usr/bin/env bash
# Builds the aiforge image (aiforge:dev by default) from a static binary.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-aiforge:dev}"
echo "building a static aiforge binary ..."
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o deploy/image/aiforge ./cmd/aiforge
echo "building image $tag ..."
docker build -q -t "$tag" deploy/image
echo "built $tag"
