#!/usr/bin/env python3
"""A trained model on the GPU: SmolLM2-135M-Instruct (GGUF) through the engine's CUDA backend
against Hugging Face transformers on the same GPU, in the same call.

usage: smollm2_gpu.py BIN_DIR MODEL.gguf [--out results.json] [--lengths 16,1024,4096,8192]

Prompts are real English prose: the repository's own documentation (identical on every machine),
markdown code blocks and tables removed, tokenized by transformers' GGUF tokenizer. For each
length it compares the last prompt position's logits (relative error: max |a - b| / max |ref|):
  fp32: the engine with fp32 weights and KV against transformers in fp32 (TF32 off);
  bf16: the engine with bf16 weights and KV against fp32 math on the same bf16-rounded weights
        (transformers in fp32 with each weight rounded to bf16), beside transformers' own bf16
        run against that same reference. The engine must not be worse than BF16_MARGIN times
        transformers' own error.
and 32 greedy tokens after the longest prompt (leading tokens equal; a parting is accepted only
where transformers' two best logits are within NEAR_TIE of each other).
Exit code 0 when every comparison holds, 1 otherwise, 77 without a GPU, torch, transformers or
the gguf package.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import transformers  # noqa: F401
    import gguf  # noqa: F401  (transformers reads GGUF files with it)
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:  # pragma: no cover
    print(f"smollm2_gpu: skipped: {e}")
    sys.exit(77)

FP32_TOLERANCE = 2e-3
BF16_MARGIN = 2.0
NEAR_TIE = 1e-3
NEW_TOKENS = 32
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs_prose import prose  # noqa: E402


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-2000:]}")
    return r.stdout


def engine_logits(bin_dir, model, ids, dtype, tmp):
    ids_file = os.path.join(tmp, "ids.txt")
    with open(ids_file, "w") as f:
        f.write(" ".join(map(str, ids)))
    out = os.path.join(tmp, "logits.bin")
    t0 = time.time()
    run([f"{bin_dir}/millipede-test-logits", "--model", model, "--prompt-ids", ids_file,
         "--out", out, "--backend", "cuda", "--weight-dtype", dtype, "--kv-dtype", dtype])
    return np.fromfile(out, dtype="<f4").astype(np.float64), time.time() - t0


def engine_greedy(bin_dir, model, ids, dtype, tmp):
    ids_file = os.path.join(tmp, "greedy_ids.txt")
    with open(ids_file, "w") as f:
        f.write(" ".join(map(str, ids)))
    out = run([f"{bin_dir}/millipede-run", "--model", model, "--prompt-ids", ids_file,
               "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos", "--json", "--backend", "cuda",
               "--weight-dtype", dtype, "--kv-dtype", dtype])
    return json.loads(out)["ids"]


def rel_error(a, ref):
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


@torch.no_grad()
def hf_last_logits(model, ids):
    x = torch.tensor([ids], device="cuda")
    return model(x).logits[0, -1].double().cpu().numpy()


@torch.no_grad()
def hf_greedy(model, ids):
    """Greedy ids and, per step, the gap between the two best logits relative to the largest."""
    x = torch.tensor([ids], device="cuda")
    out = model(x, use_cache=True)
    past, logits = out.past_key_values, out.logits[0, -1]
    tokens, gaps = [], []
    for _ in range(NEW_TOKENS):
        top = torch.topk(logits.double(), 2).values
        gaps.append(float((top[0] - top[1]) / logits.double().abs().max()))
        nxt = int(torch.argmax(logits))
        tokens.append(nxt)
        out = model(torch.tensor([[nxt]], device="cuda"), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return tokens, gaps


def greedy_agrees(ours, want, gaps):
    for i, (a, b) in enumerate(zip(ours, want)):
        if a != b:
            return i, gaps[i] < NEAR_TIE
    return len(want), True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("model")
    ap.add_argument("--out")
    ap.add_argument("--lengths", default="16,1024,4096,8192")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("smollm2_gpu: skipped: no GPU")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    folder, name = os.path.split(os.path.abspath(args.model))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    fp32 = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                torch_dtype=torch.float32).cuda().eval()
    bf16 = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                torch_dtype=torch.bfloat16).cuda().eval()
    rounded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                   torch_dtype=torch.float32).cuda().eval()
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    text_ids = tok(prose(), add_special_tokens=False)["input_ids"]
    context = fp32.config.max_position_embeddings
    results, ok = {"model": name, "device": torch.cuda.get_device_name(0), "lengths": []}, True
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(v) for v in args.lengths.split(",")):
            n = min(n, context, len(text_ids))
            ids = text_ids[:n]
            ref32 = hf_last_logits(fp32, ids)
            ref_rounded = hf_last_logits(rounded, ids)
            hf16 = hf_last_logits(bf16, ids)
            ours32, t32 = engine_logits(args.bin_dir, args.model, ids, "fp32", tmp)
            ours16, t16 = engine_logits(args.bin_dir, args.model, ids, "bf16", tmp)
            row = {"tokens": n,
                   "fp32_error": rel_error(ours32, ref32),
                   "bf16_error": rel_error(ours16, ref_rounded),
                   "hf_bf16_error": rel_error(hf16, ref_rounded),
                   "argmax_equal_fp32": int(np.argmax(ours32)) == int(np.argmax(ref32)),
                   "engine_seconds": {"fp32": round(t32, 2), "bf16": round(t16, 2)}}
            row["ok"] = (row["fp32_error"] <= FP32_TOLERANCE and
                         row["bf16_error"] <= BF16_MARGIN * max(row["hf_bf16_error"], 1e-6))
            ok &= row["ok"]
            results["lengths"].append(row)
            print(json.dumps(row), flush=True)
        n = min(max(int(v) for v in args.lengths.split(",")), context) - NEW_TOKENS
        ids = text_ids[:n]
        want32, gaps32 = hf_greedy(fp32, ids)
        want16, _ = hf_greedy(bf16, ids)
        ours32 = engine_greedy(args.bin_dir, args.model, ids, "fp32", tmp)
        ours16 = engine_greedy(args.bin_dir, args.model, ids, "bf16", tmp)
        lead32, tie32 = greedy_agrees(ours32, want32, gaps32)
        lead16, _ = greedy_agrees(ours16, want32, gaps32)
        hf_lead16, _ = greedy_agrees(want16, want32, gaps32)
        greedy = {"prompt_tokens": n, "new_tokens": NEW_TOKENS,
                  "fp32_equal_leading": lead32, "fp32_parting_is_near_tie": tie32,
                  "bf16_equal_leading_vs_hf_fp32": lead16,
                  "hf_bf16_equal_leading_vs_hf_fp32": hf_lead16,
                  "text_fp32": tok.decode(ours32)}
        greedy["ok"] = lead32 == NEW_TOKENS or tie32
        ok &= greedy["ok"]
        results["greedy"] = greedy
        print(json.dumps(greedy), flush=True)
    results["ok"] = ok
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    print("smollm2_gpu: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
