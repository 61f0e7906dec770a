#!/usr/bin/env bash
# MInference's dynamic sparse prefill and XAttention's adaptive blocks keep every retrieval answer
# (CPU, 2K and 4K tokens): needle at three depths, a 16-pair KV lookup and a 6-hop chain with
# vertical-slash (64 columns, 256 diagonals of the last 64 queries), block-sparse (8 of the
# 64-token key blocks per query block) and antidiagonal (64-token blocks, stride 8, 90% of the
# mass) heads everywhere, in one process and over 2 ranks; a starved vertical-slash budget (one
# column, one diagonal) and a starved mass threshold (0.1%: the first and diagonal blocks) lose a
# needle and a chain in the middle, so the check can fail.
#   sparse_test.sh BIN_DIR POLICY_DIR MPIEXEC
set -euo pipefail
bin="$1"; policies="$2"; mpiexec="$3"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$bin/millipede-mkmodel" --preset retrieval --out "$work/model" > /dev/null
quality() {  # out-dir, policy, then flags
  local out="$1" policy="$2"; shift 2
  "$bin/millipede-quality" --model "$work/model" --policy "$policies/$policy.json" \
      --tasks needle,kv,chain --depths 0,0.5,1 --pairs 16 --hops 6 --out "$work/$out" "$@" \
      2> /dev/null > /dev/null
}
quality vs vertical-slash --lengths 2K,4K
quality bs block-sparse --lengths 2K,4K
quality ad antidiagonal --lengths 2K,4K
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  "$mpiexec" -n 2 "$bin/millipede-quality" --model "$work/model" \
      --policy "$policies/vertical-slash.json" --tasks needle,chain --depths 0,0.5,1 --hops 6 \
      --lengths 2K --out "$work/vs-np2" 2> /dev/null > /dev/null
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  "$mpiexec" -n 2 "$bin/millipede-quality" --model "$work/model" \
      --policy "$policies/antidiagonal.json" --tasks needle,chain --depths 0,0.5,1 --hops 6 \
      --lengths 2K --out "$work/ad-np2" 2> /dev/null > /dev/null
# Needles in the middle: the forced first columns would still find one at depth 0.
"$bin/millipede-quality" --model "$work/model" --policy "$policies/vertical-slash-starved.json" \
    --tasks needle,chain --depths 0.5 --hops 6 --lengths 2K --out "$work/starved" \
    2> /dev/null > /dev/null
"$bin/millipede-quality" --model "$work/model" --policy "$policies/antidiagonal-starved.json" \
    --tasks needle,chain --depths 0.5 --hops 6 --lengths 2K --out "$work/ad-starved" \
    2> /dev/null > /dev/null
python3 - "$work" <<'PY'
import csv, sys
work = sys.argv[1]
def rows(name):
    return list(csv.DictReader(open(f"{work}/{name}/results.csv")))
failures = []
def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond: failures.append(what)
for run, what in [("vs", "vertical-slash"), ("bs", "block-sparse"), ("vs-np2", "vertical-slash, 2 ranks"),
                  ("ad", "antidiagonal"), ("ad-np2", "antidiagonal, 2 ranks")]:
    r = rows(run)
    expect(len(r) > 0 and all(x["correct"] == "1" for x in r),
           f"{what}: {sum(x['correct'] == '1' for x in r)}/{len(r)} tasks right")
for run in ["starved", "ad-starved"]:
    s = rows(run)
    expect(len(s) > 0 and all(x["correct"] == "0" for x in s),
           f"{run}: a starved budget loses them ({len(s)} tasks wrong)")
sys.exit(1 if failures else 0)
PY
