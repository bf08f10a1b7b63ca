#!/usr/bin/env bash
# Runs every check: the linters and type checkers first (seconds), then every test: Python (unit, real AOTI
# compiles on CPU, the language server over LSP; GPU tests skip without CUDA) on pytest-xdist workers, the
# extension's unit tests, and, beside them (it waits on a browser and a real VS Code much of its time), the
# end-to-end test in code-server. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
lint() { echo "[lint] $*"; "$@" || status=1; }
lint .venv/bin/ruff check minifier server tests bench
lint .venv/bin/ruff format --check --quiet minifier server tests bench
lint .venv/bin/mypy
lint npm run --silent lint

mkdir -p .artifacts
# The tests compile many identical candidates (each dump is minified by several tests); ccache serves the
# repeats with g++'s own output. Failed compiles are never cached, so every compile error is g++'s, fresh.
if command -v ccache >/dev/null; then
  mkdir -p .artifacts/ccache/bin
  for cc in g++ gcc c++ cc; do ln -sf "$(command -v ccache)" ".artifacts/ccache/bin/$cc"; done
  export PATH="$PWD/.artifacts/ccache/bin:$PATH" CCACHE_DIR="$PWD/.artifacts/ccache/cache" CCACHE_MAXSIZE=4G
  # Inductor rewrites its precompiled header and include files at each start: judge them by content.
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
fi
e2e_log=.artifacts/e2e.log
npm run --silent test:e2e >"$e2e_log" 2>&1 &
e2e=$!
trap 'kill $e2e 2>/dev/null || true' EXIT
.venv/bin/python -m pytest -q -rs --durations=25 -n auto --maxprocesses=4 "$@" || status=$?
npm test --silent || status=$?
if command -v ccache >/dev/null; then ccache --show-stats | sed -n '/Hits:/,/Misses:/p' | sed 's/^/[ccache] /'; fi
e2e_status=0
wait $e2e || e2e_status=$?
trap - EXIT
echo "[e2e] the end-to-end test in code-server (its log: $e2e_log)"
cat "$e2e_log"
[ $e2e_status = 0 ] || status=$e2e_status
exit $status
