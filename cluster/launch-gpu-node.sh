#!/usr/bin/env bash
# Runs the service on one node: one coordinator and one worker per GPU, under mpirun (MPMD).
#
#   cluster/launch-gpu-node.sh --model DIR --gpus 8 [options] [-- extra worker flags]
#
# Workers pick their GPU from their node-local rank. Everything binds to 127.0.0.1 unless
# told otherwise (--http 0.0.0.0:8000 serves other hosts). Ctrl-C / SIGTERM stops the service
# (the coordinator lets the running jobs finish first, up to its --drain-timeout-s).
set -euo pipefail

usage() {
  cat <<'EOF'
usage: launch-gpu-node.sh --model DIR [options] [-- extra millipede-worker flags]
  --model DIR          Hugging Face model directory (read by the coordinator and every worker)
  --gpus N             workers, one per GPU (default: the GPUs nvidia-smi lists)
  --backend B          cuda | cpu (default cuda; cpu runs the same layout without GPUs)
  --bin DIR            folder with millipede-coordinator and millipede-worker
                       (default: beside this script in a bundle, else build/cuda/bin, else PATH)
  --rpc HOST:PORT      Cap'n Proto API (default 127.0.0.1:7700)
  --http HOST:PORT     OpenAI-compatible HTTP API (default 127.0.0.1:8000)
  --metrics HOST:PORT  Prometheus /metrics (default 127.0.0.1:9400)
  --api-key KEY        require "Authorization: Bearer KEY" on the HTTP API
  --served-model-name NAME   the model's name for clients
  --chat-format F      llama3 | chatml (default: detected from the tokenizer's special tokens)
  --kv-dtype T         bf16 | fp16 | fp32 | fp8 KV cache (default bf16)
  --mpirun-args "..."  extra mpirun arguments (e.g. "--mca btl_tcp_if_include eth0")
  --dry-run            print the mpirun command instead of running it
EOF
}

model="" gpus="" backend="cuda" bin="" rpc="127.0.0.1:7700" http="127.0.0.1:8000"
metrics="127.0.0.1:9400" api_key="" served_name="" chat_format="" kv_dtype="" mpirun_args="" dry_run=0
worker_extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --gpus) gpus="$2"; shift 2 ;;
    --backend) backend="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --rpc) rpc="$2"; shift 2 ;;
    --http) http="$2"; shift 2 ;;
    --metrics) metrics="$2"; shift 2 ;;
    --api-key) api_key="$2"; shift 2 ;;
    --served-model-name) served_name="$2"; shift 2 ;;
    --chat-format) chat_format="$2"; shift 2 ;;
    --kv-dtype) kv_dtype="$2"; shift 2 ;;
    --mpirun-args) mpirun_args="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; worker_extra=("$@"); break ;;
    *) echo "launch-gpu-node.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

[[ -n "$model" ]] || { echo "launch-gpu-node.sh: --model is required" >&2; exit 2; }
[[ -d "$model" ]] || { echo "launch-gpu-node.sh: no model directory at $model" >&2; exit 2; }
case "$backend" in cuda|cpu) ;; *) echo "launch-gpu-node.sh: --backend must be cuda or cpu" >&2; exit 2 ;; esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "$bin" ]]; then
  for candidate in "$here/bin" "$here/../build/cuda/bin" "$here/../build/cpu/bin"; do
    if [[ -x "$candidate/millipede-coordinator" ]]; then bin="$candidate"; break; fi
  done
fi
if [[ -n "$bin" ]]; then
  coordinator="$bin/millipede-coordinator" worker="$bin/millipede-worker"
else
  coordinator="$(command -v millipede-coordinator || true)" worker="$(command -v millipede-worker || true)"
fi
[[ -x "$coordinator" && -x "$worker" ]] || {
  echo "launch-gpu-node.sh: millipede-coordinator / millipede-worker not found (use --bin DIR)" >&2
  exit 2
}

if [[ -z "$gpus" ]]; then
  if [[ "$backend" == cuda ]] && command -v nvidia-smi >/dev/null; then
    gpus="$(nvidia-smi --list-gpus | wc -l)"
  else
    echo "launch-gpu-node.sh: --gpus N is required (no nvidia-smi to count GPUs)" >&2
    exit 2
  fi
fi
[[ "$gpus" =~ ^[1-9][0-9]*$ ]] || { echo "launch-gpu-node.sh: --gpus must be a positive number" >&2; exit 2; }

coordinator_args=(--model "$model" --rpc "$rpc" --http "$http" --metrics "$metrics")
[[ -n "$api_key" ]] && coordinator_args+=(--api-key "$api_key")
[[ -n "$served_name" ]] && coordinator_args+=(--served-model-name "$served_name")
[[ -n "$chat_format" ]] && coordinator_args+=(--chat-format "$chat_format")
worker_args=(--model "$model" --backend "$backend")
[[ -n "$kv_dtype" ]] && worker_args+=(--kv-dtype "$kv_dtype")
worker_args+=("${worker_extra[@]}")

# One slot per process on this node; --bind-to none lets each worker's threads use its cores.
# shellcheck disable=SC2206
extra=($mpirun_args)
cmd=(mpirun --enable-recovery --bind-to none --oversubscribe "${extra[@]}"
     -np 1 "$coordinator" "${coordinator_args[@]}"
     : -np "$gpus" "$worker" "${worker_args[@]}")

if [[ $dry_run -eq 1 ]]; then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
exec "${cmd[@]}"
