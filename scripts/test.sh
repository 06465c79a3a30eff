#!/usr/bin/env bash
# Creates .venv if needed, installs the project with its test and dev extras, runs the static
# checks (ruff, mypy, complexity ceiling), the test suite, then (only if both passed) the
# TypeScript client's build and tests.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q -e '.[test,dev]'
bash scripts/check.sh
status=0
.venv/bin/python -m pytest "$@" || status=$?
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
# The TypeScript client (clients/typescript): npm ci, tsc build, node --test against a spawned server.
bash clients/typescript/test.sh
