#!/usr/bin/env python
"""FP8 E4M3 (OCP e4m3fn) KV-cache scaling study on SmolLM2-135M-Instruct (fp32 math otherwise).

Fake-quantises post-RoPE K and V (x -> dequant(quant(x))) at the point where they enter the KV
cache (a DynamicCache subclass whose update() quantises the new K/V before storing them; the
attention then reads the quantised cache, including for the current token), under schemes:

  a  unit scale                     x' = e4m3(x)
  b  per-tensor static              s = amax/448 per layer, separately K and V
  c  per-tensor static, pow2        s = 2^ceil(log2(amax/448))
  d  per layer & KV-head static     s = amax over (tokens, head_dim) per head / 448
  e  per token & KV-head dynamic    s = amax over head_dim / 448
  f  per 64-token block & KV-head   s = amax over (64 tokens, head_dim) / 448
  g  bf16 rounding of K and V (baseline of a bf16 cache)

Static scales (b, c, d) are "oracle" scales: measured on the very sequence being evaluated in
the unquantised fp32 run (for generation they are taken from the generated-English calibration text).

A measurement, not a test (docs/quality.md, "FP8 KV cache", gives its results and why the cache
stores E4M3 unscaled). Usage, from the repository root with the test oracles' Python:
  build/pyenv/bin/python tests/models/fp8_kv_scales_study.py \
      [--model build/models/SmolLM2-135M-Instruct.Q4_1.gguf] [--out DIR] [--tokens 2048] [--quick]
Writes results.json and results_auto.md into --out (default: the current directory).

With --write-scales FILE it only calibrates: the largest |K| (after RoPE) and |V| of each layer
over the generated English text, divided by 448, written as the engine's --kv-scales file
({"k_scale": [...], "v_scale": [...]}).
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import DynamicCache

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# Set from --model and --out in main().
MODEL_DIR = os.path.join(REPO, "build", "models")
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
HERE = "."
E4M3_MAX = 448.0
E4M3_MIN_NORMAL = 2.0 ** -6
E4M3_MIN_SUB = 2.0 ** -9

# --------------------------------------------------------------------------------------------
# E4M3 (e4m3fn) rounding, exact
# --------------------------------------------------------------------------------------------


def e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round fp32 tensor to the nearest OCP E4M3FN value (RNE), saturating to +-448.

    Normals: exponent -6..8, 3-bit mantissa -> quantum 2^(e-3).  Subnormals: quantum 2^-9
    (obtained by clamping the exponent at -6, so quantum = 2^-9 below 2^-6).  All scalings are
    by powers of two, hence exact in fp32; torch.round rounds half to even.
    """
    assert x.dtype == torch.float32
    a = x.abs()
    _, ex = torch.frexp(a)  # a = m * 2^ex, m in [0.5, 1)  ->  floor(log2 a) = ex - 1
    e = (ex - 1).clamp(min=-6)
    inv_quantum = torch.exp2((3 - e).to(torch.float32))  # exact power of two
    q = torch.round(a * inv_quantum) / inv_quantum
    q = torch.where(torch.isinf(a), torch.full_like(a, E4M3_MAX), q)
    q = q.clamp(max=E4M3_MAX)  # saturate (also catches 464..480 which RNE would send to 480)
    return torch.copysign(q, x)


def e4m3_table():
    """All non-negative finite e4m3fn values, indexed by code 0..126 (0x7F is NaN)."""
    vals = []
    for code in range(127):
        ef, mf = code >> 3, code & 7
        vals.append(mf * 2.0 ** -9 if ef == 0 else (1 + mf / 8) * 2.0 ** (ef - 7))
    return vals


def self_test_e4m3():
    tab = e4m3_table()
    assert tab[-1] == 448.0 and tab[1] == 2.0 ** -9 and tab[8] == 2.0 ** -6
    t = torch.tensor(tab, dtype=torch.float64)

    def brute(v):  # nearest with ties to even code, saturating
        out = []
        for x in v.tolist():
            a = abs(x)
            if a >= 448.0:
                r = 448.0
            else:
                d = (t - a).abs()
                dmin = d.min()
                idx = [i for i in range(127) if d[i] == dmin]
                i = idx[0] if len(idx) == 1 else [j for j in idx if j % 2 == 0][0]
                r = tab[i]
            out.append(math.copysign(r, x))
        return torch.tensor(out, dtype=torch.float32)

    exact = torch.tensor(tab, dtype=torch.float32)
    assert torch.equal(e4m3(exact), exact) and torch.equal(e4m3(-exact), -exact)
    mids = torch.tensor([(tab[i] + tab[i + 1]) / 2 for i in range(126)], dtype=torch.float32)
    exp_mid = torch.tensor([tab[i] if i % 2 == 0 else tab[i + 1] for i in range(126)],
                           dtype=torch.float32)
    assert torch.equal(e4m3(mids), exp_mid), "ties-to-even failed"
    assert torch.equal(e4m3(-mids), -exp_mid)
    up = torch.nextafter(mids, torch.full_like(mids, 1e9))
    dn = torch.nextafter(mids, torch.zeros_like(mids))
    assert torch.equal(e4m3(up), torch.tensor(tab[1:], dtype=torch.float32))
    assert torch.equal(e4m3(dn), torch.tensor(tab[:-1], dtype=torch.float32))
    special = torch.tensor([2.0 ** -10, 3 * 2.0 ** -10, 1e-30, 0.0, 449.0, 463.9, 464.0, 479.0,
                            480.0, 1e6, float("inf")], dtype=torch.float32)
    want = torch.tensor([0.0, 2.0 ** -8, 0.0, 0.0, 448, 448, 448, 448, 448, 448, 448],
                        dtype=torch.float32)
    assert torch.equal(e4m3(special), want), (e4m3(special), want)
    g = torch.Generator().manual_seed(0)
    rnd = torch.cat([torch.randn(4000, generator=g) * s for s in (1e-3, 1e-2, 1e-1, 1, 10, 100, 600)])
    assert torch.equal(e4m3(rnd), brute(rnd)), "random comparison with brute force failed"
    return True


def bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


# --------------------------------------------------------------------------------------------
# Scaled fake-quantisation.  x: [B, H_kv, T, D]
# --------------------------------------------------------------------------------------------


def fq_scaled(x, s):
    return e4m3(x / s) * s


def safe_scale(amax):
    return torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))


def pow2_up(s):
    return torch.exp2(torch.ceil(torch.log2(s)))


def quantize(scheme, x, static=None, block=64):
    if scheme == "fp32":
        return x
    if scheme == "a":
        return e4m3(x)
    if scheme == "g":
        return bf16(x)
    if scheme in ("b", "c", "d"):
        return fq_scaled(x, static)  # static: scalar tensor or [1, H, 1, 1]
    if scheme == "e":
        s = safe_scale(x.abs().amax(dim=-1, keepdim=True))
        return fq_scaled(x, s)
    if scheme == "f":
        B, H, T, D = x.shape
        out = torch.empty_like(x)
        for t0 in range(0, T, block):
            xb = x[:, :, t0:t0 + block]
            s = safe_scale(xb.abs().amax(dim=(-2, -1), keepdim=True))
            out[:, :, t0:t0 + block] = fq_scaled(xb, s)
        return out
    raise ValueError(scheme)


def static_scales(scheme, amax_tensor, amax_head):
    """amax_tensor: scalar; amax_head: [H]."""
    if scheme == "b":
        return safe_scale(amax_tensor)
    if scheme == "c":
        return pow2_up(safe_scale(amax_tensor))
    if scheme == "d":
        return safe_scale(amax_head).view(1, -1, 1, 1)
    return None


class QuantCache(DynamicCache):
    """DynamicCache that stores fake-quantised K/V (and records stats/local errors)."""

    def __init__(self, scheme="fp32", scales=None, record=False, block=64):
        super().__init__()
        self.scheme = scheme
        self.scales = scales  # {layer: {"k": s, "v": s}} for static schemes
        self.record = record
        self.block = block
        self.raw = {}  # layer -> (k, v) when recording
        self.err = {}  # layer -> [sum sq err k, sum sq k, sum sq err v, sum sq v]

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        if self.record:
            self.raw[layer_idx] = (key_states.detach().clone(), value_states.detach().clone())
        sk = sv = None
        if self.scheme in ("b", "c", "d"):
            sk, sv = self.scales[layer_idx]["k"], self.scales[layer_idx]["v"]
        if self.scheme == "f" and key_states.shape[-2] != 1 and self.get_seq_length(layer_idx) > 0:
            raise RuntimeError("block scheme only supported for single full-sequence forward")
        kq = quantize(self.scheme, key_states, sk, self.block)
        vq = quantize(self.scheme, value_states, sv, self.block)
        acc = self.err.setdefault(layer_idx, [0.0, 0.0, 0.0, 0.0])
        acc[0] += (kq - key_states).pow(2).sum().item()
        acc[1] += key_states.pow(2).sum().item()
        acc[2] += (vq - value_states).pow(2).sum().item()
        acc[3] += value_states.pow(2).sum().item()
        return super().update(kq, vq, layer_idx, cache_kwargs)


# --------------------------------------------------------------------------------------------
# Texts
# --------------------------------------------------------------------------------------------


def english_text(n_paragraphs=120, seed=1234):
    rng = random.Random(seed)
    subjects = ["The old lighthouse keeper", "A young engineer", "The village council",
                "Our neighbour's daughter", "The travelling musician", "A curious student",
                "The harbour master", "An elderly botanist", "The night-shift nurse",
                "A retired schoolteacher", "The small bakery on the corner", "The river ferry crew"]
    verbs = ["repaired", "described", "carefully examined", "argued about", "painted",
             "wrote a long letter about", "quietly remembered", "measured", "photographed",
             "sold", "planned a festival around", "kept a diary about"]
    objects = ["the broken clock in the town square", "a map of the northern valleys",
               "the first snowfall of the winter", "the price of bread and salt",
               "an unusual migratory bird", "the bridge that had collapsed in the storm",
               "a recipe handed down for generations", "the train timetable for the coast",
               "the stars visible above the hills", "a forgotten song from her childhood",
               "the water level of the reservoir", "a wooden boat with a red sail"]
    clauses = ["because nobody else seemed to care", "while the rain fell steadily outside",
               "before the sun rose over the fields", "after the long meeting had finally ended",
               "although the evidence was far from clear", "as the market slowly filled with people",
               "so that the children would understand it", "even though it took most of the summer",
               "when the ships returned from the south", "until every detail was correct"]
    connect = ["Later that week,", "In the meantime,", "Surprisingly,", "As a result,",
               "Nevertheless,", "Some years earlier,", "By the evening,", "Meanwhile,"]
    tails = ["Everyone agreed it was worth the effort.",
             "The result was more interesting than anyone expected.",
             "It became a story told at every family dinner.",
             "Nobody could explain exactly why it mattered so much.",
             "The newspaper printed a short article about it.",
             "Several visitors came from the city to see it."]
    paras = []
    for _ in range(n_paragraphs):
        sents = []
        for j in range(rng.randint(3, 6)):
            s = f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)} {rng.choice(clauses)}."
            if j > 0 and rng.random() < 0.5:
                s = rng.choice(connect) + " " + s[0].lower() + s[1:]
            sents.append(s)
        if rng.random() < 0.6:
            sents.append(rng.choice(tails))
        paras.append(" ".join(sents))
    return "\n\n".join(paras)


def corpora():
    out = {"english_generated": english_text()}
    # The project's own prose: docs/*.md in name order.
    docs = os.path.join(REPO, "docs")
    out["docs_prose"] = "\n\n".join(
        open(os.path.join(docs, name), encoding="utf-8").read()
        for name in sorted(os.listdir(docs)) if name.endswith(".md"))
    out["python_argparse"] = open(argparse.__file__, encoding="utf-8").read()
    return out


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def run_logits(model, ids, cache):
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    return out.logits[0].float()


def kv_stats(raw):
    rows = []
    for li in sorted(raw):
        k, v = raw[li]
        r = {"layer": li}
        for name, x in (("K", k), ("V", v)):
            a = x.abs().flatten()
            r[name] = {
                "max": a.max().item(),
                "median": a.median().item(),
                "p99.9": torch.quantile(a, 0.999).item() if a.numel() <= 16_000_000 else float("nan"),
                "frac_lt_2^-6": (a < E4M3_MIN_NORMAL).float().mean().item(),
                "frac_le_2^-10(->0)": (a <= 2.0 ** -10).float().mean().item(),
                "frac_gt_448": (a > E4M3_MAX).float().mean().item(),
                "energy_frac_lt_2^-6": (a.pow(2) * (a < E4M3_MIN_NORMAL)).sum().item() / a.pow(2).sum().item(),
                "head_amax": x.abs().amax(dim=(0, 2, 3)).tolist(),
            }
        rows.append(r)
    return rows


def calib_from_raw(raw):
    cal = {}
    for li, (k, v) in raw.items():
        cal[li] = {"k_amax": k.abs().max(), "v_amax": v.abs().max(),
                   "k_head": k.abs().amax(dim=(0, 2, 3)), "v_head": v.abs().amax(dim=(0, 2, 3))}
    return cal


def scales_for(scheme, cal):
    if scheme not in ("b", "c", "d"):
        return None
    return {li: {"k": static_scales(scheme, c["k_amax"], c["k_head"]),
                 "v": static_scales(scheme, c["v_amax"], c["v_head"])} for li, c in cal.items()}


def compare(ref, test, ids):
    d = test - ref
    lp_ref = F.log_softmax(ref, -1)
    lp_t = F.log_softmax(test, -1)
    kl = (lp_ref.exp() * (lp_ref - lp_t)).sum(-1)
    tgt = ids[0, 1:]
    nll_ref = -lp_ref[:-1].gather(1, tgt[:, None]).mean().item()
    nll_t = -lp_t[:-1].gather(1, tgt[:, None]).mean().item()
    return {
        "max_abs": d.abs().max().item(),
        "mean_abs": d.abs().mean().item(),
        "rel": (d.norm() / ref.norm()).item(),
        "argmax_agree_pct": 100.0 * (ref.argmax(-1) == test.argmax(-1)).float().mean().item(),
        "kl_mean": kl.mean().item(),
        "kl_max": kl.max().item(),
        "nll_ref": nll_ref,
        "nll": nll_t,
    }


def local_err(err):
    kr = [math.sqrt(e[0] / e[1]) for e in err.values()]
    vr = [math.sqrt(e[2] / e[3]) for e in err.values()]
    return {"k_rel_mean": sum(kr) / len(kr), "k_rel_max": max(kr),
            "v_rel_mean": sum(vr) / len(vr), "v_rel_max": max(vr),
            "k_rel_per_layer": kr, "v_rel_per_layer": vr}


@torch.no_grad()
def greedy(model, ids, n, cache):
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    toks = []
    nxt = out.logits[0, -1].argmax()
    for _ in range(n):
        toks.append(int(nxt))
        out = model(input_ids=nxt.view(1, 1), past_key_values=cache, use_cache=True)
        nxt = out.logits[0, -1].argmax()
    return toks


SCHEMES = ["a", "b", "c", "d", "e", "f", "g"]
SCHEME_DESC = {
    "a": "unit scale",
    "b": "per-tensor static amax/448",
    "c": "per-tensor static, pow2 up",
    "d": "per layer+KV-head static",
    "e": "per token+KV-head dynamic",
    "f": "per 64-tok block+KV-head",
    "g": "bf16 (baseline)",
}


def main():
    global MODEL_DIR, MODEL_FILE, HERE
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2048, help="tokens for the generated-English corpus")
    ap.add_argument("--tokens-other", type=int, default=1024, help="tokens for the docs / argparse corpora")
    ap.add_argument("--gen-tokens", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="english corpus only, 512 tokens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mechanism-check", action="store_true",
                    help="only: top-1 energy share per (token,head) vector and unit-scale error with the "
                         "per-vector max made exact (explains scheme e), on 512 English tokens")
    ap.add_argument("--model", default=os.path.join(MODEL_DIR, MODEL_FILE),
                    help="SmolLM2-135M-Instruct's GGUF file")
    ap.add_argument("--out", default=".", help="folder for results.json and results_auto.md")
    ap.add_argument("--write-scales", metavar="FILE",
                    help="only: write per-layer amax/448 scales (the engine's --kv-scales file)")
    args = ap.parse_args()
    MODEL_DIR, MODEL_FILE = os.path.split(os.path.abspath(args.model))
    HERE = args.out
    os.makedirs(HERE, exist_ok=True)
    torch.set_num_threads(args.threads)
    if args.mechanism_check:
        return mechanism_check()
    if args.write_scales:
        return write_scales(args.write_scales, args.tokens)
    torch.manual_seed(0)
    t0 = time.time()

    print("E4M3 self-test:", self_test_e4m3(), flush=True)

    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE,
                                                 torch_dtype=torch.float32)
    model.eval()
    print(f"model loaded ({model.config._attn_implementation}) in {time.time() - t0:.1f}s", flush=True)

    texts = corpora()
    ntok = args.tokens
    if args.quick:
        texts = {"english_generated": texts["english_generated"]}
        ntok = 512
        args.tokens_other = 512
    results = {"tokens": {}, "gen_tokens": args.gen_tokens, "corpora": {}, "generation": {}}
    cal_english = None

    for cname, text in texts.items():
        n = ntok if cname == "english_generated" else args.tokens_other
        ids = tok(text, return_tensors="pt").input_ids[:, :n]
        assert ids.shape[1] == n, (cname, ids.shape)
        results["tokens"][cname] = n
        t1 = time.time()
        rec = QuantCache("fp32", record=True)
        ref = run_logits(model, ids, rec)
        print(f"[{cname}] fp32 ref {ids.shape[1]} tokens in {time.time() - t1:.1f}s", flush=True)
        stats = kv_stats(rec.raw)
        cal = calib_from_raw(rec.raw)
        if cal_english is None:
            cal_english = cal
        del rec
        cres = {"kv_stats": stats, "schemes": {}}
        for sc in SCHEMES:
            t1 = time.time()
            cache = QuantCache(sc, scales=scales_for(sc, cal))
            test = run_logits(model, ids, cache)
            m = compare(ref, test, ids)
            m.update(local_err(cache.err))
            cres["schemes"][sc] = m
            print(f"[{cname}] {sc} {SCHEME_DESC[sc]:28s} max {m['max_abs']:.4g} mean {m['mean_abs']:.4g} "
                  f"rel {m['rel']:.4g} agree {m['argmax_agree_pct']:.2f}% "
                  f"Krel {m['k_rel_mean']:.3g} Vrel {m['v_rel_mean']:.3g} ({time.time() - t1:.1f}s)",
                  flush=True)
            del test, cache
        results["corpora"][cname] = cres
        del ref

    # ---------------- greedy generation ----------------
    prompts = [
        ("chat_bicycle", [{"role": "user", "content": "Explain how a bicycle works, step by step."}]),
        ("chat_story", [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a message in a bottle."}]),
        ("chat_python", [{"role": "user", "content": "Write a Python function that checks whether a string is a palindrome, and explain it."}]),
        ("raw_history", "The history of the printing press begins in"),
    ]
    gen_schemes = ["a", "b", "c", "d", "e", "g"]
    for pname, p in prompts:
        if isinstance(p, list):
            s = tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        else:
            s = p
        ids = tok(s, return_tensors="pt").input_ids
        ref = greedy(model, ids, args.gen_tokens, QuantCache("fp32"))
        eos = tok.eos_token_id
        ref_eos = ref.index(eos) if eos in ref else None
        g = {"prompt": s, "ref_text": tok.decode(ref), "ref_eos_index": ref_eos, "schemes": {}}
        for sc in gen_schemes:
            out = greedy(model, ids, args.gen_tokens, QuantCache(sc, scales=scales_for(sc, cal_english)))
            same = next((i for i, (x, y) in enumerate(zip(ref, out)) if x != y), len(ref))
            g["schemes"][sc] = {"identical_prefix": same, "text": tok.decode(out)}
            print(f"[gen {pname}] {sc}: identical prefix {same}/{len(ref)} (ref EOS at {ref_eos})",
                  flush=True)
        results["generation"][pname] = g

    results["elapsed_s"] = time.time() - t0
    with open(os.path.join(HERE, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    write_md(results)
    print(f"done in {time.time() - t0:.1f}s")


@torch.no_grad()
def write_scales(path, n):
    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE, torch_dtype=torch.float32).eval()
    ids = tok(english_text(), return_tensors="pt").input_ids[:, :n]
    rec = QuantCache("fp32", record=True)
    model(input_ids=ids, past_key_values=rec, use_cache=True)
    cal = calib_from_raw(rec.raw)
    layers = sorted(cal)
    scales = {"k_scale": [float(safe_scale(cal[li]["k_amax"])) for li in layers],
              "v_scale": [float(safe_scale(cal[li]["v_amax"])) for li in layers]}
    with open(path, "w") as f:
        json.dump(scales, f, indent=1)
    print(f"{path}: {len(layers)} layers over {ids.shape[1]} tokens")


@torch.no_grad()
def mechanism_check(n=512):
    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE, torch_dtype=torch.float32).eval()
    ids = tok(english_text(), return_tensors="pt").input_ids[:, :n]
    c = QuantCache("fp32", record=True)
    model(input_ids=ids, past_key_values=c, use_cache=True)
    for name, i in (("K", 0), ("V", 1)):
        share, e_all, e_notop = [], [], []
        for li, kv in c.raw.items():
            x = kv[i]
            sq = x.pow(2)
            share.append((sq.amax(-1) / sq.sum(-1)).mean().item())
            err = (e4m3(x) - x).pow(2)
            top = x.abs() == x.abs().amax(-1, keepdim=True)
            e_all.append((err.sum() / sq.sum()).sqrt().item())
            e_notop.append(((err * ~top).sum() / sq.sum()).sqrt().item())
        L = len(share)
        print(f"{name}: mean top-1 energy share per (token,head) vector {sum(share) / L:.3f}; unit-scale rel err "
              f"{sum(e_all) / L:.4f}; same with each vector's max element exact {sum(e_notop) / L:.4f}")


def write_md(R):
    L = []
    L.append("Sequence lengths: " + ", ".join(f"{k} {v} tokens" for k, v in R["tokens"].items()) + ".\n")
    for cname, c in R["corpora"].items():
        L.append(f"### Logit error vs fp32 — {cname}\n")
        L.append("| scheme | max abs | mean abs | rel ‖Δ‖/‖ref‖ | rel / bf16 | argmax agree % | mean KL | ΔNLL | K rel err (mean/max over layers) | V rel err (mean/max) |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        gref = c["schemes"]["g"]["rel"]
        for sc, m in c["schemes"].items():
            L.append(f"| ({sc}) {SCHEME_DESC[sc]} | {m['max_abs']:.4f} | {m['mean_abs']:.5f} | {m['rel']:.3e} | "
                     f"{m['rel'] / gref:.1f}× | {m['argmax_agree_pct']:.2f} | {m['kl_mean']:.2e} | "
                     f"{m['nll'] - m['nll_ref']:+.5f} | {m['k_rel_mean']:.4f} / {m['k_rel_max']:.4f} | "
                     f"{m['v_rel_mean']:.4f} / {m['v_rel_max']:.4f} |")
        L.append(f"\n(fp32 NLL on this text: {c['schemes']['g']['nll_ref']:.4f} nats/token)\n")
    for cname, c in R["corpora"].items():
        L.append(f"### |K| and |V| post-RoPE per layer — {cname}\n")
        L.append("Columns: fraction of elements with |x| < 2^-6 (below E4M3's smallest normal at unit scale), "
                 "≤ 2^-10 (rounds to 0 at unit scale), > 448 (saturates at unit scale), and share of ‖x‖² "
                 "carried by elements < 2^-6.\n")
        L.append("| layer | K max | K median | K p99.9 | K <2^-6 | K ≤2^-10 | K >448 | K energy <2^-6 | V max | V median | V p99.9 | V <2^-6 | V ≤2^-10 | V >448 | V energy <2^-6 | K head amax | V head amax |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in c["kv_stats"]:
            k, v = r["K"], r["V"]
            L.append(f"| {r['layer']} | {k['max']:.2f} | {k['median']:.3f} | {k['p99.9']:.2f} | {100 * k['frac_lt_2^-6']:.2f}% | "
                     f"{100 * k['frac_le_2^-10(->0)']:.2f}% | {100 * k['frac_gt_448']:.2f}% | {k['energy_frac_lt_2^-6']:.1e} | "
                     f"{v['max']:.3f} | {v['median']:.4f} | {v['p99.9']:.3f} | {100 * v['frac_lt_2^-6']:.2f}% | "
                     f"{100 * v['frac_le_2^-10(->0)']:.2f}% | {100 * v['frac_gt_448']:.2f}% | {v['energy_frac_lt_2^-6']:.1e} | "
                     f"{'/'.join(f'{x:.1f}' for x in k['head_amax'])} | {'/'.join(f'{x:.2f}' for x in v['head_amax'])} |")
        L.append("")
    for cname, c in R["corpora"].items():
        L.append(f"### Local K/V fake-quant error ‖x'−x‖/‖x‖ per layer — {cname}\n")
        scs = list(c["schemes"].keys())
        L.append("| layer | " + " | ".join(f"K ({s})" for s in scs) + " | " + " | ".join(f"V ({s})" for s in scs) + " |")
        L.append("|---|" + "---|" * (2 * len(scs)))
        nl = len(c["schemes"]["a"]["k_rel_per_layer"])
        for li in range(nl):
            L.append(f"| {li} | " + " | ".join(f"{c['schemes'][s]['k_rel_per_layer'][li]:.4f}" for s in scs) + " | "
                     + " | ".join(f"{c['schemes'][s]['v_rel_per_layer'][li]:.4f}" for s in scs) + " |")
        L.append("")
    L.append("### Greedy generation (%d new tokens, EOS not stopped): identical tokens before first divergence\n" % R["gen_tokens"])
    gens = R["generation"]
    scs = list(next(iter(gens.values()))["schemes"].keys())
    L.append("| prompt | ref EOS idx | " + " | ".join(f"({s})" for s in scs) + " |")
    L.append("|---|---|" + "---|" * len(scs))
    for pname, g in gens.items():
        L.append(f"| {pname} | {g['ref_eos_index']} | " + " | ".join(str(g['schemes'][s]['identical_prefix']) for s in scs) + " |")
    L.append("")
    with open(os.path.join(HERE, "results_auto.md"), "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
