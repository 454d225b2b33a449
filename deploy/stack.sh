# shellcheck shell=bash
# Shared by deploy/test.sh and deploy/chaos.sh (sourced, not run): bring the
# compose stack up from a freshly built image and always tear it down.
#
#   source deploy/stack.sh
#   stack_init deploy/test.sh aiforge-test   # tools (skip or fail), names, the EXIT trap
#   stack_up                                 # image, credentials, up, every container healthy; edge1, edge2
#   stack_tenant                             # tenant acme, its key (api_key), chat-small on the simulator
#
# Environment: AIFORGE_TEST_IMAGE names the image (default <prefix>:<pid>,
# removed at the end); AIFORGE_TEST_PROJECT the compose project (default
# <prefix>-<pid>); AIFORGE_TEST_KEEP=1 leaves the stack up to look at. Under
# CI=true a missing tool is a failure; elsewhere the caller exits 0 (skip).

# bounded SECONDS CMD...: CMD, killed when it has not finished in SECONDS
# (exit 124, with a line that names it): a docker engine that stops
# answering fails the run at that step instead of hanging it until CI's
# limit. Every docker and docker-compose call here goes through it.
bounded() {
  local limit=$1 rc=0
  shift
  timeout -k 10 "$limit" "$@" || rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "$stack_name: no answer from '$*' in ${limit}s (is the docker engine stuck?)" >&2
    rc=124
  fi
  return $rc
}
# docker: the engine's CLI, each call bounded (2 minutes: a restart waits
# its 10 s grace, a kill or a ps answers in seconds).
docker() { bounded 120 docker "$@"; }

# stack_init NAME PREFIX: checks the tools, names the image, the project and
# a work directory, and installs the EXIT trap that tears everything down.
stack_init() {
  stack_name=$1
  start=$(date +%s)
  failure=""
  if bounded 30 docker compose version >/dev/null 2>&1; then
    compose_bin=(docker compose)
  elif command -v docker-compose >/dev/null 2>&1; then
    compose_bin=(docker-compose)
  else
    compose_bin=()
  fi
  local tool missing=""
  for tool in docker go curl python3; do
    # type -P: the program on PATH (docker is also a function here).
    if ! type -P "$tool" >/dev/null 2>&1; then compose_bin=(); missing=$tool; fi
  done
  local info=0
  if [ ${#compose_bin[@]} -gt 0 ]; then bounded 60 docker info >/dev/null 2>&1 || info=$?; fi
  if [ $info -eq 124 ]; then
    fail "the docker engine did not answer 'docker info' in 60s"
  fi
  if [ ${#compose_bin[@]} -eq 0 ] || [ $info -ne 0 ]; then
    local msg="$stack_name needs docker (a running engine), docker-compose, go and curl: ${missing:-docker-compose or the docker engine} missing"
    if [ "${CI:-}" = "true" ]; then fail "$msg"; fi
    echo "SKIP: $msg" >&2
    exit 0
  fi
  image="${AIFORGE_TEST_IMAGE:-$2:$$}"
  project="${AIFORGE_TEST_PROJECT:-$2-$$}"
  work=$(mktemp -d)
  export AIFORGE_IMAGE="$image" AIFORGE_CREDS_DIR="$work/nats-creds"
  # The edges publish on two loopback ports that are free now (read back
  # by stack_up). Fixed ones, not 0: docker gives a restarted container a
  # new ephemeral port, and the rolling restart must find the edges again.
  read -r p1 p2 < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
  export AIFORGE_BIND=127.0.0.1 AIFORGE_PORT="$p1" AIFORGE_PORT_2="$p2"
  AIFORGE_ADMIN_KEY="ak-test-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  export AIFORGE_ADMIN_KEY
  # Bounded like docker: up and down of the whole stack take under a
  # minute here; 5 minutes is a stuck engine.
  compose=(bounded 300 "${compose_bin[@]}" -p "$project" -f deploy/compose/docker-compose.yml)
  built=""
  trap stack_cleanup EXIT
  trap 'exit 130' INT TERM
}

step() { echo "--- [$(( $(date +%s) - start ))s] $*"; }
fail() { failure="$*"; echo "FAIL $stack_name: $*" >&2; exit 1; }

# stack_cleanup is the EXIT trap: the stack's state and logs on a failure,
# then down -v, the image and the credentials. A caller's own cleanup runs
# first when it defines stack_before_cleanup.
stack_cleanup() {
  rc=$?
  set +e
  if declare -F stack_before_cleanup >/dev/null; then stack_before_cleanup; fi
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
  if ! "${compose[@]}" down -v --remove-orphans >"$work/down.log" 2>&1; then
    cat "$work/down.log" >&2
    # What down left: the project's containers, networks and volumes by
    # its label, each call bounded.
    local ids
    ids=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
    [ -n "$ids" ] && docker rm -f -v $ids >/dev/null
    ids=$(docker network ls -q --filter "label=com.docker.compose.project=$project")
    [ -n "$ids" ] && docker network rm $ids >/dev/null
    ids=$(docker volume ls -q --filter "label=com.docker.compose.project=$project")
    [ -n "$ids" ] && docker volume rm -f $ids >/dev/null
  fi
  step "removing the image and the credentials"
  [ -n "$built" ] && docker rmi -f "$image" >/dev/null 2>&1
  rm -rf "$work"
  if [ $rc -eq 0 ]; then
    echo "$stack_name: PASS in $(( $(date +%s) - start ))s"
  else
    echo "$stack_name: FAIL in $(( $(date +%s) - start ))s${failure:+: $failure}" >&2
  fi
  exit $rc
}

# wait_healthy SECONDS: until every long-running service's container is
# healthy (docker's healthcheck); the services of profiles (sandbox,
# observability) are not started by `up -d`.
wait_healthy() {
  local services healthy waiting deadline=$(( $(date +%s) + $1 ))
  services=$("${compose[@]}" config --services | grep -vx -e provision -e sandbox -e prometheus -e grafana -e otel-collector | sort)
  while :; do
    healthy=$(docker ps --filter "label=com.docker.compose.project=$project" --filter health=healthy \
      --format '{{.Label "com.docker.compose.service"}}' | sort)
    waiting=$(comm -23 <(printf '%s\n' "$services") <(printf '%s\n' "$healthy") | tr '\n' ' ')
    [ -z "${waiting// /}" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || fail "not healthy after $1s: $waiting"
    sleep 1
  done
  echo "healthy: $(printf '%s\n' "$services" | tr '\n' ' ')"
}

# stack_up: the image, the bus credentials, docker-compose up, every
# container healthy; sets cli (the static binary the image holds), edge1
# and edge2 (the edges' base URLs) and exports AIFORGE_URL=edge1.
stack_up() {
  step "building image $image"
  bounded 900 deploy/build-image.sh "$image" >"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; fail "deploy/build-image.sh $image failed"; }
  built=1
  cli="$PWD/deploy/image/aiforge"

  step "writing bus credentials"
  deploy/compose/creds.sh "$AIFORGE_CREDS_DIR" >/dev/null 2>&1 || fail "deploy/compose/creds.sh failed"

  step "docker-compose up (project $project)"
  "${compose[@]}" up -d >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "docker-compose up failed"; }

  step "waiting for every container to be healthy"
  wait_healthy 180
  edge1="http://$("${compose[@]}" port edge-1 8080)"
  edge2="http://$("${compose[@]}" port edge-2 8080)"
  echo "edges at $edge1 and $edge2"
  export AIFORGE_URL="$edge1"
}

# post URL BODY OUT: POST JSON with the tenant's key, the status code on stdout.
post() { curl -sS -o "$3" -w '%{http_code}' -H "Authorization: Bearer $api_key" -H 'Content-Type: application/json' -d "$2" "$1"; }

# stack_tenant: tenant acme, its key (api_key, exported as
# AIFORGE_API_KEY), the model chat-small on the simulator, listed by both
# edges and answered by the workers.
stack_tenant() {
  step "tenant, key, model on the simulator"
  "$cli" tenants create acme || fail "tenants create"
  local keyout deadline
  keyout=$("$cli" keys create --tenant acme) || fail "keys create"
  api_key=$(printf '%s\n' "$keyout" | sed -n 's/.*export AIFORGE_API_KEY=\(sk-[^[:space:]]*\).*/\1/p')
  [ -n "$api_key" ] || fail "keys create printed no key"
  export AIFORGE_API_KEY="$api_key"
  "$cli" models register chat-small --base-url http://enginesim:9000/v1 --upstream sim-model || fail "models register"
  # edge-2 learns of the model through its watch of the models bucket.
  deadline=$(( $(date +%s) + 30 ))
  until "$cli" models list --url "$edge2" 2>/dev/null | grep '^chat-small ' >/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "edge-2 does not list chat-small after 30s"
    sleep 1
  done

  step "chat, plain (edge-1), once the workers serve the model"
  chat='{"model":"chat-small","messages":[{"role":"user","content":"Hello!"}],"max_tokens":8}'
  deadline=$(( $(date +%s) + 90 ))
  until [ "$(post "$edge1/v1/chat/completions" "$chat" "$work/chat.json")" = 200 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "plain chat: not 200 after 90s: $(cat "$work/chat.json")"
    sleep 1
  done
}
