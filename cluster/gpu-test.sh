#!/usr/bin/env bash
# The GPU suite, run on a machine with a GPU from the repository root, with the `cuda` preset
# already built (build/cuda): every GPU test binary (CTest label gpu), the end-to-end check
# of the engine on the GPU against the CPU engine and Hugging Face transformers and, with two
# GPUs or more, two ranks over NCCL against one CPU process (dense and OmniKV).
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
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  for mode in dense omnikv; do
    echo "== two ranks over NCCL against one CPU process ($mode)"
    bash "$root/tests/gpu/nccl_vs_cpu.sh" "$build/bin" 2 "$mode" | tee "$out/nccl_vs_cpu_$mode.jsonl" ||
      status=1
  done
fi
exit $status
