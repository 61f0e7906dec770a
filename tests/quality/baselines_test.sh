#!/usr/bin/env bash
# The baselines fail where they should on the retrieval model (CPU, 2K tokens), while dense
# answers everything: A-shape (StreamingLLM: 4 sinks + a 256-token window, prefill and decode)
# misses a needle in the middle of the context but finds one inside its window; static eviction
# (H2O-style: 16 heavy hitters + 16 recent tokens per KV head) breaks a 6-hop chain after its
# first hop, because every hop needs a different needle.
#   baselines_test.sh BIN_DIR POLICY_DIR
set -euo pipefail
bin="$1"; policies="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$bin/millipede-mkmodel" --preset retrieval --out "$work/model" > /dev/null
quality() {  # out-dir, then flags
  local out="$1"; shift
  "$bin/millipede-quality" --model "$work/model" --lengths 2K --out "$work/$out" "$@" 2> /dev/null > /dev/null
}
quality dense-needle --tasks needle --depths 0.5
quality dense-chain --tasks chain --hops 6 --depths 0.5
quality ashape --tasks needle --depths 0.5,1 --policy "$policies/a-shape.json"
quality evict --tasks chain --hops 6 --depths 0.5 --policy "$policies/static-eviction.json"
python3 - "$work" <<'PY'
import csv, sys
work = sys.argv[1]
def rows(name):
    return list(csv.DictReader(open(f"{work}/{name}/results.csv")))
failures = []
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: failures.append(what)
dense = rows("dense-needle") + rows("dense-chain")
expect(all(r["correct"] == "1" for r in dense), "dense answers the needle and the whole chain")
a = {float(r["depth"]): r for r in rows("ashape")}
expect(a[0.5]["correct"] == "0", "a-shape misses the needle at depth 50% (outside its window)")
expect(a[1.0]["correct"] == "1", "a-shape finds the needle at depth 100% (inside its window)")
expect(all(r["policy"] == "a-shape" for r in a.values()), "reports name the policy")
e = rows("evict")[0]
expect(e["correct"] == "0" and int(e["correct_steps"]) < int(e["steps"]) // 2,
       f"static eviction breaks the chain ({e['correct_steps']}/{e['steps']} hops right)")
sys.exit(1 if failures else 0)
PY
