#!/usr/bin/env bash
# The compose stack, end to end: builds the image (deploy/build-image.sh),
# writes fresh bus credentials, brings deploy/compose up (3-node NATS
# cluster, R3 streams and buckets, every service in its own container), waits
# until every container is healthy, runs the README's tour through it with
# the aiforge CLI and curl from this host (tenant, key, a model on the engine
# simulator, chat plain on one edge and streamed on the other, a document
# uploaded to a vector store and found by search, `aiforge usage audit`
# clean), and always tears it down: containers, network, volumes, the
# credentials and the image it built. Exits non-zero on the first failure,
# with the failing step and the containers' state and logs.
#
#   deploy/test.sh
#
# Needs docker and docker-compose (v1.29 or the v2 plugin), Go, curl. Under
# CI=true a missing tool is a failure; elsewhere the test skips loudly.
# AIFORGE_TEST_IMAGE names the image (default aiforge-test:<pid>, removed at
# the end); AIFORGE_TEST_PROJECT the compose project (default
# aiforge-test-<pid>); AIFORGE_TEST_KEEP=1 leaves the stack up to look at.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

step() { echo "--- [$(( $(date +%s) - start ))s] $*"; }
failure=""
fail() { failure="$*"; echo "FAIL deploy/test.sh: $*" >&2; exit 1; }

if docker compose version >/dev/null 2>&1; then
  compose_bin=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose_bin=(docker-compose)
else
  compose_bin=()
fi
for tool in docker go curl; do
  if ! command -v "$tool" >/dev/null 2>&1; then compose_bin=(); missing=$tool; fi
done
if [ ${#compose_bin[@]} -eq 0 ] || ! docker info >/dev/null 2>&1; then
  msg="deploy/test.sh needs docker (a running engine), docker-compose, go and curl: ${missing:-docker-compose or the docker engine} missing"
  if [ "${CI:-}" = "true" ]; then fail "$msg"; fi
  echo "SKIP: $msg" >&2
  exit 0
fi

image="${AIFORGE_TEST_IMAGE:-aiforge-test:$$}"
project="${AIFORGE_TEST_PROJECT:-aiforge-test-$$}"
work=$(mktemp -d)
export AIFORGE_IMAGE="$image" AIFORGE_CREDS_DIR="$work/nats-creds"
# The edges publish on free loopback ports (read back below).
export AIFORGE_BIND=127.0.0.1 AIFORGE_PORT=0 AIFORGE_PORT_2=0
AIFORGE_ADMIN_KEY="ak-test-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export AIFORGE_ADMIN_KEY
compose=("${compose_bin[@]}" -p "$project" -f deploy/compose/docker-compose.yml)
built=""

cleanup() {
  rc=$?
  set +e
  if [ $rc -ne 0 ]; then
    echo "--- the stack when it failed" >&2
    "${compose[@]}" ps >&2
    "${compose[@]}" logs --no-color --tail=30 >&2
  fi
  if [ -n "${AIFORGE_TEST_KEEP:-}" ]; then
    echo "AIFORGE_TEST_KEEP: left project $project up (credentials in $work); docker-compose -p $project -f deploy/compose/docker-compose.yml down -v"
    exit $rc
  fi
  step "tearing down"
  "${compose[@]}" down -v --remove-orphans >"$work/down.log" 2>&1 || cat "$work/down.log" >&2
  step "removing the image and the credentials"
  [ -n "$built" ] && docker rmi -f "$image" >/dev/null 2>&1
  rm -rf "$work"
  if [ $rc -eq 0 ]; then
    echo "deploy/test.sh: PASS in $(( $(date +%s) - start ))s"
  else
    echo "deploy/test.sh: FAIL in $(( $(date +%s) - start ))s${failure:+: $failure}" >&2
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "building image $image"
deploy/build-image.sh "$image" >/dev/null 2>&1 || fail "deploy/build-image.sh $image failed"
built=1
cli="$PWD/deploy/image/aiforge" # the static binary the image holds

step "writing bus credentials"
deploy/compose/creds.sh "$AIFORGE_CREDS_DIR" >/dev/null 2>&1 || fail "deploy/compose/creds.sh failed"

step "docker-compose up (project $project)"
"${compose[@]}" up -d >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "docker-compose up failed"; }

step "waiting for every container to be healthy"
services=$("${compose[@]}" config --services | grep -vx -e provision -e sandbox | sort)
deadline=$(( $(date +%s) + 180 ))
while :; do
  healthy=$(docker ps --filter "label=com.docker.compose.project=$project" --filter health=healthy \
    --format '{{.Label "com.docker.compose.service"}}' | sort)
  waiting=$(comm -23 <(printf '%s\n' "$services") <(printf '%s\n' "$healthy") | tr '\n' ' ')
  [ -z "${waiting// /}" ] && break
  [ "$(date +%s)" -lt "$deadline" ] || fail "not healthy after 180s: $waiting"
  sleep 2
done
echo "healthy: $(printf '%s\n' "$services" | tr '\n' ' ')"
edge1="http://$("${compose[@]}" port edge-1 8080)"
edge2="http://$("${compose[@]}" port edge-2 8080)"
echo "edges at $edge1 and $edge2"

export AIFORGE_URL="$edge1"
step "tenant, key, model on the simulator"
"$cli" tenants create acme || fail "tenants create"
keyout=$("$cli" keys create --tenant acme) || fail "keys create"
api_key=$(printf '%s\n' "$keyout" | sed -n 's/.*export AIFORGE_API_KEY=\(sk-[^[:space:]]*\).*/\1/p')
[ -n "$api_key" ] || fail "keys create printed no key"
"$cli" models register chat-small --base-url http://enginesim:9000/v1 --upstream sim-model || fail "models register"
# edge-2 learns of the model through its watch of the models bucket.
deadline=$(( $(date +%s) + 30 ))
until "$cli" models list --url "$edge2" 2>/dev/null | grep -q '^chat-small '; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "edge-2 does not list chat-small after 30s"
  sleep 1
done

# post URL BODY OUT: POST JSON with the tenant's key, the status code on stdout.
post() { curl -sS -o "$3" -w '%{http_code}' -H "Authorization: Bearer $api_key" -H 'Content-Type: application/json' -d "$2" "$1"; }

step "chat, plain (edge-1), once the workers serve the model"
chat='{"model":"chat-small","messages":[{"role":"user","content":"Hello!"}],"max_tokens":8}'
deadline=$(( $(date +%s) + 90 ))
until [ "$(post "$edge1/v1/chat/completions" "$chat" "$work/chat.json")" = 200 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "plain chat: not 200 after 90s: $(cat "$work/chat.json")"
  sleep 1
done
grep -q '"object":"chat.completion"' "$work/chat.json" && grep -q '"completion_tokens":8' "$work/chat.json" ||
  fail "plain chat: unexpected answer: $(cat "$work/chat.json")"
cat "$work/chat.json"; echo

step "chat, streamed (edge-2)"
stream='{"model":"chat-small","messages":[{"role":"user","content":"Hello!"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}'
code=$(curl -sS -N -o "$work/stream.txt" -w '%{http_code}' -H "Authorization: Bearer $api_key" -H 'Content-Type: application/json' -d "$stream" "$edge2/v1/chat/completions")
[ "$code" = 200 ] || fail "streamed chat: HTTP $code: $(cat "$work/stream.txt")"
[ "$(grep -c '"object":"chat.completion.chunk"' "$work/stream.txt")" -ge 3 ] && grep -q '"completion_tokens":3' "$work/stream.txt" &&
  [ "$(grep -v '^$' "$work/stream.txt" | tail -1)" = "data: [DONE]" ] || fail "streamed chat: unexpected stream: $(cat "$work/stream.txt")"
grep -c '^data: ' "$work/stream.txt" | sed 's/$/ SSE frames, ending in data: [DONE]/'

step "a document uploaded to a vector store, then searched"
code=$(curl -sS -o "$work/file.json" -w '%{http_code}' -H "Authorization: Bearer $api_key" \
  -F purpose=assistants -F file=@internal/eval/dataset/corpus/router.md "$edge1/v1/files")
[ "$code" = 200 ] || fail "file upload: HTTP $code: $(cat "$work/file.json")"
file_id=$(grep -o '"id":"file-[^"]*"' "$work/file.json" | head -1 | cut -d'"' -f4)
[ "$(post "$edge2/v1/vector_stores" '{"name":"support"}' "$work/vs.json")" = 200 ] || fail "vector store: $(cat "$work/vs.json")"
vs_id=$(grep -o '"id":"vs_[^"]*"' "$work/vs.json" | head -1 | cut -d'"' -f4)
[ -n "$file_id" ] && [ -n "$vs_id" ] || fail "no file or vector store id"
[ "$(post "$edge1/v1/vector_stores/$vs_id/files" "{\"file_id\":\"$file_id\"}" "$work/vsf.json")" = 200 ] || fail "add file: $(cat "$work/vsf.json")"
deadline=$(( $(date +%s) + 120 ))
while :; do
  curl -sS -o "$work/vsf.json" -H "Authorization: Bearer $api_key" "$edge2/v1/vector_stores/$vs_id/files/$file_id" || true
  grep -q '"status":"completed"' "$work/vsf.json" && break
  grep -q '"status":"\(failed\|cancelled\)"' "$work/vsf.json" && fail "ingest: $(cat "$work/vsf.json")"
  [ "$(date +%s)" -lt "$deadline" ] || fail "ingest: not completed after 120s: $(cat "$work/vsf.json")"
  sleep 1
done
[ "$(post "$edge1/v1/vector_stores/$vs_id/search" '{"query":"How do I connect my phone?","max_num_results":2}' "$work/search.json")" = 200 ] ||
  fail "search: $(cat "$work/search.json")"
grep -q '"filename":"router.md"' "$work/search.json" || fail "search did not find router.md: $(cat "$work/search.json")"
echo "found router.md in vector store $vs_id"

step "usage audit"
# The usage service folds the last events asynchronously: the audit is
# retried until it is clean or the deadline passes.
deadline=$(( $(date +%s) + 60 ))
audits=1
until "$cli" usage audit >"$work/audit.txt" 2>&1; do
  audits=$((audits + 1))
  [ "$(date +%s)" -lt "$deadline" ] || { cat "$work/audit.txt" >&2; fail "usage audit not clean after 60s"; }
  sleep 1
done
cat "$work/audit.txt"
echo "(clean on audit number $audits)"
"$cli" usage report --url "$edge2" 2>&1 | head -5 || true

step "the tour passed"
