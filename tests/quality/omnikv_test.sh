#!/usr/bin/env bash
# OmniKV's per-step selection keeps every retrieval answer on the retrieval model (CPU, 2K and 4K
# tokens): with its retrieval layer 1 as the filter layer and layer 2 selected, 16 tokens per KV
# head answer the needle at three depths, a 16-pair KV lookup and a 6-hop chain, in one process
# and over 2 ranks, where static eviction with the same budget (16 heavy hitters + 16 recent
# tokens) breaks the chain; a filter layer that does not retrieve (layer 0: sink and recency
# heads) chooses the wrong tokens and breaks the chain too, so the check can fail.
#   omnikv_test.sh BIN_DIR POLICY_DIR MPIEXEC
set -euo pipefail
bin="$1"; policies="$2"; mpiexec="$3"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$bin/millipede-mkmodel" --preset retrieval --out "$work/model" > /dev/null
quality() {  # out-dir, policy, then flags
  local out="$1" policy="$2"; shift 2
  "$bin/millipede-quality" --model "$work/model" --policy "$policies/$policy.json" \
      --out "$work/$out" "$@" 2> /dev/null > /dev/null
}
quality omni omnikv --tasks needle,kv,chain --depths 0,0.5,1 --pairs 16 --hops 6 --lengths 2K,4K
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  "$mpiexec" -n 2 "$bin/millipede-quality" --model "$work/model" \
      --policy "$policies/omnikv.json" --tasks needle,chain --depths 0,0.5,1 --hops 6 \
      --lengths 2K --out "$work/omni-np2" 2> /dev/null > /dev/null
quality evict static-eviction --tasks chain --depths 0.5 --hops 6 --lengths 2K
quality layer0 omnikv-layer0 --tasks chain --depths 0.5 --hops 6 --lengths 2K
python3 - "$work" <<'PY'
import csv, sys
work = sys.argv[1]
def rows(name):
    return list(csv.DictReader(open(f"{work}/{name}/results.csv")))
failures = []
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: failures.append(what)
for run, what in [("omni", "omnikv"), ("omni-np2", "omnikv, 2 ranks")]:
    r = rows(run)
    expect(len(r) > 0 and all(x["correct"] == "1" for x in r),
           f"{what}: {sum(x['correct'] == '1' for x in r)}/{len(r)} tasks right")
for run, what in [("evict", "static eviction"), ("layer0", "a filter layer that does not retrieve")]:
    x = rows(run)[0]
    expect(x["correct"] == "0",
           f"{what} breaks the chain ({x['correct_steps']}/{x['steps']} hops right)")
sys.exit(1 if failures else 0)
PY
