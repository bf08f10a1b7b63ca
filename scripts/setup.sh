#!/usr/bin/env bash
# Installs everything aoti-lens needs on a fresh Debian machine, idempotently:
#   - Debian packages (as root): g++ for AOTInductor's C++ compiles, ccache for the tests' compiles, and the
#     e2e test's chromium & co
#   - .venv: torch (2.13.0 CPU here; keep an existing torch), aoti-lens editable with its test extras,
#     transformers (pinned) for the real-model workloads (minifier/examples/workloads.py) and their test
#   - npm packages, the bundled extension and its .vsix (dist/aoti-lens.vsix), code-server for the e2e test
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "[setup] $*"; }

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if ! command -v g++ >/dev/null; then
  say "apt-get install g++"
  [ "$(id -u)" = 0 ] || { echo "[setup] g++ is missing: install it (sudo apt-get install g++)" >&2; exit 1; }
  apt_install g++
fi
# ccache only for the tests (scripts/test.sh): many of them compile the same candidates; optional.
if ! command -v ccache >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    say "apt-get install ccache (for the tests)"
    apt_install ccache || say "no ccache: the tests run without a compile cache"
  else
    say "no ccache (sudo apt-get install ccache): the tests run without a compile cache"
  fi
fi

if [ ! -x .venv/bin/python ]; then
  say "python3 -m venv .venv"
  python3 -m venv .venv
fi
# The e2e test's set-up (apt, npm, code-server's native builds) runs beside pip's installs: neither needs the
# other, and each keeps about one core busy. Its output is shown once it ends.
mkdir -p .artifacts
bash .ci/e2e-setup.sh >.artifacts/e2e-setup.log 2>&1 &
e2e_setup=$!
trap 'kill $e2e_setup 2>/dev/null || true' EXIT
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  say "pip install torch==${TORCH_VERSION:-2.13.0} (CPU build from this machine's wheel)"
  .venv/bin/pip install -q "torch==${TORCH_VERSION:-2.13.0}" numpy
fi
say "pip install -e .[test]"
.venv/bin/pip install -q -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
# 5.24.0 is the newest that installs here (about 10 s, 190 MB with its dependencies) and works with torch 2.13
# CPU; torchvision stays out: PyPI's wheel does not load with this CPU torch and then breaks transformers.
TRANSFORMERS_VERSION=${TRANSFORMERS_VERSION:-5.24.0}
if [ "$(.venv/bin/python -c 'import transformers; print(transformers.__version__)' 2>/dev/null)" != "$TRANSFORMERS_VERSION" ]; then
  say "pip install transformers==$TRANSFORMERS_VERSION"
  .venv/bin/pip install -q "transformers==$TRANSFORMERS_VERSION"
fi

e2e_status=0
wait $e2e_setup || e2e_status=$?
trap - EXIT
cat .artifacts/e2e-setup.log
[ $e2e_status = 0 ] || { say "the e2e test's set-up failed (exit $e2e_status)"; exit $e2e_status; }
say "npm run package (extension .vsix)"
npm run --silent package
say "done: .venv/bin/aoti-minify, .venv/bin/aoti-lsp, $(ls dist/*.vsix 2>/dev/null | head -1)"
