#!/usr/bin/env bash
# The container image: build it, and smoke-test it for real.
#
#   bash scripts/image.sh build   # the Debian base image first if it is missing, then the image
#   bash scripts/image.sh smoke   # run the image, check /ready, evidence, `taguru health`; clean up
#   bash scripts/image.sh base    # only the base image (debootstrap from this host's Debian mirror)
#
# Settings (environment): IMAGE (localhost/taguru-server:dev), BASE (localhost/debian:bookworm;
# any Debian-based image, e.g. python:3.11-slim, where a registry is reachable), SMOKE_PORT (18248,
# the host port the smoke test maps to the image's 8248),
# PODMAN_RUNTIME (runc when installed: crun refuses a hybrid cgroup layout), CA_BUNDLE (the host's
# CA bundle, mounted for pip during the build only; CA_BUNDLE= leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/taguru-server:dev}
BASE=${BASE:-localhost/debian:bookworm}
SMOKE_PORT=${SMOKE_PORT:-18248}
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
SMOKE_NAME=""
SMOKE_VOLUME=""
# whatever a failed or interrupted step left: the base's root file system, the smoke container and volume
cleanup() {
  if [ -n "$BASE_ROOTFS" ]; then
    rm -rf --one-file-system "$BASE_ROOTFS"
  fi
  if [ -n "$SMOKE_NAME" ]; then
    podman rm -f -t 10 "$SMOKE_NAME" >/dev/null 2>&1 || true
  fi
  if [ -n "$SMOKE_VOLUME" ]; then
    podman volume rm -f "$SMOKE_VOLUME" >/dev/null 2>&1 || true
  fi
}


smoke() {
  command -v podman >/dev/null || die "podman is not installed (apt-get install podman runc)"
  command -v curl >/dev/null || die "curl is not installed"
  podman image exists "$IMAGE" || die "no image $IMAGE; run 'bash scripts/image.sh build' first"
  local base="http://127.0.0.1:$SMOKE_PORT" suffix
  suffix="$$-$(date +%s)"
  SMOKE_VOLUME="taguru-smoke-data-$suffix"
  trap cleanup EXIT
  podman volume create "$SMOKE_VOLUME" >/dev/null || die "cannot create volume $SMOKE_VOLUME"

  # 1. `taguru demo --exit` imports the bundled corpus into the volume and checks its own answers.
  echo "image.sh: smoke: taguru demo --exit (imports the bundled demo corpus into the volume)" >&2
  SMOKE_NAME="taguru-smoke-demo-$suffix"
  if ! podman run --name "$SMOKE_NAME" --network=none --read-only "${ULIMITS[@]}" \
    -v "$SMOKE_VOLUME:/data" "$IMAGE" demo --exit --data-dir /data --addr 127.0.0.1:8248 >/dev/null; then
    podman logs "$SMOKE_NAME" >&2 || true
    die "smoke: 'taguru demo --exit' failed in the image"
  fi
  podman rm -f "$SMOKE_NAME" >/dev/null
  SMOKE_NAME=""

  # 2. The bare image (the entrypoint serves, on the image's 0.0.0.0:8248) on that volume, with a
  #    read-only root, reached from the host through a loopback port.
  if curl -s --max-time 2 -o /dev/null "$base/live"; then
    die "smoke: something already answers on $base; stop it or set SMOKE_PORT"
  fi
  SMOKE_NAME="taguru-smoke-$suffix"
  echo "image.sh: smoke: starting $IMAGE as $SMOKE_NAME on $base" >&2
  podman run -d --name "$SMOKE_NAME" --read-only "${ULIMITS[@]}" \
    -p "127.0.0.1:$SMOKE_PORT:8248" -v "$SMOKE_VOLUME:/data" "$IMAGE" >/dev/null ||
    die "smoke: podman run failed"
  local started=$SECONDS code=""
  while [ $((SECONDS - started)) -lt 60 ]; do
    code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$base/ready" || true)
    [ "$code" = 200 ] && break
    if [ "$(podman inspect -f '{{.State.Running}}' "$SMOKE_NAME" 2>/dev/null)" != true ]; then
      podman logs "$SMOKE_NAME" >&2 || true
      die "smoke: the container exited before /ready answered"
    fi
    sleep 0.5
  done
  if [ "$code" != 200 ]; then
    podman logs "$SMOKE_NAME" >&2 || true
    die "smoke: GET /ready did not answer 200 within 60 s (last: ${code:-no answer})"
  fi
  echo "image.sh: smoke: GET /ready 200 after $((SECONDS - started)) s" >&2

  local body
  body=$(curl -sS --max-time 30 -f "$base/contexts/demo/evidence" -H 'Content-Type: application/json' \
    -d '{"origins":["青嶺酒造"],"labels":["杜氏"],"budget":{"max_items":6}}') ||
    die "smoke: POST /contexts/demo/evidence failed"
  local items
  # the package's items, and one of them the association the demo corpus states (青嶺酒造 —杜氏→ 高瀬)
  items=$(printf '%s' "$body" | python3 -c 'import json, sys
items = json.load(sys.stdin).get("result", {}).get("items")
ok = isinstance(items, list) and any(
    (item.get("association") or {}).get("object") == "高瀬" for item in items if isinstance(item, dict)
)
print(len(items) if ok else 0)') || die "smoke: the evidence answer is not JSON"
  [ "$items" -gt 0 ] || die "smoke: the evidence package of the demo context lacks its items (青嶺酒造 —杜氏→ 高瀬)"
  echo "image.sh: smoke: POST /contexts/demo/evidence answered a package of $items items" >&2

  podman healthcheck run "$SMOKE_NAME" >/dev/null 2>&1 || die "smoke: 'podman healthcheck run' (taguru health) failed"
  local health
  health=$(podman exec "$SMOKE_NAME" taguru health) || die "smoke: 'taguru health' failed in the container"
  echo "image.sh: smoke: healthcheck passed: $health" >&2

  podman stop -t 30 "$SMOKE_NAME" >/dev/null || die "smoke: podman stop failed"
  local status
  status=$(podman inspect -f '{{.State.ExitCode}}' "$SMOKE_NAME")
  [ "$status" = 0 ] || die "smoke: the server exited with status $status on SIGTERM"
  echo "image.sh: smoke: passed (SIGTERM stopped the server with status 0)" >&2
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
