#!/usr/bin/env bash
# Writes the compose stack's bus credentials into deploy/compose/nats-creds/,
# or the directory given as its argument (the compose file's
# AIFORGE_CREDS_DIR) (mode 0600, never committed; kept when they exist, so
# running it again changes nothing):
#   <identity>.nk, nats-server.conf  `aiforge nats config`: one nkey seed per
#                                    service and admin, the users and their
#                                    permissions (public keys only)
#   secrets.key, secrets.pub         `aiforge secrets keygen`: the key pair
#                                    that seals engine API keys and webhook
#                                    secrets (private: workers and batch
#                                    only; public: the edges)
#   cluster.conf                     the 3-node cluster: includes
#                                    nats-server.conf, adds the routes and
#                                    their generated password, monitoring on
#                                    loopback
# It runs `aiforge nats config` from the image (AIFORGE_IMAGE, default
# aiforge:dev: deploy/build-image.sh first).
set -euo pipefail
dir="${1:-$(cd "$(dirname "$0")" && pwd)/nats-creds}"
image="${AIFORGE_IMAGE:-aiforge:dev}"
umask 077
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
docker run --rm --user "$(id -u):$(id -g)" -v "$dir:/creds" "$image" \
  nats config --out /creds --store-dir /data/jetstream >/dev/null
docker run --rm --user "$(id -u):$(id -g)" -v "$dir:/creds" "$image" \
  secrets keygen --out /creds >/dev/null
if [ ! -s "$dir/cluster.conf" ]; then
  pass=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  routes=""
  for n in 1 2 3; do routes="$routes    \"nats://route:$pass@nats-$n:6222\"
"; done
  cat > "$dir/cluster.conf.tmp" <<CONF
# The compose stack's 3-node NATS cluster, written by deploy/compose/creds.sh.
# Each node is started with -c cluster.conf --name nats-N.
include "nats-server.conf"

cluster {
  name: "aiforge"
  listen: "0.0.0.0:6222"
  authorization { user: "route", password: "$pass" }
  routes: [
$routes  ]
}

# /healthz for the container's healthcheck, on its loopback only.
http: "127.0.0.1:8222"
CONF
  mv "$dir/cluster.conf.tmp" "$dir/cluster.conf"
fi
echo "bus credentials in $dir (mode 0600)"
