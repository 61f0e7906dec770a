#!/usr/bin/env bash
# The quick start: installs what is missing, builds the `cpu` preset, generates a small demo
# model with random weights, starts the service on this machine's CPU (1 coordinator + 2 workers
# under mpirun), submits one prompt with the `millipede` client (streamed answer, TTFT, tokens/s),
# shows the metrics URL and shuts the service down cleanly.
#   cluster/quickstart.sh ["prompt text"]
# Ports (loopback only): RPC 7700, metrics 9400, HTTP 8000; override with MILLIPEDE_RPC,
# MILLIPEDE_METRICS, MILLIPEDE_HTTP (HOST:PORT).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"
prompt="${1:-The quick brown fox}"
rpc="${MILLIPEDE_RPC:-127.0.0.1:7700}"
metrics="${MILLIPEDE_METRICS:-127.0.0.1:9400}"
http="${MILLIPEDE_HTTP:-127.0.0.1:8000}"

"$here/install-deps.sh"
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "${MILLIPEDE_BUILD_JOBS:-$(nproc)}" \
  --target millipede-run millipede-mkmodel millipede-tokenize \
           millipede-coordinator millipede-worker millipede

bin="$root/build/cpu/bin"
model="$root/build/demo-model"
if [ ! -f "$model/config.json" ]; then
  "$bin/millipede-mkmodel" --preset tiny --out "$model" --seed 1
fi

# OpenMPI refuses root and more ranks than cores unless told.
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1

log="$root/build/quickstart-service.log"
http_flag=()
if grep -q -- "--http HOST:PORT" <("$bin/millipede-coordinator" --help 2>/dev/null || true); then
  http_flag=(--http "$http")
fi
echo "quickstart: starting the service: 1 coordinator + 2 CPU workers (log: $log)"
# --enable-recovery: when a worker dies, mpirun leaves the coordinator running long enough to
# report the failure to its clients (it then ends the job itself).
mpirun --enable-recovery \
  -np 1 "$bin/millipede-coordinator" --model "$model" --rpc "$rpc" --metrics "$metrics" \
        "${http_flag[@]}" \
  : -np 2 "$bin/millipede-worker" --model "$model" >"$log" 2>&1 &
mpirun_pid=$!

coordinator_pid=""
stop_service() {
  if [ -n "$coordinator_pid" ] && kill -0 "$coordinator_pid" 2>/dev/null; then
    kill -TERM "$coordinator_pid"   # drains: running jobs finish, workers are told to stop
  fi
  for _ in $(seq 1 100); do
    kill -0 "$mpirun_pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$mpirun_pid" 2>/dev/null; then kill -TERM "$mpirun_pid"; fi
  service_rc=0
  wait "$mpirun_pid" 2>/dev/null || service_rc=$?
}
trap stop_service EXIT

for _ in $(seq 1 300); do
  coordinator_pid="$(sed -n 's/.*ready: .* pid \([0-9]*\)$/\1/p' "$log" | head -n 1)"
  [ -n "$coordinator_pid" ] && break
  kill -0 "$mpirun_pid" 2>/dev/null || { cat "$log" >&2; echo "quickstart: the service did not start" >&2; exit 1; }
  sleep 0.2
done
[ -n "$coordinator_pid" ] || { cat "$log" >&2; echo "quickstart: the service did not become ready" >&2; exit 1; }
sleep 0.2
cat "$log"
"$bin/millipede" health --server "$rpc"
"$bin/millipede" models --server "$rpc"

echo "quickstart: prompt: $prompt"
echo "quickstart: 32 tokens from the demo model (random weights: the text is noise)"
"$bin/millipede" submit --server "$rpc" --prompt "$prompt" --max-tokens 32 \
  --temperature 0.8 --top-p 0.95 --seed 1 --ignore-eos
"$bin/millipede" submit --server "$rpc" --prompt "$prompt" --max-tokens 8 --json

metrics_url="$(sed -n 's/.*metrics \(http:[^ ,]*\).*/\1/p' "$log" | head -n 1)"
echo "quickstart: metrics: $metrics_url"
if command -v curl >/dev/null; then
  curl -s "$metrics_url" | grep -E '^millipede_(time_to_first_token_seconds_(sum|count)|generation_tokens_total|request_finished_total)' || true
fi

echo "quickstart: shutting the service down (SIGTERM to the coordinator)"
stop_service
trap - EXIT
tail -n 1 "$log"
if [ "$service_rc" != 0 ] || ! grep -q "drained, workers stopped" "$log"; then
  echo "quickstart: the service did not shut down cleanly (status $service_rc)" >&2
  exit 1
fi
echo "quickstart: done"
