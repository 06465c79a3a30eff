#!/usr/bin/env bash
# Creates .venv if needed, installs the project with its test and dev extras, runs the static
# checks (ruff, mypy, complexity ceiling), the test suite on SQLite and again on PostgreSQL, each
# followed by the official SDK's own integration suite (scripts/sdk_suite.sh, a few seconds),
# then (only if all passed) the TypeScript client's build and tests.
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
TAGURU_TEST_BACKEND=sqlite bash scripts/sdk_suite.sh
# The same suite against PostgreSQL (a throwaway cluster the tests start; Debian's postgresql),
# except the tests of the SQLite file itself. TAGURU_TEST_BACKEND=sqlite skips this pass.
if [ "${TAGURU_TEST_BACKEND:-both}" != "sqlite" ]; then
  # (it leaves out the backend-free modules, whose snapshots the SQLite pass checked: not "unused")
  TAGURU_TEST_BACKEND=postgres .venv/bin/python -m pytest --snapshot-warn-unused "$@" || status=$?
  if [ "$status" -ne 0 ]; then
    exit "$status"
  fi
  TAGURU_TEST_BACKEND=postgres bash scripts/sdk_suite.sh
fi
# The TypeScript client (clients/typescript): npm ci, tsc build, node --test against a spawned server.
bash clients/typescript/test.sh
