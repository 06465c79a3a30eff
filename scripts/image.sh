#!/usr/bin/env bash
# The container image: build it, and smoke-test it for real.
#
#   bash scripts/image.sh build   # the Debian base image first if it is missing, then the image
#   bash scripts/image.sh smoke   # run the image: /ready, evidence, `taguru health`, replicas on
#                                 # PostgreSQL, deploy/compose-sqlite.yaml by podman-compose
#   bash scripts/image.sh base    # only the base image (debootstrap from this host's Debian mirror)
#
# Settings (environment): IMAGE (localhost/taguru-server:dev), BASE (localhost/debian:bookworm;
# any Debian-based image, e.g. python:3.11-slim, where a registry is reachable), SMOKE_PORT (the host
# port the smoke test maps to the image's 8248; a free one when unset),
# PODMAN_RUNTIME (runc when installed: crun refuses a hybrid cgroup layout), CA_BUNDLE (the host's
# CA bundle, mounted for pip during the build only; CA_BUNDLE= leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/taguru-server:dev}
BASE=${BASE:-localhost/debian:bookworm}
SMOKE_PORT=${SMOKE_PORT:-}
CA_BUNDLE=${CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}
SUITE=bookworm
# open files and processes within what an unprivileged container host allows
ULIMITS=(--ulimit nofile=20000:20000 --ulimit nproc=32768:32768)

die() {
  echo "image.sh: $*" >&2
  exit 1
}

if [ -z "${PODMAN_RUNTIME+x}" ] && command -v runc >/dev/null; then
  PODMAN_RUNTIME=runc
fi
# podman, with the runtime chosen above; without systemd every run and rm of an image with a
# HEALTHCHECK logs that its health timer cannot be set up (harmless: smoke runs the check itself)
podman() {
  local runtime=()
  [ -z "${PODMAN_RUNTIME:-}" ] || runtime=(--runtime "$PODMAN_RUNTIME")
  command podman "${runtime[@]}" "$@" 2> >(grep -v 'unable to get systemd connection' >&2)
}

# The first URI of a Debian suite in this host's apt sources (deb822 or one-line format).
mirror_for() {
  local suite=$1 file
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -r "$file" ] || continue
    awk -v suite="$suite" '
      /^[[:space:]]*$/ { if (uri != "" && hit) { print uri; exit } uri = ""; hit = 0; next }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) hit = 1 }
      END { if (uri != "" && hit) print uri }
    ' "$file" | head -n 1
  done | head -n 1
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$file" ] || continue
    awk -v suite="$suite" '$1 == "deb" { for (i = 2; i < NF; i++) if ($i !~ /^\[/ && $(i + 1) == suite) { print $i; exit } }' "$file"
  done | head -n 1
}

make_base() {
  command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
  local mirror security rootfs
  mirror=$(mirror_for "$SUITE" | head -n 1)
  [ -n "$mirror" ] || die "no Debian mirror for '$SUITE' in this host's apt sources; build with BASE=<an image>"
  security=$(mirror_for "$SUITE-security" | head -n 1)
  rootfs=$(mktemp -d)
  BASE_ROOTFS=$rootfs
  trap cleanup EXIT
  echo "image.sh: making $BASE with debootstrap from $mirror" >&2
  debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror" >/dev/null || die "debootstrap failed"
  {
    echo "deb $mirror $SUITE main"
    echo "deb $mirror $SUITE-updates main"
    [ -z "$security" ] || echo "deb $security $SUITE-security main"
  } >"$rootfs/etc/apt/sources.list"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import -q --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null || die "podman import failed"
  rm -rf --one-file-system "$rootfs"
  BASE_ROOTFS=""
}

build() {
  command -v podman >/dev/null || die "podman is not installed (apt-get install podman runc)"
  if ! podman image exists "$BASE"; then
    case "$BASE" in
      localhost/debian:*) make_base ;;
      *) ;; # a registry image: podman build pulls it
    esac
  fi
  local ca=()
  if [ -n "$CA_BUNDLE" ] && [ -r "$CA_BUNDLE" ]; then
    ca=(-v "$CA_BUNDLE:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
  fi
  # docker format: the OCI format drops HEALTHCHECK
  podman build --format docker --network=host "${ULIMITS[@]}" "${ca[@]}" \
    --build-arg "BASE=$BASE" -t "$IMAGE" -f Containerfile . || die "podman build failed"
  echo "image.sh: built $IMAGE" >&2
}

BASE_ROOTFS=""
SMOKE_CONTAINERS=()
SMOKE_VOLUME=""
SMOKE_PG=""
SMOKE_PROJECT=""
# whatever a failed or interrupted step left: the base's root file system, the smoke test's
# containers, volume and PostgreSQL cluster
cleanup() {
  local name
  if [ -n "$BASE_ROOTFS" ]; then
    rm -rf --one-file-system "$BASE_ROOTFS"
  fi
  for name in "${SMOKE_CONTAINERS[@]}"; do
    podman rm -f -t 10 "$name" >/dev/null 2>&1 || true
  done
  if [ -n "$SMOKE_VOLUME" ]; then
    podman volume rm -f "$SMOKE_VOLUME" >/dev/null 2>&1 || true
  fi
  if [ -n "$SMOKE_PROJECT" ]; then
    compose down >/dev/null 2>&1 || true
    podman volume rm -f "${SMOKE_PROJECT}_taguru-data" >/dev/null 2>&1 || true
    podman network rm -f "${SMOKE_PROJECT}_default" >/dev/null 2>&1 || true
  fi
  if [ -n "$SMOKE_PG" ]; then
    as_postgres "$(pg_bin)/pg_ctl" -D "$SMOKE_PG/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf --one-file-system "$SMOKE_PG"
  fi
}

# A container the smoke test started: its log on stderr, then the failure.
fail_with_log() {
  podman logs "$1" >&2 || true
  die "smoke: $2"
}

# Wait until GET $2/ready answers 200 from the host, while container $1 runs (60 s at most).
wait_ready() {
  local name=$1 url=$2 started=$SECONDS code=""
  while [ $((SECONDS - started)) -lt 60 ]; do
    code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$url/ready" || true)
    if [ "$code" = 200 ]; then
      echo "image.sh: smoke: $name: GET /ready 200 after $((SECONDS - started)) s" >&2
      return 0
    fi
    if [ "$(podman inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" != true ]; then
      fail_with_log "$name" "the container exited before /ready answered"
    fi
    sleep 0.5
  done
  fail_with_log "$name" "GET $url/ready did not answer 200 within 60 s (last: ${code:-no answer})"
}

# The HEALTHCHECK of container $1 (podman runs `taguru health` in it), and `taguru health` itself.
check_health() {
  local name=$1 health
  podman healthcheck run "$name" >/dev/null 2>&1 || fail_with_log "$name" "'podman healthcheck run' (taguru health) failed"
  health=$(podman exec "$name" taguru health) || fail_with_log "$name" "'taguru health' failed in the container"
  echo "image.sh: smoke: $name: healthcheck passed: $health" >&2
}

# Stop container $1 with SIGTERM: the server must drain and exit 0.
stop_cleanly() {
  local name=$1 status
  podman stop -t 30 "$name" >/dev/null || die "smoke: podman stop $name failed"
  status=$(podman inspect -f '{{.State.ExitCode}}' "$name")
  [ "$status" = 0 ] || fail_with_log "$name" "the server exited with status $status on SIGTERM"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pg_bin() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$dir/initdb" ] && echo "$dir" && return 0
  done
  dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)"
}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

smoke() {
  command -v podman >/dev/null || die "podman is not installed (apt-get install podman runc)"
  command -v curl >/dev/null || die "curl is not installed"
  podman image exists "$IMAGE" || die "no image $IMAGE; run 'bash scripts/image.sh build' first"
  [ -n "$SMOKE_PORT" ] || SMOKE_PORT=$(free_port)
  local base="http://127.0.0.1:$SMOKE_PORT" suffix name
  suffix="$$-$(date +%s)"
  SMOKE_VOLUME="taguru-smoke-data-$suffix"
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  podman volume create "$SMOKE_VOLUME" >/dev/null || die "cannot create volume $SMOKE_VOLUME"

  # 1. `taguru demo --exit` imports the bundled corpus into the volume and checks its own answers.
  echo "image.sh: smoke: taguru demo --exit (imports the bundled demo corpus into the volume)" >&2
  name="taguru-smoke-demo-$suffix"
  SMOKE_CONTAINERS+=("$name")
  podman run --name "$name" --network=none --read-only "${ULIMITS[@]}" \
    -v "$SMOKE_VOLUME:/data" "$IMAGE" demo --exit --data-dir /data --addr 127.0.0.1:8248 >/dev/null ||
    fail_with_log "$name" "'taguru demo --exit' failed in the image"

  # 2. The bare image (the entrypoint serves, on the image's 0.0.0.0:8248) on that volume, with a
  #    read-only root, reached from the host through a loopback port.
  if curl -s --max-time 2 -o /dev/null "$base/live"; then
    die "smoke: something already answers on $base; stop it or set SMOKE_PORT"
  fi
  name="taguru-smoke-$suffix"
  SMOKE_CONTAINERS+=("$name")
  echo "image.sh: smoke: starting $IMAGE as $name on $base" >&2
  podman run -d --name "$name" --read-only "${ULIMITS[@]}" \
    -p "127.0.0.1:$SMOKE_PORT:8248" -v "$SMOKE_VOLUME:/data" "$IMAGE" >/dev/null ||
    die "smoke: podman run failed"
  wait_ready "$name" "$base"
  local body items
  body=$(curl -sS --max-time 30 -f "$base/contexts/demo/evidence" -H 'Content-Type: application/json' \
    -d '{"origins":["青嶺酒造"],"labels":["杜氏"],"budget":{"max_items":6}}') ||
    fail_with_log "$name" "POST /contexts/demo/evidence failed"
  # the package's items, and one of them the association the demo corpus states (青嶺酒造 —杜氏→ 高瀬)
  items=$(printf '%s' "$body" | python3 -c 'import json, sys
items = json.load(sys.stdin).get("result", {}).get("items")
ok = isinstance(items, list) and any(
    (item.get("association") or {}).get("object") == "高瀬" for item in items if isinstance(item, dict)
)
print(len(items) if ok else 0)') || die "smoke: the evidence answer is not JSON"
  [ "$items" -gt 0 ] || die "smoke: the evidence package of the demo context lacks its items (青嶺酒造 —杜氏→ 高瀬)"
  echo "image.sh: smoke: POST /contexts/demo/evidence answered a package of $items items" >&2
  check_health "$name"
  stop_cleanly "$name"
  echo "image.sh: smoke: the SQLite image passed (SIGTERM stopped the server with status 0)" >&2

  smoke_postgres "$suffix"
  smoke_compose "$suffix"
}

# podman-compose on deploy/compose-sqlite.yaml, as the smoke test's project, with this host's runtime and limits.
compose() {
  local runtime=()
  [ -z "${PODMAN_RUNTIME:-}" ] || runtime=(--podman-args "--runtime $PODMAN_RUNTIME")
  podman-compose "${runtime[@]}" --podman-run-args "${ULIMITS[*]}" -p "$SMOKE_PROJECT" \
    -f deploy/compose-sqlite.yaml "$@" 2> >(grep -v -e 'unable to get systemd connection' -e 'failed to connect to syslog' \
      -e 'inspecting object: no such volume' >&2) # (it looks for the volume before it creates it)
}

# 4. deploy/compose-sqlite.yaml brought up by podman-compose: the named volume, the loopback port,
#    the required token (401 without it), the healthcheck. Skipped where podman-compose is not
#    installed (outside CI). deploy/compose.yaml needs the postgres and haproxy images of a
#    registry; it is validated offline by the test suite.
smoke_compose() {
  local suffix=$1 port url container code
  if ! command -v podman-compose >/dev/null; then
    [ "${CI:-}" != true ] || die "smoke: podman-compose is not installed; .ci/run installs it"
    echo "image.sh: smoke: podman-compose is not installed here; the compose check is skipped" >&2
    return 0
  fi
  SMOKE_PROJECT="taguru-smoke-$suffix"
  port=$(free_port)
  url="http://127.0.0.1:$port"
  container="${SMOKE_PROJECT}_taguru_1"
  echo "image.sh: smoke: podman-compose up on deploy/compose-sqlite.yaml ($url)" >&2
  export TAGURU_API_TOKENS=smoke:tok-smoke HOST_PORT=$port IMAGE=$IMAGE
  compose up -d >/dev/null || die "smoke: podman-compose up failed"
  wait_ready "$container" "$url"
  code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' -X PUT "$url/contexts/sake" || true)
  [ "$code" = 401 ] || fail_with_log "$container" "PUT without the token answered ${code:-nothing}, not 401"
  curl -sS --max-time 10 -f -o /dev/null -X PUT -H 'Authorization: Bearer tok-smoke' "$url/contexts/sake" ||
    fail_with_log "$container" "PUT /contexts/sake with the compose file's token failed"
  echo "image.sh: smoke: the compose server refuses a request without its token and takes one with it" >&2
  check_health "$container"
  compose down >/dev/null || die "smoke: podman-compose down failed"
  echo "image.sh: smoke: passed" >&2
}

# 3. What deploy/compose.yaml and deploy/kubernetes.yaml run: `taguru migrate`, then two replicas
#    of the image on one PostgreSQL database (a throwaway cluster on this host); a write through
#    one is read through the other. Skipped where PostgreSQL is not installed (outside CI).
smoke_postgres() {
  local suffix=$1 bin pg_port url port1 port2 name1 name2 found
  bin=$(pg_bin)
  if [ ! -x "$bin/initdb" ]; then
    [ "${CI:-}" != true ] || die "smoke: PostgreSQL is not installed; .ci/run installs it"
    echo "image.sh: smoke: PostgreSQL is not installed here; the replica check is skipped" >&2
    return 0
  fi
  SMOKE_PG=$(mktemp -d)
  chmod 755 "$SMOKE_PG"
  [ "$(id -u)" != 0 ] || chown postgres "$SMOKE_PG"
  pg_port=$(free_port)
  as_postgres "$bin/initdb" -D "$SMOKE_PG/data" -U taguru -A trust >/dev/null || die "smoke: initdb failed"
  as_postgres "$bin/pg_ctl" -D "$SMOKE_PG/data" -l "$SMOKE_PG/log" -w -o \
    "-p $pg_port -k $SMOKE_PG -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null ||
    die "smoke: PostgreSQL did not start ($SMOKE_PG/log)"
  url="postgresql://taguru@127.0.0.1:$pg_port/postgres"
  echo "image.sh: smoke: taguru migrate on a throwaway PostgreSQL (127.0.0.1:$pg_port)" >&2
  name1="taguru-smoke-migrate-$suffix"
  SMOKE_CONTAINERS+=("$name1")
  podman run --name "$name1" --network=host --read-only "${ULIMITS[@]}" \
    -e "TAGURU_DATABASE_URL=$url" "$IMAGE" migrate >/dev/null 2>&1 ||
    fail_with_log "$name1" "'taguru migrate' failed in the image"
  port1=$(free_port)
  port2=$(free_port)
  name1="taguru-smoke-replica1-$suffix"
  name2="taguru-smoke-replica2-$suffix"
  SMOKE_CONTAINERS+=("$name1" "$name2")
  podman run -d --name "$name1" --network=host --read-only "${ULIMITS[@]}" \
    -e "TAGURU_DATABASE_URL=$url" -e "TAGURU_ADDR=127.0.0.1:$port1" "$IMAGE" >/dev/null ||
    die "smoke: podman run failed"
  podman run -d --name "$name2" --network=host --read-only "${ULIMITS[@]}" \
    -e "TAGURU_DATABASE_URL=$url" -e "TAGURU_ADDR=127.0.0.1:$port2" "$IMAGE" >/dev/null ||
    die "smoke: podman run failed"
  wait_ready "$name1" "http://127.0.0.1:$port1"
  wait_ready "$name2" "http://127.0.0.1:$port2"
  curl -sS --max-time 30 -f -o /dev/null -X PUT "http://127.0.0.1:$port1/contexts/sake" ||
    fail_with_log "$name1" "PUT /contexts/sake failed on the first replica"
  curl -sS --max-time 30 -f -o /dev/null "http://127.0.0.1:$port1/contexts/sake/sources" \
    -H 'Content-Type: application/json' -d '{"passages":{"kura.md":"青嶺酒造は雲居県霧沢町の蔵元である。"}}' ||
    fail_with_log "$name1" "POST /contexts/sake/sources failed on the first replica"
  found=$(curl -sS --max-time 30 -f "http://127.0.0.1:$port2/contexts/sake/sources/search" \
    -H 'Content-Type: application/json' -d '{"query":"酒造"}') ||
    fail_with_log "$name2" "POST /contexts/sake/sources/search failed on the second replica"
  case "$found" in
    *kura.md*) ;;
    *) die "smoke: the second replica does not find the passage the first one stored" ;;
  esac
  echo "image.sh: smoke: a passage stored through one replica is found through the other" >&2
  check_health "$name1"
  check_health "$name2"
  stop_cleanly "$name1"
  stop_cleanly "$name2"
  echo "image.sh: smoke: the replicas on PostgreSQL passed" >&2
}

case "${1:-}" in
  build) build ;;
  base) make_base ;;
  smoke) smoke ;;
  *)
    echo "usage: bash scripts/image.sh build|smoke|base" >&2
    exit 2
    ;;
esac
