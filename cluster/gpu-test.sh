#!/usr/bin/env bash
# The GPU suite, run on a machine with a GPU from the repository root, with the `cuda` preset
# already built (build/cuda): every GPU test binary (CTest label gpu) and the end-to-end check
# of the engine on the GPU against the CPU engine and Hugging Face transformers.
#   cluster/gpu-test.sh [OUT_DIR]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MILLIPEDE_CUDA_BUILD:-$root/build/cuda}"
out="${1:-$root/build/gpu-results}"
mkdir -p "$out"
nvidia-smi -L
status=0
for t in "$build"/tests/*cuda_test; do
  [ -x "$t" ] || continue
  echo "== $(basename "$t")"
  "$t" --gtest_brief=1 --gtest_output="json:$out/$(basename "$t").json" || status=1
done
echo "== end to end"
python3 "$root/tests/gpu/gpu_e2e.py" "$build/bin" --out "$out/gpu_e2e.json" || status=1
exit $status
