#!/usr/bin/env python
"""An FP8 KV cache's logits error beyond a trained model's context, against the engine's own fp32
cache (fp32 weights): the last position's logits of one prefill of random token ids, fp8 and bf16
caches against the fp32 cache, max |diff| / max |ref|.

A measurement, not a test (docs/quality.md, "FP8 KV cache", gives its results). Usage, from the
repository root with the test oracles' Python:
  build/cpu/bin/millipede-mkmodel --preset tiny --out /tmp/fp8-model --dtype fp32 \\
      --hidden-size 256 --intermediate-size 688 --num-layers 4 --num-heads 8 --num-kv-heads 2 \\
      --head-dim 32 --max-position-embeddings 131072 --rope-theta 500000
  build/pyenv/bin/python tests/models/fp8_long_logits.py /tmp/fp8-model 2048 8192 32768 65536
"""
import argparse
import json
import os
import random
import subprocess
import tempfile
import time

import numpy as np

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", help="a Hugging Face model directory")
    ap.add_argument("lengths", type=int, nargs="+")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "cpu", "bin", "millipede-test-logits"))
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        vocab = int(json.load(f)["vocab_size"])
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="fp8_long_")

    def logits(ids, kv):
        ids_path, out = os.path.join(work, "ids.txt"), os.path.join(work, "logits.f32")
        with open(ids_path, "w") as f:
            f.write(" ".join(map(str, ids)))
        subprocess.run([args.bin, "--model", args.model, "--prompt-ids", ids_path, "--out", out,
                        "--kv-dtype", kv, "--prefill-chunk", "2048"], check=True)
        return np.fromfile(out, dtype="<f4")

    def err(a, ref):
        return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))

    for n in args.lengths:
        ids = [rng.randrange(3, vocab) for _ in range(n)]
        start = time.time()
        ref, bf16, fp8 = logits(ids, "fp32"), logits(ids, "bf16"), logits(ids, "fp8")
        e8, e16 = err(fp8, ref), err(bf16, ref)
        same = int(np.argmax(fp8)) == int(np.argmax(ref))
        print(f"n={n}: fp8 {e8:.3e}, bf16 {e16:.3e}, ratio {e8 / max(e16, 1e-30):.1f}, "
              f"fp8 argmax {'kept' if same else 'changed'} ({time.time() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
