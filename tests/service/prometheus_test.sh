#!/usr/bin/env bash
# End to end with real tools: packs the build with cluster/bundle.sh, starts the service from
# the bundle with cluster/launch-gpu-node.sh (1 coordinator + 2 CPU workers under mpirun, a tiny
# random model), talks to the OpenAI HTTP API with curl (JSON and SSE streaming, errors, a
# client that hangs up), has a real Prometheus server scrape the coordinator, and checks
# through Prometheus' query API that every PromQL expression of the Grafana dashboard returns
# data.
#
#   prometheus_test.sh --bin BUILD/bin --source REPO --work DIR
#
# Exits 77 (skipped) when a needed program is missing: the service binaries, prometheus, curl,
# mpirun, python3.
set -euo pipefail

bin="" source="" work=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --source) source="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    *) echo "prometheus_test: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$bin" && -n "$source" && -n "$work" ]] || { echo "usage: $0 --bin DIR --source DIR --work DIR" >&2; exit 2; }

skip() { echo "prometheus_test: SKIPPED: $*"; exit 77; }
for program in millipede-coordinator millipede-worker millipede-mkmodel; do
  [[ -x "$bin/$program" ]] || skip "$bin/$program is not built"
done
for tool in prometheus curl mpirun python3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
"$bin/millipede-coordinator" --help 2>&1 | grep -q -- "--http" ||
  skip "this millipede-coordinator has no HTTP front end"

fail() { echo "prometheus_test: FAILED: $*" >&2; exit 1; }
log() { echo "prometheus_test: $*"; }

rm -rf "$work"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
service_pid="" prometheus_pid=""
cleanup() {
  local rc=$?
  if [[ -n "$prometheus_pid" ]]; then kill "$prometheus_pid" 2>/dev/null || true; fi
  if [[ -n "$service_pid" ]]; then
    kill -TERM "$service_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$service_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$service_pid" 2>/dev/null || true
  fi
  wait 2>/dev/null || true
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    echo "--- service log (tail)" >&2; tail -n 40 "$work/service.log" 2>/dev/null >&2 || true
    echo "--- prometheus log (tail)" >&2; tail -n 20 "$work/prometheus.log" 2>/dev/null >&2 || true
  fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
json_get() { python3 -c 'import json,sys; v=json.load(sys.stdin)
for k in sys.argv[1].split("."): v = v[int(k)] if k.isdigit() else v[k]
print(v if not isinstance(v,(dict,list)) else json.dumps(v))' "$1"; }

# --- the bundle and the model
"$source/cluster/bundle.sh" --build "$bin/.." --out "$work/bundle.tar.gz" >"$work/bundle.log" 2>&1 ||
  { cat "$work/bundle.log" >&2; fail "bundle.sh failed"; }
tar -C "$work" -xzf "$work/bundle.tar.gz"
bundle="$work/millipede-bundle"
[[ -x "$bundle/bin/millipede-coordinator" && -x "$bundle/launch-gpu-node.sh" ]] || fail "bundle is incomplete"
"$bundle/bin/millipede-mkmodel" --preset tiny --out "$work/model" --seed 1 >/dev/null ||
  fail "millipede-mkmodel from the bundle failed"

# --- the service, from the bundle
rpc_port="$(free_port)" http_port="$(free_port)" metrics_port="$(free_port)" prom_port="$(free_port)"
key="test-key-123"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
setsid "$bundle/launch-gpu-node.sh" --backend cpu --gpus 2 --model "$work/model" \
  --rpc "127.0.0.1:$rpc_port" --http "127.0.0.1:$http_port" --metrics "127.0.0.1:$metrics_port" \
  --api-key "$key" --chat-format llama3 >"$work/service.log" 2>&1 &
service_pid=$!
api="http://127.0.0.1:$http_port"
for _ in $(seq 300); do
  curl -sf "$api/health" >/dev/null 2>&1 && break
  kill -0 "$service_pid" 2>/dev/null || fail "the service exited during startup"
  sleep 0.2
done
curl -sf "$api/health" >/dev/null || fail "the service did not answer /health within 60 s"
log "service up (http $http_port, metrics $metrics_port)"

# --- Prometheus, scraping the coordinator every second
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: millipede
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
prometheus_pid=$!
prom="http://127.0.0.1:$prom_port"
for _ in $(seq 150); do
  curl -sf "$prom/-/ready" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -sf "$prom/-/ready" >/dev/null || fail "prometheus did not become ready"
# Rates need a sample from before the jobs: wait until Prometheus has scraped the coordinator.
scraped=0
for _ in $(seq 150); do
  if curl -sf "$prom/api/v1/query?query=millipede_requests_running" | grep -q '"value"'; then
    scraped=1
    break
  fi
  sleep 0.2
done
[[ "$scraped" == 1 ]] || fail "prometheus did not scrape the coordinator"

auth=(-H "Authorization: Bearer $key")
# --- the HTTP API
code="$(curl -s -o "$work/r.json" -w '%{http_code}' "$api/v1/models")"
[[ "$code" == 401 ]] || fail "/v1/models without the key: HTTP $code, expected 401"
[[ "$(json_get error.type <"$work/r.json")" == authentication_error ]] || fail "401 body: $(cat "$work/r.json")"
curl -sf "${auth[@]}" "$api/v1/models" >"$work/models.json" || fail "/v1/models with the key"
model_id="$(json_get data.0.id <"$work/models.json")"
context="$(json_get data.0.max_model_len <"$work/models.json")"
[[ "$model_id" == model ]] || fail "model id $model_id, expected the directory name"

curl -sf "${auth[@]}" -H 'Content-Type: application/json' "$api/v1/completions" \
  -d '{"model": "model", "prompt": "Hello world", "max_tokens": 8, "ignore_eos": true, "seed": 3, "temperature": 0.8}' \
  >"$work/completion.json" || fail "POST /v1/completions"
[[ "$(json_get choices.0.finish_reason <"$work/completion.json")" == length ]] || fail "finish reason: $(cat "$work/completion.json")"
[[ "$(json_get usage.completion_tokens <"$work/completion.json")" == 8 ]] || fail "usage: $(cat "$work/completion.json")"
log "completion: $(json_get choices.0.text <"$work/completion.json" | head -c 60)"

curl -sfN "${auth[@]}" -H 'Content-Type: application/json' "$api/v1/completions" \
  -d '{"prompt": "Streaming test", "max_tokens": 6, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}' \
  >"$work/stream.txt" || fail "streaming POST /v1/completions"
python3 - "$work/stream.txt" <<'EOF' || fail "SSE stream: $(head -c 600 "$work/stream.txt")"
import json, sys
body = open(sys.argv[1]).read()
assert body.endswith("data: [DONE]\n\n"), "no [DONE] at the end"
events = [e for e in body.split("\n\n") if e and not e.startswith(":")]
assert all(e.startswith("data: ") for e in events), "an event is not a data line"
chunks = [json.loads(e[6:]) for e in events[:-1]]
finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
assert finish[-1] == "length" and all(f is None for f in finish[:-1]), finish
assert chunks[-1]["usage"]["completion_tokens"] == 6, chunks[-1]
EOF
log "SSE stream ok ($(grep -c '^data: ' "$work/stream.txt") events)"

# Chat, streamed: the Llama-3 template (configured with --chat-format; this tokenizer has no
# special tokens, so the template's markers are plain text to it).
curl -sfN "${auth[@]}" -H 'Content-Type: application/json' "$api/v1/chat/completions" \
  -d '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 5, "ignore_eos": true, "stream": true}' \
  >"$work/chat.txt" || fail "streaming POST /v1/chat/completions"
python3 - "$work/chat.txt" <<'EOF' || fail "chat SSE stream: $(head -c 600 "$work/chat.txt")"
import json, sys
body = open(sys.argv[1]).read()
assert body.endswith("data: [DONE]\n\n"), "no [DONE] at the end"
chunks = [json.loads(e[6:]) for e in body.split("\n\n") if e.startswith("data: {")]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant", chunks[0]
assert chunks[-1]["choices"][0]["finish_reason"] == "length", chunks[-1]
EOF
curl -sf "${auth[@]}" -H 'Content-Type: application/json' "$api/v1/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "ignore_eos": true}' \
  >"$work/chat.json" || fail "POST /v1/chat/completions"
[[ "$(json_get choices.0.message.role <"$work/chat.json")" == assistant &&
   "$(json_get usage.completion_tokens <"$work/chat.json")" == 3 ]] || fail "chat: $(cat "$work/chat.json")"
log "chat ok (JSON and SSE)"

code="$(curl -s -o "$work/r.json" -w '%{http_code}' "${auth[@]}" -H 'Content-Type: application/json' \
  "$api/v1/completions" -d '{"prompt": "x", "temperature": 9}')"
[[ "$code" == 400 && "$(json_get error.param <"$work/r.json")" == temperature ]] || fail "temperature 9: HTTP $code"
python3 -c "import json; print(json.dumps({'prompt': [1] * ($context + 1), 'max_tokens': 1}))" >"$work/long.json"
code="$(curl -s -o "$work/r.json" -w '%{http_code}' "${auth[@]}" -H 'Content-Type: application/json' \
  "$api/v1/completions" --data-binary @"$work/long.json")"
message="$(json_get error.message <"$work/r.json")"
[[ "$code" == 400 && "$message" == *"$context"* && "$message" == *"$((context + 1))"* ]] ||
  fail "over-long prompt: HTTP $code $message"
log "errors ok ($message)"

# A client that hangs up mid-stream: its job is cancelled.
curl -sN --max-time 1 "${auth[@]}" -H 'Content-Type: application/json' "$api/v1/completions" \
  -d '{"prompt": "long", "max_tokens": 30000, "ignore_eos": true, "stream": true}' >/dev/null 2>&1 || true
cancelled=0
for _ in $(seq 100); do
  cancelled="$(curl -sf "http://127.0.0.1:$metrics_port/metrics" |
    awk '/^millipede_request_finished_total\{reason="cancelled"\}/ {print $2}')"
  [[ "${cancelled:-0}" != 0 ]] && break
  sleep 0.2
done
[[ "${cancelled:-0}" != 0 ]] || fail "the hung-up stream's job was not cancelled"
log "hang-up cancelled the job"

curl -sf "$api/ready" >/dev/null || fail "/ready after jobs"

# --- every dashboard expression returns data through Prometheus
python3 - "$source/cluster/grafana/dashboards/millipede.json" "$prom" "$api" "$key" <<'EOF' || fail "dashboard queries"
import json, math, sys, time, urllib.parse, urllib.request
dashboard = json.load(open(sys.argv[1]))
exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
assert len(exprs) >= 20, f"only {len(exprs)} expressions in the dashboard"

def query(expr):
    expr = expr.replace("$__rate_interval", "1m")
    url = sys.argv[2] + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    reply = json.load(urllib.request.urlopen(url, timeout=10))
    assert reply["status"] == "success", reply
    return [float(r["value"][1]) for r in reply["data"]["result"]]

def small_job():
    """One more job, so that every counter and histogram moves inside the rate window (on a
    loaded machine the earlier jobs may have fallen out of it)."""
    body = json.dumps({"prompt": "again", "max_tokens": 2, "ignore_eos": True}).encode()
    req = urllib.request.Request(sys.argv[3] + "/v1/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": "Bearer " + sys.argv[4]})
    urllib.request.urlopen(req, timeout=30).read()

deadline = time.time() + 60
while True:
    missing = []
    for expr in exprs:
        values = query(expr)
        if not values or all(math.isnan(v) for v in values):
            missing.append(expr)
    if not missing or time.time() > deadline:
        break
    small_job()
    time.sleep(2)
for expr in missing:
    print("no data:", expr)
assert not missing, f"{len(missing)} of {len(exprs)} expressions returned no data"
assert query("millipede_generation_tokens_total")[0] >= 14
assert query('sum(millipede_request_finished_total{reason="length"})')[0] >= 4
assert len(query("millipede_kv_cache_bytes")) == 4, "2 ranks x 2 tiers"
print(f"prometheus_test: all {len(exprs)} dashboard expressions return data")
EOF
log "PASSED"
