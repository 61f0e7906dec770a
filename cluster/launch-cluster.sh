#!/usr/bin/env bash
# Runs the service across nodes: the coordinator on the first host, one worker per GPU on every
# host (the first one included), under one mpirun (MPMD).
#
#   cluster/launch-cluster.sh --hostfile hosts.txt --gpus-per-node 8 --model DIR [options]
#   cluster/launch-cluster.sh --slurm --model DIR [options]      # inside salloc / sbatch
#
# The hostfile lists one host per line (OpenMPI's "slots=" and comments are ignored: the slot
# counts come from --gpus-per-node). The model directory must exist at the same path on every
# host (a shared file system, or a copy per node), and so must the binaries (see
# cluster/bundle.sh for nodes without the Debian packages).
#
# Slurm: in an allocation with one task per GPU, e.g.
#   #SBATCH --nodes=4 --ntasks-per-node=8 --gpus-per-node=8
#   cluster/launch-cluster.sh --slurm --model /shared/models/llama-3-8b --http 0.0.0.0:8000
# --slurm reads the hosts from SLURM_JOB_NODELIST and the GPUs per node from
# SLURM_GPUS_ON_NODE / SLURM_NTASKS_PER_NODE; OpenMPI's mpirun starts the ranks through Slurm.
# (srun works too when MPI has PMIx support:
#  srun --mpi=pmix --multi-prog conf, with conf lines "0 millipede-coordinator ..." and
#  "1-N millipede-worker ..."; --print-multi-prog writes that file. cluster/slurm/millipede.sbatch
#  is the whole batch job, with either launcher and a drain on scancel.)
set -euo pipefail

usage() {
  cat <<'EOF'
usage: launch-cluster.sh (--hostfile FILE | --slurm) --model DIR [options] [-- extra worker flags]
  --hostfile FILE       hosts, one per line; the coordinator runs on the first
  --slurm               take hosts and GPUs per node from the Slurm allocation
  --gpus-per-node N     workers per host (default 8; with --slurm from the allocation)
  --model DIR           model directory (same path on every host)
  --backend B           cuda | cpu (default cuda)
  --bin DIR             folder with the binaries (same path on every host; default: beside this
                        script in a bundle, else PATH)
  --rpc HOST:PORT       Cap'n Proto API on the first host (default 0.0.0.0:7700)
  --http HOST:PORT      OpenAI-compatible HTTP API (default 0.0.0.0:8000)
  --metrics HOST:PORT   Prometheus /metrics (default 0.0.0.0:9400)
  --api-key KEY         require "Authorization: Bearer KEY" on the HTTP API
  --mpirun-args "..."   extra mpirun arguments (e.g. "--mca btl_tcp_if_include ib0")
  --dry-run             print the mpirun command instead of running it
  --print-multi-prog    print an srun --multi-prog configuration instead
EOF
}

hostfile="" slurm=0 gpn="" model="" backend="cuda" bin="" rpc="0.0.0.0:7700" http="0.0.0.0:8000"
metrics="0.0.0.0:9400" api_key="" mpirun_args="" dry_run=0 multi_prog=0
worker_extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hostfile) hostfile="$2"; shift 2 ;;
    --slurm) slurm=1; shift ;;
    --gpus-per-node) gpn="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --backend) backend="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --rpc) rpc="$2"; shift 2 ;;
    --http) http="$2"; shift 2 ;;
    --metrics) metrics="$2"; shift 2 ;;
    --api-key) api_key="$2"; shift 2 ;;
    --mpirun-args) mpirun_args="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --print-multi-prog) multi_prog=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; worker_extra=("$@"); break ;;
    *) echo "launch-cluster.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

die() { echo "launch-cluster.sh: $*" >&2; exit 2; }
[[ -n "$model" ]] || die "--model is required"
[[ $slurm -eq 1 || -n "$hostfile" ]] || die "give --hostfile FILE or --slurm"
case "$backend" in cuda|cpu) ;; *) die "--backend must be cuda or cpu" ;; esac

hosts=()
if [[ $slurm -eq 1 ]]; then
  [[ -n "${SLURM_JOB_NODELIST:-}" ]] || die "--slurm outside a Slurm allocation (no SLURM_JOB_NODELIST)"
  command -v scontrol >/dev/null || die "--slurm needs scontrol on PATH"
  mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
  if [[ -z "$gpn" ]]; then
    gpn="${SLURM_GPUS_ON_NODE:-${SLURM_NTASKS_PER_NODE:-}}"
    gpn="${gpn%%(*}"  # "8(x4)" -> "8"
  fi
else
  [[ -f "$hostfile" ]] || die "no hostfile at $hostfile"
  while read -r line; do
    line="${line%%#*}"
    read -r host _ <<<"$line" || true
    [[ -n "${host:-}" ]] && hosts+=("$host")
  done <"$hostfile"
fi
[[ ${#hosts[@]} -ge 1 ]] || die "no hosts found"
gpn="${gpn:-8}"
[[ "$gpn" =~ ^[1-9][0-9]*$ ]] || die "--gpus-per-node must be a positive number, got '$gpn'"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "$bin" && -x "$here/bin/millipede-coordinator" ]]; then bin="$here/bin"; fi
coordinator="${bin:+$bin/}millipede-coordinator"
worker="${bin:+$bin/}millipede-worker"

coordinator_args=(--model "$model" --rpc "$rpc" --http "$http" --metrics "$metrics")
[[ -n "$api_key" ]] && coordinator_args+=(--api-key "$api_key")
worker_args=(--model "$model" --backend "$backend" "${worker_extra[@]}")
workers=$(( ${#hosts[@]} * gpn ))

if [[ $multi_prog -eq 1 ]]; then
  printf '0 %q' "$coordinator"; printf ' %q' "${coordinator_args[@]}"; echo
  printf '1-%d %q' "$workers" "$worker"; printf ' %q' "${worker_args[@]}"; echo
  exit 0
fi

# Worker slots: gpn per host. The coordinator shares the first host (it needs no GPU).
worker_hosts=""
for h in "${hosts[@]}"; do worker_hosts+="${worker_hosts:+,}$h:$gpn"; done
# shellcheck disable=SC2206
extra=($mpirun_args)
cmd=(mpirun --enable-recovery --bind-to none --oversubscribe "${extra[@]}"
     -np 1 --host "${hosts[0]}:1" "$coordinator" "${coordinator_args[@]}"
     : -np "$workers" --host "$worker_hosts" --map-by "ppr:$gpn:node" "$worker" "${worker_args[@]}")

if [[ $dry_run -eq 1 ]]; then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
exec "${cmd[@]}"
