#!/usr/bin/env bash
# On a machine with 2+ GPUs: N ranks over NCCL on the GPUs must give the tokens of one CPU
# process, for prompts of 1, 5, 64, 1000 and 4097 tokens on a random fp32 model; with `omnikv`,
# under an OmniKV policy (layer 0 filters, budget 64: each rank's share of the global top-k cut
# on its GPU, the other layers attend to it); with `sparse`, MInference's patterns in prefill
# (layer 0 vertical-slash with the global index, layer 1 block-sparse beside A-shape heads);
# with `duo`, DuoAttention's heads (A-shape prefill and streaming decode for one KV head of each
# layer, full for the other). Decode tokens' MLP is split over the ranks (the default) in every
# mode.
#   tests/gpu/nccl_vs_cpu.sh BIN_DIR [RANKS] [dense|omnikv|sparse|duo]
set -uo pipefail
bin="$1"
ranks="${2:-2}"
mode="${3:-dense}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bin/millipede-mkmodel" --preset tiny --out "$tmp/model" --dtype fp32 --seed 5 \
  --hidden-size 512 --num-heads 8 --num-kv-heads 2 --head-dim 64 --intermediate-size 1024
policy=()
if [ "$mode" = omnikv ]; then
  echo '{"version": 1, "filter": {"top_k": 64}, "default": {"decode": "selected"},
         "layers": [{"layer": 0, "decode": "filter"}]}' > "$tmp/omnikv.json"
  policy=(--policy "$tmp/omnikv.json")
elif [ "$mode" = sparse ]; then
  echo '{"version": 1, "layers": [{"layer": 0, "prefill": "vertical-slash"},
           {"layer": 1, "prefill": ["block-sparse", "a-shape"]}],
         "vertical_slash": {"last_queries": 32, "vertical": 40, "slash": 120},
         "block_sparse": {"block": 64, "top_blocks": 4},
         "a_shape": {"sink_tokens": 4, "window_tokens": 256}}' > "$tmp/policy.json"
  policy=(--policy "$tmp/policy.json")
elif [ "$mode" = duo ]; then
  echo '{"version": 1, "default": {"prefill": ["dense", "a-shape"],
           "decode": ["full", "streaming-head"]},
         "a_shape": {"sink_tokens": 4, "window_tokens": 200},
         "streaming_head": {"sink_tokens": 4, "window_tokens": 200}}' > "$tmp/policy.json"
  policy=(--policy "$tmp/policy.json")
fi
status=0
for n in 1 5 64 1000 4097; do
  python3 -c "import random; random.seed($n); print(' '.join(str(random.randrange(400)) for _ in range($n)))" > "$tmp/ids"
  cpu=$("$bin/millipede-run" --model "$tmp/model" --prompt-ids "$tmp/ids" --max-new-tokens 8 \
        --json --ignore-eos --kv-dtype fp32 "${policy[@]}" | python3 -c "import json,sys; print(json.load(sys.stdin)['ids'])")
  gpu=$(mpirun --allow-run-as-root -np "$ranks" -x NCCL_NVLS_ENABLE=0 "$bin/millipede-run" \
        --model "$tmp/model" --prompt-ids "$tmp/ids" --max-new-tokens 8 --json --ignore-eos \
        --kv-dtype fp32 --backend cuda "${policy[@]}" | tail -1 | python3 -c "import json,sys; print(json.load(sys.stdin)['ids'])")
  if [ "$cpu" = "$gpu" ]; then r=same; else r=DIFFERENT; status=1; fi
  echo "{\"n\": $n, \"ranks\": $ranks, \"mode\": \"$mode\", \"cpu\": \"$cpu\", \"nccl\": \"$gpu\", \"result\": \"$r\"}"
done
exit $status
