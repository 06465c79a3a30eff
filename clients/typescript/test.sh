#!/usr/bin/env bash
# Installs the dev dependencies (npm ci from the committed lock), builds with tsc and runs the
# node:test suite, which spawns the project's Python server (../../.venv/bin/python, or
# $TAGURU_TEST_PYTHON) on a free port. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "clients/typescript: node and npm are required (Node >= 20)" >&2
  exit 1
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
  echo "clients/typescript: Node >= 20 is required, found $(node --version)" >&2
  exit 1
fi
if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund
else
  npm install --no-audit --no-fund
fi
npm run build
npm test
