#!/usr/bin/env bash
# The GPU proof in one command, for a CUDA machine with torch + triton but no package registry:
#   bash scripts/gpu-check.sh [tests] [lsp] [bench] [pytorch-default-cxx]     (default: all of them)
# Installs the carried wheels (.whl/, see docs/gpu.md), runs the `gpu`-marked tests, the language-server
# session on real GPU dumps, and the GPU benchmark against PyTorch's own minifier; prints a table last.
# Logs go to $OUT (the device tool's folder) or .artifacts/gpu.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/.artifacts/gpu}
mkdir -p "$OUT"
parts=${*:-tests lsp bench pytorch-default-cxx}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ] && ! $PY -c "import pygls, pytest_lsp" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/aoti-site .whl/*.whl
  export PYTHONPATH="$ROOT:/tmp/aoti-site"
fi
MACHINE_CXX=${CXX:-}
export CXX=/usr/bin/g++ CC=/usr/bin/gcc   # the machine's default compiler breaks AOTI loading (docs/gpu.md)
results=()
record() { results+=("| $1 | $2 | $3 |"); }
t0=$SECONDS
{ nvidia-smi -L; $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } | tee "$OUT/machine.txt"

for part in $parts; do
  start=$SECONDS
  case $part in
    tests)
      $PY -m pytest tests/test_gpu.py -m gpu -v -rA --tb=short -p no:cacheprovider -n 5 --timeout 540 \
        ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} >"$OUT/gpu-tests.log" 2>&1
      status=$?; record "gpu tests" "$([ $status = 0 ] && echo pass || echo FAIL)" "$(tail -1 "$OUT/gpu-tests.log")" ;;
    lsp)
      $PY -m pytest tests/server/test_gpu_session.py -m gpu -v -rA --tb=short -p no:cacheprovider --timeout 540 \
        >"$OUT/gpu-lsp.log" 2>&1
      status=$?; record "LSP session on GPU dumps" "$([ $status = 0 ] && echo pass || echo FAIL)" "$(tail -1 "$OUT/gpu-lsp.log")" ;;
    bench)
      $PY bench/run.py --device cuda --only "${BENCH_ONLY:-seed-compile_error,residual6,residual24,residual96}" \
        --skip-pytorch "${BENCH_SKIP_PYTORCH:-residual24,residual96}" --pytorch-timeout 420 \
        --out "$OUT/bench-gpu.jsonl" >"$OUT/bench-gpu.log" 2>&1
      status=$?; record "benchmark (system g++)" "$([ $status = 0 ] && echo done || echo FAIL)" "see bench-gpu.log" ;;
    pytorch-default-cxx)
      CXX=${MACHINE_CXX:-/opt/gcc/bin/g++} CC=${MACHINE_CC:-/opt/gcc/bin/gcc} $PY bench/run.py --device cuda \
        --only seed-compile_error --pytorch-timeout 300 --out "$OUT/bench-gpu-default-cxx.jsonl" \
        >"$OUT/bench-gpu-default-cxx.log" 2>&1
      status=$?; record "benchmark (machine's default CXX)" "$([ $status = 0 ] && echo done || echo FAIL)" "see bench-gpu-default-cxx.log" ;;
  esac
  echo "[gpu-check] $part: $((SECONDS - start)) s"
done
echo
echo "| part | result | detail |"
echo "| --- | --- | --- |"
printf '%s\n' "${results[@]}"
for f in "$OUT"/bench-gpu*.log; do [ -f "$f" ] && { echo; echo "## $(basename "$f")"; sed -n '/^| workload/,$p' "$f"; }; done
echo "[gpu-check] total $((SECONDS - t0)) s"
