#!/usr/bin/env bash
# The GPU benchmarks behind docs/performance.md, run from the repository root on a GPU machine
# with the `cuda` preset built. Each stage prints JSON lines (and the attention stage a table).
#   cluster/gpu-bench.sh STAGE...
# stages:
#   attention   one layer's attention vs PyTorch SDPA flash / cuDNN, 32K..1M (tests/bench/attention_peers.py)
#   e2e1        llama3-8b shape on one GPU: 32K and 128K (all layers, with the GEMM-only reference),
#               512K (4 layers), and transformers at 32K as the peer
#   cpN         the same model on N GPUs (mpirun -np N, NCCL): 128K (all layers), 512K and 1M
#               (4 layers), then 128K again with per-phase profiling (compute vs communication)
#   cpN:SEQS:L  N GPUs, prompt lengths SEQS (comma-separated), L layers
#   decN:SEQS   N GPUs, decode only (all layers) over synthetic caches of lengths SEQS
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${MILLIPEDE_CUDA_BIN:-$root/build/cuda/bin}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
e2e() {  # ranks, then benchmark flags
  local n="$1"; shift
  echo "## mpirun -np $n millipede-bench-e2e $*" >&2
  if [ "$n" = 1 ]; then
    "$bin/millipede-bench-e2e" "$@"
  else
    mpirun -np "$n" --bind-to none "$bin/millipede-bench-e2e" "$@"
  fi
}
status=0
for stage in "$@"; do
  case "$stage" in
    attention)
      python3 "$root/tests/bench/attention_peers.py" "$bin" || status=1 ;;
    e2e1)
      e2e 1 --seq 32768,131072 --gemm-reference || status=1
      e2e 1 --seq 524288 --layers 4 || status=1
      python3 "$root/tests/bench/hf_e2e_peer.py" --seq 32768 || status=1 ;;
    dec*:*)
      IFS=: read -r n seqs <<< "${stage#dec}"
      e2e "$n" --seq "$seqs" --decode-only || status=1 ;;
    cp*:*:*)
      IFS=: read -r n seqs layers <<< "${stage#cp}"
      e2e "$n" --seq "$seqs" --layers "$layers" || status=1 ;;
    cp[0-9]*)
      n="${stage#cp}"
      e2e "$n" --seq 131072 || status=1
      e2e "$n" --seq 524288,1048576 --layers 4 || status=1
      e2e "$n" --seq 131072 --profile --decode-tokens 8 || status=1 ;;
    *) echo "gpu-bench.sh: unknown stage $stage" >&2; exit 2 ;;
  esac
done
exit $status
