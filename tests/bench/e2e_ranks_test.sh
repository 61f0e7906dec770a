#!/usr/bin/env bash
# The end-to-end benchmark on a tiny random model under mpirun with 1, 2, 4 and 8 ranks: every
# rank count must generate the ids of one rank (prompts of 1, 13 and 300 tokens; the prompt of 1
# and of 13 tokens leave ranks without prompt tokens).
set -euo pipefail
bench="$1"
ids_of() {  # ranks seq -> the first_ids arrays, one per line
  mpirun --oversubscribe -np "$1" "$bench" --preset tiny --backend cpu --seq "$2" \
    --decode-tokens 6 --warmup-seq 0 --prefill-chunk 16 --attention-chunk 32 --kv-dtype fp32 \
    --dtype fp32 | python3 -c '
import json, sys
for line in sys.stdin:
    print(json.loads(line)["first_ids"])'
}
status=0
for seq in 1 13 300; do
  want="$(ids_of 1 "$seq")"
  [ -n "$want" ] || { echo "no output for 1 rank, seq $seq"; exit 1; }
  for n in 2 4 8; do
    got="$(ids_of "$n" "$seq")"
    if [ "$got" != "$want" ]; then
      echo "FAIL: seq $seq, $n ranks: $got, 1 rank: $want"
      status=1
    else
      echo "ok: seq $seq, $n ranks: $got"
    fi
  done
done
# Decode over a synthetic cache placed over the ranks: the same ids for any rank count.
decode_ids() {
  mpirun --oversubscribe -np "$1" "$bench" --preset tiny --backend cpu --seq 700 \
    --decode-tokens 5 --decode-only --kv-dtype fp32 --dtype fp32 | python3 -c '
import json, sys
print(json.loads(sys.stdin.readline())["first_ids"])'
}
want="$(decode_ids 1)"
for n in 3 8; do
  got="$(decode_ids "$n")"
  if [ "$got" != "$want" ]; then
    echo "FAIL: decode-only, $n ranks: $got, 1 rank: $want"
    status=1
  else
    echo "ok: decode-only, $n ranks: $got"
  fi
done
exit $status
