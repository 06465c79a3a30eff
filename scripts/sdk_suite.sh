#!/usr/bin/env bash
# The official SDK's own integration suite (tests/integration of the `taguru` source distribution,
# the version pinned in pyproject.toml), unmodified, against this server. The SDK's harness
# (`taguru.testing.SpawnedServer`) starts the binary named by TAGURU_TEST_BIN; here that is a
# one-line launcher of `python -m taguru_server.cli serve` from this checkout's .venv.
#
# The sdist and a small venv for the suite (pytest, pytest-asyncio, the SDK) are cached under
# .cache/sdk-suite/ (ignored by git); the suite runs from a temporary unpacked copy.
# With TAGURU_TEST_BACKEND=postgres every spawned server gets its own schema in a throwaway
# PostgreSQL cluster (tests/pg_support.py). Extra arguments go to pytest.
# Exits non-zero on any failure other than the deselected tests below.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
python="$root/.venv/bin/python"
if [ ! -x "$python" ]; then
  echo "scripts/sdk_suite.sh: no .venv here; scripts/test.sh creates it" >&2
  exit 1
fi
version="$(sed -n 's/.*"taguru==\([^"]*\)".*/\1/p' pyproject.toml)"
cache="$root/.cache/sdk-suite"
mkdir -p "$cache"

sdist="$cache/taguru-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  "$python" -m pip download -q "taguru==$version" --no-binary :all: --no-deps -d "$cache"
fi
# The suite's own venv (its pytest-asyncio stays out of the project's .venv); rebuilt when the
# requirements below change.
venv="$cache/venv-$version"
requirements=("taguru==$version" "pytest>=8,<10" "pytest-asyncio>=0.24,<2")
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "${requirements[*]}" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "${requirements[@]}"
  echo "${requirements[*]}" >"$venv/.installed"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -xzf "$sdist" -C "$work"
suite="$work/taguru-$version"

# SpawnedServer drops every TAGURU_* variable, so the PostgreSQL URL reaches the launcher as
# SDK_SUITE_PG_URL; each launch gets a fresh schema (no test restarts a server on its data).
launcher="$work/taguru-serve"
cat >"$launcher" <<EOF
#!/bin/sh
cd "$root"
if [ -n "\${SDK_SUITE_PG_URL:-}" ]; then
  schema="sdk_\$\$_\$(date +%s%N)"
  psql -q "\$SDK_SUITE_PG_URL" -c "CREATE SCHEMA \$schema" >/dev/null
  TAGURU_DATABASE_URL="\$SDK_SUITE_PG_URL?options=-csearch_path%3D\$schema"
  export TAGURU_DATABASE_URL
fi
exec "$python" -m taguru_server.cli serve "\$@"
EOF
chmod +x "$launcher"

# Tests that fail by an intended, documented difference (docs/compatibility.md): none.
deselect=()

cmd=("$venv/bin/python" -m pytest tests/integration -q -p no:cacheprovider \
  -o asyncio_default_fixture_loop_scope=function "${deselect[@]}" "$@")
cd "$suite"
if [ "${TAGURU_TEST_BACKEND:-sqlite}" = "postgres" ]; then
  # One throwaway cluster for the run, stopped however pytest ends.
  TAGURU_TEST_BIN="$launcher" "$python" -c '
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
from pg_support import Cluster
cluster = Cluster()
try:
    code = subprocess.call(sys.argv[2:], env=dict(os.environ, SDK_SUITE_PG_URL=cluster.url))
finally:
    cluster.stop()
sys.exit(code)
' "$root/tests" "${cmd[@]}"
else
  TAGURU_TEST_BIN="$launcher" "${cmd[@]}"
fi
