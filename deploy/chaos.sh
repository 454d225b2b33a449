#!/usr/bin/env bash
# Chaos on the compose stack (deploy/compose; set-up and teardown shared
# with deploy/test.sh through deploy/stack.sh), in two phases, each under a
# bounded load from `aiforge loadgen` (chat at --rate with at most
# --concurrency in flight, alternating the two edges, every 4th streamed;
# one document a second uploaded into a vector store):
#
# 1. The bus: kill (docker kill, SIGKILL) the node leading the JetStream
#    meta group, wait for a new meta leader, start it again, wait until it
#    is current in the meta group and the USAGE and DOCS streams; then the
#    same for the USAGE stream's leader and the DOCS stream's leader.
#    Asserts: no accepted (2xx) chat request broken, every accepted chat
#    request has exactly one usage event (the usage report's request count
#    grows by the number accepted, plus at most one for each request that
#    failed after a worker took it: its engine may have spent the tokens),
#    `aiforge usage audit` clean, every
#    accepted document completed in its vector store.
# 2. A rolling restart (docker restart: SIGTERM, 10 s grace) of every
#    aiforge container, one at a time, each healthy before the next.
#    Asserts the same, and that the only failed requests are ones in flight
#    on a restarted container: a connection lost mid-request (conn-lost) or
#    the 5xx a draining service answers; they are listed with their times
#    next to the restarts' windows.
#
# The load generator plays the load balancer in front of the two edges: a
# request whose connection cannot be opened (that edge is down) is sent to
# the other edge; a request that was sent is never retried.
#
#   deploy/chaos.sh          # a few minutes; prints a summary, exits non-zero on a failed assertion
#
# Environment as deploy/test.sh's (AIFORGE_TEST_IMAGE, AIFORGE_TEST_PROJECT,
# AIFORGE_TEST_KEEP); CHAOS_RATE (chat requests/s, default 20) and
# CHAOS_CONCURRENCY (default 8) size the load.
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/stack.sh
stack_init deploy/chaos.sh aiforge-chaos
rate=${CHAOS_RATE:-20}
conc=${CHAOS_CONCURRENCY:-8}
loadpid=""
stack_before_cleanup() {
  [ -n "$loadpid" ] && kill "$loadpid" 2>/dev/null
  wait 2>/dev/null
  if [ "$rc" -ne 0 ]; then
    echo "--- the load summaries" >&2
    cat "$work"/chaos.json "$work"/rolling.json 2>/dev/null | head -c 20000 >&2 || true
    echo "--- errors of ingest, embedder, retriever, workers" >&2
    "${compose[@]}" logs --no-color ingest embedder retriever workers-1 workers-2 2>&1 | grep -i '"level":"\(error\|warn\)"' | tail -40 >&2 || true
  fi
}

stack_up
stack_tenant

# container SERVICE: its container id.
container() { "${compose[@]}" ps -q "$1"; }

# jsz_view: for the meta group and the USAGE and DOCS streams, the line of
# `aiforge nats leaders` as the group's leader reports it (only a leader
# knows how current its peers are); a group without a leader has no line.
jsz_view() {
  local n
  for n in 1 2 3; do
    docker exec "$(container nats-$n)" /aiforge nats leaders --stream USAGE,DOCS 2>/dev/null |
      awk -v me="nats-$n" '$2 == me' || true
  done
}
leader_of() { jsz_view | awk -v g="$1" '$1 == g {print $2}'; }
# all_current: every group has a leader and both other peers current.
all_current() {
  local v
  v=$(jsz_view)
  for g in meta USAGE DOCS; do
    printf '%s\n' "$v" | awk -v g="$g" '$1 == g && NF == 4 && $3 ~ /:current$/ && $4 ~ /:current$/ {ok=1} END {exit !ok}' || return 1
  done
}
now_ms() { date +%s%3N; }

# usage_requests: the requests the usage report counts in the last hour.
usage_requests() {
  "$cli" usage report --from 1h --bucket 1d --csv 2>/dev/null | awk -F, 'NR > 1 {s += $5} END {print s + 0}'
}

# start_load NAME: loadgen in the background, its summary in $work/NAME.json.
start_load() {
  "$cli" loadgen --url "$edge1,$edge2" --requests 100000 --rate "$rate" --concurrency "$conc" \
    --doc-every 1s --docs 1000 --doc-wait 3m --out "$work/$1.json" 2>"$work/$1.log" &
  loadpid=$!
  load_start_ms=$(now_ms)
}
# stop_load: interrupt it (it finishes what is in flight, waits for the
# documents) and wait for its summary.
stop_load() {
  kill -TERM "$loadpid"
  wait "$loadpid" || fail "loadgen failed: $(cat "$work/$1.log")"
  loadpid=""
  cat "$work/$1.log"
}
at() { awk -v ms=$(( $(now_ms) - load_start_ms )) 'BEGIN {printf "%.1f", ms / 1000}'; } # seconds since the load started

# check_phase NAME BASELINE: the assertions shared by both phases.
check_phase() {
  local s=$work/$1.json accepted broken docs_acc docs_done want got deadline maybe
  accepted=$(go_json "$s" chat.accepted)
  # A request that failed after a worker took it (502: the worker's frames
  # lost while a NATS node died; conn-lost: the edge restarted under it) may
  # still have run to the end on the engine, and the tokens it spent are
  # metered. Each may add one usage event, never more; every accepted
  # request must have exactly one.
  maybe=$(go_json "$s" chat.failed_by | python3 -c 'import json,sys
f=json.load(sys.stdin); print(f.get("502", 0) + f.get("conn-lost", 0))')
  broken=$(go_json "$s" chat.broken)
  docs_acc=$(go_json "$s" docs.accepted)
  docs_done=$(go_json "$s" docs.completed)
  want=$(( $2 + accepted ))
  deadline=$(( $(date +%s) + 60 ))
  while got=$(usage_requests); [ "$got" -lt "$want" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || break
    sleep 1
  done
  deadline=$(( $(date +%s) + 60 ))
  until "$cli" usage audit >"$work/$1-audit.txt" 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || { cat "$work/$1-audit.txt" >&2; fail "$1: usage audit not clean after 60s"; }
    sleep 1
  done
  summary+="$1: chat sent $(go_json "$s" chat.sent) accepted $accepted completed $(go_json "$s" chat.completed) broken $broken failed $(go_json "$s" chat.failed) $(go_json "$s" chat.failed_by) retried-on-other-edge $(go_json "$s" chat.retried)
$1: usage events for the load $(( got - $2 )) (accepted $accepted, failed after a worker took them $maybe); audit: $(grep -h 'events replayed\|differences:' "$work/$1-audit.txt" | tr -s ' ' | tr '\n' ' ')
$1: documents sent $(go_json "$s" docs.sent) accepted $docs_acc completed $docs_done failed $(go_json "$s" docs.failed) $(go_json "$s" docs.failed_by) final $(go_json "$s" docs.final_status)
"
  [ "$broken" = 0 ] || fail "$1: $broken accepted chat requests broken"
  [ "$got" -ge "$want" ] && [ "$got" -le $(( want + maybe )) ] ||
    fail "$1: usage report counts $((got - $2)) requests for the load, $accepted accepted and $maybe failed after a worker took them"
  [ "$docs_acc" -gt 0 ] && [ "$docs_done" = "$docs_acc" ] || fail "$1: $docs_done of $docs_acc documents completed: $(go_json "$s" docs.not_completed)"
}
# go_json FILE PATH: one field of a loadgen summary (dotted path), as JSON.
go_json() { python3 -c 'import json,sys
v=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): v=v[k]
print(json.dumps(v, separators=(",", ":")) if not isinstance(v, (int, str)) else v)' "$1" "$2"; }

summary=""
# The baseline counts the one chat stack_tenant had answered 200. The usage
# service folds its event asynchronously, so wait until the report counts it:
# read too early, the baseline misses it and the phase then counts it as one
# of the load's (a usage report one above the requests accepted).
deadline=$(( $(date +%s) + 60 ))
until [ "$(usage_requests)" -ge 1 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "the usage report does not count the first chat after 60s"
  sleep 1
done
base=$(usage_requests)

step "phase 1: NATS leaders killed under load (rate $rate/s, concurrency $conc)"
start_load chaos
sleep 3 # some load before the first kill
for group in meta USAGE DOCS; do
  deadline=$(( $(date +%s) + 60 ))
  until all_current; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "the cluster is not current after 60s: $(jsz_view | tr '\n' ';')"
    sleep 0.5
  done
  old=$(leader_of "$group")
  [ -n "$old" ] || fail "no $group leader"
  step "[$(at)s] killing $old, the $group leader"
  t0=$(now_ms)
  docker kill "$(container "$old")" >/dev/null
  deadline=$(( $(date +%s) + 60 ))
  while new=$(leader_of "$group"); [ -z "$new" ] || [ "$new" = "$old" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "no new $group leader 60s after killing $old"
    sleep 0.2
  done
  t1=$(now_ms)
  step "[$(at)s] new $group leader $new after $(( t1 - t0 )) ms; starting $old"
  docker start "$(container "$old")" >/dev/null
  deadline=$(( $(date +%s) + 120 ))
  until all_current; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "$old not current 120s after its restart: $(jsz_view | tr '\n' ';')"
    sleep 0.5
  done
  t2=$(now_ms)
  step "[$(at)s] $old current again $(( t2 - t1 )) ms after its start"
  summary+="killed $old (leader of $group): new $group leader $new in $(( t1 - t0 )) ms; current again $(( t2 - t1 )) ms after its restart
"
done
sleep 3 # some load after the last restart
step "stopping the load; waiting for the documents"
stop_load chaos
check_phase chaos "$base"
# Failed requests while a leader was away: they should be only 503s
# (service_unavailable, retried), never a 500 of the edge.
summary+="chaos failures: $(go_json "$work/chaos.json" failures)
"

step "phase 2: rolling restart of every aiforge container under load"
base=$(usage_requests)
start_load rolling
sleep 3
windows=""
for svc in edge-1 edge-2 workers-1 workers-2 usage ingest embedder retriever batch guardian; do
  a=$(at)
  docker restart "$(container "$svc")" >/dev/null
  wait_healthy 120 >/dev/null
  windows+="$svc ${a}s..$(at)s, "
  step "[$(at)s] restarted $svc (from ${a}s), all healthy"
done
sleep 3
step "stopping the load; waiting for the documents"
stop_load rolling
check_phase rolling "$base"
summary+="rolling restarts (down..healthy, seconds since its load started): ${windows%, }
rolling failures: $(go_json "$work/rolling.json" failures)
"
# In flight on a restarted container: a connection lost mid-request, or the
# 5xx of a service draining (its replies lost with it). Anything else fails.
others=$(go_json "$work/rolling.json" chat.failed_by | python3 -c 'import json,sys
print(" ".join(f"{k}={v}" for k,v in json.load(sys.stdin).items() if k not in ("conn-lost","502","503","504")))')
[ -z "$others" ] || fail "rolling restart: failures other than in-flight ones: $others"

step "summary"
printf '%s' "$summary"
