#!/usr/bin/env bash
# Builds the aiforge image (aiforge:dev by default) from static binaries:
# aiforge, and nats-server at the version go.mod pins (the embedded server's),
# built from the module cache like everything else, so nothing is pulled.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-aiforge:dev}"
echo "building static aiforge and nats-server binaries ..."
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o deploy/image/aiforge ./cmd/aiforge
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o deploy/image/nats-server github.com/nats-io/nats-server/v2
echo "building image $tag ..."
docker build -q -t "$tag" deploy/image
echo "built $tag"
