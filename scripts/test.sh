#!/usr/bin/env bash
# Creates .venv if needed, installs the project with its test extras, runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q -e '.[test]'
exec .venv/bin/python -m pytest "$@"
