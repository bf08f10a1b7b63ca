#!/usr/bin/env bash
# Runs every test: Python (unit, real AOTI compiles on CPU, the language server over LSP; GPU tests
# skip without CUDA), the extension's unit tests, and the end-to-end test in a real VS Code.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
.venv/bin/python -m pytest -q -rs --durations=15 "$@" || status=$?
npm test --silent || status=$?
npm run --silent test:e2e || status=$?
exit $status
