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
# The stack's set-up and teardown are deploy/stack.sh's, shared with
# deploy/chaos.sh.
source deploy/stack.sh
stack_init deploy/test.sh aiforge-test
stack_up
stack_tenant # tenant, key, model; the first plain chat answered 200 ($work/chat.json)
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

step "a model whose engine needs an API key: sealed by the edge, opened by both workers"
# enginesim-keyed refuses requests without its key; the edge seals the key
# to the stack's secrets.pub, and every worker replica must open it with the
# one secrets.key they are all given.
ENGINE_KEY="${AIFORGE_SIM_ENGINE_KEY:-sim-engine-key}" "$cli" models register chat-keyed \
  --base-url http://enginesim-keyed:9000/v1 --upstream sim-model --engine-api-key-env ENGINE_KEY || fail "models register chat-keyed"
keyed='{"model":"chat-keyed","messages":[{"role":"user","content":"Hello!"}],"max_tokens":2}'
deadline=$(( $(date +%s) + 90 ))
until [ "$(post "$edge1/v1/chat/completions" "$keyed" "$work/keyed.json")" = 200 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "chat-keyed: not 200 after 90s: $(cat "$work/keyed.json")"
  sleep 1
done
# Both workers report the model servable (each opened the sealed key and
# verified the engine with it).
deadline=$(( $(date +%s) + 60 ))
until "$cli" models status chat-keyed --json 2>/dev/null | grep '"servable_replicas": 2' >/dev/null; do
  [ "$(date +%s)" -lt "$deadline" ] || { "$cli" models status chat-keyed >&2 || true; fail "chat-keyed: not servable on both workers after 60s"; }
  sleep 1
done
for i in 1 2 3 4 5 6; do
  [ "$(post "$edge2/v1/chat/completions" "$keyed" "$work/keyed.json")" = 200 ] || fail "chat-keyed request $i: $(cat "$work/keyed.json")"
done
echo "chat-keyed answered 7 of 7; servable on both workers"

step "a document uploaded to a vector store, then searched"
code=$(curl -sS -o "$work/file.json" -w '%{http_code}' -H "Authorization: Bearer $api_key" \
  -F purpose=assistants -F file=@internal/eval/dataset/corpus/router.md "$edge1/v1/files")
[ "$code" = 200 ] || fail "file upload: HTTP $code: $(cat "$work/file.json")"
file_id=$(grep -o '"id":"file-[^"]*"' "$work/file.json" | sed -n 1p | cut -d'"' -f4)
[ "$(post "$edge2/v1/vector_stores" '{"name":"support"}' "$work/vs.json")" = 200 ] || fail "vector store: $(cat "$work/vs.json")"
vs_id=$(grep -o '"id":"vs_[^"]*"' "$work/vs.json" | sed -n 1p | cut -d'"' -f4)
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
