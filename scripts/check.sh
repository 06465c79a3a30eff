#!/usr/bin/env bash
# Static checks: ruff (lint), mypy over every installed package (--strict over pipeline and stages),
# cyclomatic complexity ceiling.
# Expects .venv with the `dev` extra (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# mypy needs the packages under their installed names (taguru_server.<pkg>); the folders stay at
# the top level, so a throw-away tree of links gives mypy that view without an install.
tree=.typecheck/taguru_server
rm -rf .typecheck && mkdir -p "$tree"
for pkg in pipeline stages store server evaluate cli client; do
  ln -s "../../$pkg" "$tree/$pkg"
done
(cd .typecheck && ../.venv/bin/mypy --config-file ../pyproject.toml -p taguru_server)
# the stage graph and the stages are held to --strict as well; the modules they import are read for their
# types only (follow-imports=silent), so the stricter rules apply to these two packages alone
(cd .typecheck && ../.venv/bin/mypy --config-file ../pyproject.toml --strict --follow-imports=silent \
  -p taguru_server.pipeline -p taguru_server.stages)
.venv/bin/python scripts/complexity.py 25 pipeline stages store server evaluate cli client
