#!/usr/bin/env bash
# The GPU proof in one command, for a CUDA machine with torch + triton but no package registry:
#   bash scripts/gpu-check.sh [--parallel] [tests] [lsp] [bench] [pytorch-default-cxx] [workloads] [bench-real] [bench-big]
#   (default: all but workloads, bench-real and bench-big, in turn). bench-big: Llama-2's shapes in bf16 (issue 44)
#   with the default options beside PyTorch's minifier capped, memory and disk measured; the 16-layer one by
#   default (about 5 minutes), BENCH_ONLY=cuda-hf-llama2_7b32 (or _13b40) for one per command. bench-real: the real-model GPU benchmark with
#   issue 13's comparisons (--no-slice, --slices-first, a warm rerun) and targets; about 2 minutes a
#   workload with PyTorch capped, so pick workloads per 10-minute command with BENCH_ONLY, e.g.
#   BENCH_ONLY=cuda-tv-resnet18,cuda-tv-mobilenet bash scripts/gpu-check.sh bench-real
#   BENCH_ONLY=cuda-hf-bert3,cuda-hf-bert20,cuda-hf-llama BENCH_SKIP_PYTORCH=cuda- bash scripts/gpu-check.sh bench-real
#   BENCH_ARGS=--no-compare adds bench/run.py options (here: skip the --no-slice and --slices-first runs).
#   A workload too long for one command is measured in several, each measure saved as it ends, e.g.
#   BENCH_ONLY=cuda-hf-gpt2 BENCH_ARGS="--modes pytorch,ours" ...; then BENCH_ARGS="--modes no-slice,slices-first";
#   bench/run.py --report merges their jsonl files. Two modes compared on one host: BENCH_ARGS="--modes ours,no-slice
#   --no-warm --repeat 2" (each run twice, in both orders; the first run of a command is slower, docs/gpu.md).
# Installs the carried wheels (.whl/, see docs/gpu.md), runs the `gpu`-marked tests, the language-server
# session on real GPU dumps, and the GPU benchmark against PyTorch's own minifier; prints a table last.
# The GPU tests take about ten minutes (2026-12-01, H200): where a command gets ten, run them in two,
#   GPU_TESTS_K="not bigger_graph" bash scripts/gpu-check.sh tests; GPU_TESTS_K=bigger_graph bash scripts/gpu-check.sh tests
# --parallel runs the named parts side by side, for machines that lend a command only minutes; leave the
# benchmark out of such a run, since its timings are the point.
# Logs go to $OUT (the device tool's folder) or .artifacts/gpu.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/.artifacts/gpu}
mkdir -p "$OUT"
parallel=0
[ "${1:-}" = --parallel ] && { parallel=1; shift; }
parts=${*:-tests lsp bench pytorch-default-cxx}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ] && ! $PY -c "import pygls, pytest_lsp" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/aoti-site .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:/tmp/aoti-site"
fi
MACHINE_CXX=${CXX:-}
export CXX=/usr/bin/g++ CC=/usr/bin/gcc   # the machine's default compiler breaks AOTI loading (docs/gpu.md)
t0=$SECONDS
{ nvidia-smi -L; $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } | tee "$OUT/machine.txt"

# One row of the final table per part, in a file, so that parts run side by side can each write theirs
# (outside $OUT: the device tool brings back only a few files).
ROWS=$(mktemp -d)
record() { echo "| $1 | $2 | $3 | $4 s |" >"$ROWS/$1"; }
verdict() { [ "$1" = 0 ] && echo "${2:-pass}" || echo FAIL; }

run_part() {
  local part=$1 start=$SECONDS status
  case $part in
    tests)
      $PY -m pytest tests/test_gpu.py -m gpu -v -rA --tb=short -p no:cacheprovider -n 5 --timeout 540 \
        ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} >"$OUT/gpu-tests.log" 2>&1
      status=$?; record tests "$(verdict $status)" "$(tail -1 "$OUT/gpu-tests.log")" $((SECONDS - start)) ;;
    lsp)
      $PY -m pytest tests/server/test_gpu_session.py -m gpu -v -rA --tb=short -p no:cacheprovider --timeout 540 \
        >"$OUT/gpu-lsp.log" 2>&1
      status=$?; record lsp "$(verdict $status)" "$(tail -1 "$OUT/gpu-lsp.log")" $((SECONDS - start)) ;;
    bench)
      $PY bench/run.py --device cuda --set "${BENCH_SET:-toy}" \
        --only "${BENCH_ONLY:-seed-compile_error,residual6,residual24,residual96}" \
        --skip-pytorch "${BENCH_SKIP_PYTORCH:-residual24,residual96}" --pytorch-timeout "${BENCH_PYTORCH_TIMEOUT:-420}" \
        --out "$OUT/bench-gpu.jsonl" >"$OUT/bench-gpu.log" 2>&1
      status=$?; record bench "$(verdict $status done)" "system g++; table below" $((SECONDS - start)) ;;
    pytorch-default-cxx)
      CXX=${MACHINE_CXX:-/opt/gcc/bin/g++} CC=${MACHINE_CC:-/opt/gcc/bin/gcc} $PY bench/run.py --device cuda \
        --only seed-compile_error --pytorch-timeout 300 --out "$OUT/bench-gpu-default-cxx.jsonl" \
        >"$OUT/bench-gpu-default-cxx.log" 2>&1
      status=$?; record pytorch-default-cxx "$(verdict $status done)" "machine's default CXX; table below" \
        $((SECONDS - start)) ;;
    bench-real)
      $PY bench/run.py --device cuda --set real --only "${BENCH_ONLY:-cuda-tv-resnet18,cuda-hf-bert3}" \
        --skip-pytorch "${BENCH_SKIP_PYTORCH:-cuda-hf-bert20}" --pytorch-timeout "${BENCH_PYTORCH_TIMEOUT:-150}" \
        --out "$OUT/bench-gpu-real.jsonl" --logs "$OUT/bench-gpu-real-logs.tgz" ${BENCH_ARGS:-} \
        >"$OUT/bench-gpu-real.log" 2>&1
      status=$?; record bench-real "$(verdict $status done)" "system g++; table and targets below" \
        $((SECONDS - start)) ;;
    bench-big)
      $PY bench/run.py --device cuda --set big --only "${BENCH_ONLY:-cuda-hf-llama2_7b16}" --modes pytorch,ours \
        --no-warm --pytorch-timeout "${BENCH_PYTORCH_TIMEOUT:-120}" --out "$OUT/bench-gpu-big.jsonl" \
        --logs "$OUT/bench-gpu-big-logs.tgz" ${BENCH_ARGS:-} >"$OUT/bench-gpu-big.log" 2>&1
      status=$?; record bench-big "$(verdict $status done)" "system g++; tables below" $((SECONDS - start)) ;;
    workloads)  # the real-model GPU workloads: PyTorch dumps each, `aoti-minify run` reproduces it
      $PY bench/verify_workloads.py --device cuda --only "${WORKLOADS_ONLY:-cuda-}" --out "$OUT/workloads-gpu.jsonl" \
        >"$OUT/workloads-gpu.log" 2>&1
      status=$?; record workloads "$(verdict $status done)" "table below" $((SECONDS - start)) ;;
    *) echo "unknown part: $part" >&2; return 2 ;;
  esac
}

for part in $parts; do
  if [ $parallel = 1 ]; then run_part "$part" & else run_part "$part"; fi
done
wait
echo
echo "| part | result | detail | time |"
echo "| --- | --- | --- | --- |"
for part in $parts; do cat "$ROWS/$part" 2>/dev/null || echo "| $part | FAIL | did not finish | |"; done
for f in "$OUT"/bench-gpu*.log "$OUT"/workloads-gpu.log; do [ -f "$f" ] && { echo; echo "## $(basename "$f")"; sed -n '/^| workload/,$p' "$f"; }; done
echo "[gpu-check] total $((SECONDS - t0)) s"
