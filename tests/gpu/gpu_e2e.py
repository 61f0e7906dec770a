#!/usr/bin/env python3
"""End-to-end check on a GPU machine: the engine on the GPU against the engine on the CPU and
against Hugging Face transformers (PyTorch on the GPU), with the same random-weight models.

usage: gpu_e2e.py BIN_DIR [--out results.json]

For each model shape and prompt length it compares the logits of the last prompt position and the
greedy tokens. Exit code 0 when every comparison is inside its tolerance, 1 otherwise, 77 when no
GPU, torch or transformers is available.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import transformers
except ImportError as e:  # pragma: no cover
    print(f"gpu_e2e: skipped: {e}")
    sys.exit(77)

if not torch.cuda.is_available():
    print("gpu_e2e: skipped: no GPU")
    sys.exit(77)

BIN = sys.argv[1]
OUT = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None

# (name, mkmodel flags). head_dim 64 and 128 reach the tensor-core attention path; 16 the generic.
SHAPES = [
    ("tiny-hd16", ["--preset", "tiny"]),
    ("gqa4-hd64", ["--preset", "tiny", "--hidden-size", "512", "--num-heads", "8",
                   "--num-kv-heads", "2", "--head-dim", "64", "--intermediate-size", "1024",
                   "--num-layers", "2"]),
    ("gqa8-hd128", ["--preset", "tiny", "--hidden-size", "1024", "--num-heads", "8",
                    "--num-kv-heads", "1", "--head-dim", "128", "--intermediate-size", "2048",
                    "--num-layers", "2"]),
    ("qwen2-hd128", ["--preset", "tiny", "--model-type", "qwen2", "--hidden-size", "512",
                     "--num-heads", "4", "--num-kv-heads", "4", "--head-dim", "128",
                     "--intermediate-size", "1024", "--num-layers", "2"]),
]
LENGTHS = [1, 65, 4097]
# Relative tolerance on the logits (max |a - b| / max |b|) per weight dtype.
TOLERANCE = {"fp32": 2e-3, "bf16": 4e-2}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-2000:]}")
    return r.stdout


def engine_logits(model, ids_file, backend, kv, tmp):
    out = os.path.join(tmp, f"logits_{backend}.bin")
    run([f"{BIN}/millipede-test-logits", "--model", model, "--prompt-ids", ids_file, "--out", out,
         "--backend", backend, "--kv-dtype", kv])
    return np.fromfile(out, dtype=np.float32)


def engine_greedy(model, ids_file, backend, kv, n):
    out = run([f"{BIN}/millipede-run", "--model", model, "--prompt-ids", ids_file,
               "--max-new-tokens", str(n), "--json", "--ignore-eos", "--backend", backend,
               "--kv-dtype", kv])
    return json.loads(out.strip().splitlines()[-1])["ids"]


def rel(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(np.max(np.abs(b)), 1e-30))


def main():
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in SHAPES:
            for dtype in ("fp32", "bf16"):
                model = os.path.join(tmp, f"{name}-{dtype}")
                run([f"{BIN}/millipede-mkmodel", *flags, "--out", model, "--dtype", dtype,
                     "--seed", "3"])
                torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
                hf = transformers.AutoModelForCausalLM.from_pretrained(
                    model, dtype=torch_dtype, attn_implementation="sdpa").cuda().eval()
                vocab = hf.config.vocab_size
                kv = "fp32" if dtype == "fp32" else "bf16"
                for n in LENGTHS:
                    rng = np.random.default_rng(n)
                    ids = rng.integers(0, vocab, size=n).tolist()
                    ids_file = os.path.join(tmp, "ids.txt")
                    with open(ids_file, "w") as f:
                        f.write(" ".join(map(str, ids)))
                    gpu = engine_logits(model, ids_file, "cuda", kv, tmp)
                    cpu = engine_logits(model, ids_file, "cpu", kv, tmp) if n <= 65 else None
                    with torch.no_grad():
                        ref = hf(torch.tensor([ids], device="cuda")).logits[0, -1].float()
                    ref = ref.cpu().numpy().astype(np.float64)
                    e_hf = rel(gpu, ref)
                    e_cpu = rel(gpu, cpu) if cpu is not None else None
                    steps = 8
                    g_gpu = engine_greedy(model, ids_file, "cuda", kv, steps)
                    with torch.no_grad():
                        # An explicit mask: otherwise generate() masks every prompt token equal
                        # to the pad id.
                        prompt = torch.tensor([ids], device="cuda")
                        gen = hf.generate(prompt, attention_mask=torch.ones_like(prompt),
                                          do_sample=False, max_new_tokens=steps,
                                          eos_token_id=None, pad_token_id=0)[0, n:].tolist()
                    same = sum(1 for a, b in zip(g_gpu, gen) if a == b)
                    # Greedy tokens may part at a near tie of a random model's flat logits: the
                    # first token must be the reference's, or score within the tolerance of it
                    # under the reference's own logits.
                    margin = float(ref[gen[0]] - ref[g_gpu[0]])
                    first_ok = g_gpu[0] == gen[0] or \
                        margin <= TOLERANCE[dtype] * float(np.max(np.abs(ref)))
                    passed = e_hf < TOLERANCE[dtype] and (e_cpu is None or
                                                          e_cpu < TOLERANCE[dtype]) and first_ok
                    ok &= passed
                    row = dict(shape=name, dtype=dtype, n=n, gpu_vs_hf=e_hf, gpu_vs_cpu=e_cpu,
                               greedy_agree=f"{same}/{steps}", first_token_margin=margin,
                               passed=passed)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                del hf
                torch.cuda.empty_cache()
    if OUT:
        with open(OUT, "w") as f:
            json.dump(rows, f, indent=1)
    print("gpu_e2e:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
