#!/usr/bin/env bash
# On a machine with 2+ GPUs: N ranks over NCCL on the GPUs must give the tokens of one CPU
# process, for prompts of 1, 5, 64, 1000 and 4097 tokens on a random fp32 model.
#   tests/gpu/nccl_vs_cpu.sh BIN_DIR [RANKS]
set -uo pipefail
bin="$1"
ranks="${2:-2}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$bin/millipede-mkmodel" --preset tiny --out "$tmp/model" --dtype fp32 --seed 5 \
  --hidden-size 512 --num-heads 8 --num-kv-heads 2 --head-dim 64 --intermediate-size 1024
status=0
for n in 1 5 64 1000 4097; do
  python3 -c "import random; random.seed($n); print(' '.join(str(random.randrange(400)) for _ in range($n)))" > "$tmp/ids"
  cpu=$("$bin/millipede-run" --model "$tmp/model" --prompt-ids "$tmp/ids" --max-new-tokens 8 \
        --json --ignore-eos --kv-dtype fp32 | python3 -c "import json,sys; print(json.load(sys.stdin)['ids'])")
  gpu=$(mpirun --allow-run-as-root -np "$ranks" -x NCCL_NVLS_ENABLE=0 "$bin/millipede-run" \
        --model "$tmp/model" --prompt-ids "$tmp/ids" --max-new-tokens 8 --json --ignore-eos \
        --kv-dtype fp32 --backend cuda | tail -1 | python3 -c "import json,sys; print(json.load(sys.stdin)['ids'])")
  if [ "$cpu" = "$gpu" ]; then r=same; else r=DIFFERENT; status=1; fi
  echo "{\"n\": $n, \"ranks\": $ranks, \"cpu\": \"$cpu\", \"nccl\": \"$gpu\", \"result\": \"$r\"}"
done
exit $status
