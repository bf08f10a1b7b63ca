#!/usr/bin/env bash
# Runs every check: the linters and type checkers first (seconds), then every test: Python (unit, real AOTI
# compiles on CPU, the language server over LSP; GPU tests skip without CUDA), the extension's unit tests,
# and the end-to-end test in a real VS Code. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
lint() { echo "[lint] $*"; "$@" || status=1; }
lint .venv/bin/ruff check minifier server tests bench
lint .venv/bin/ruff format --check --quiet minifier server tests bench
lint .venv/bin/mypy
lint npm run --silent lint
.venv/bin/python -m pytest -q -rs --durations=25 "$@" || status=$?
npm test --silent || status=$?
npm run --silent test:e2e || status=$?
exit $status
