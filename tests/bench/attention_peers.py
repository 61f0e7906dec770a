#!/usr/bin/env python3
"""One layer's attention in Millipede beside PyTorch SDPA's flash and cuDNN backends, same run.

Shapes: 32 query heads, 8 KV heads, head_dim 128, bf16 K/V, causal prefill of S tokens, and
single-token decode over N cached tokens (no mask). Millipede's figures come from
millipede-bench-attention (CUDA events); the peers are timed here with CUDA events. Prints one
JSON line per measurement and a Markdown table at the end.

With --flashinfer, prefill is also timed with FlashInfer's single-request prefill
(single_prefill_with_kv_cache, native GQA, Q/K/V as [tokens, heads, head_dim]) on the backend
--flashinfer-backend names (fa3: its FlashAttention-3 Hopper kernels). FlashInfer is not
installed: the archive that cluster/peer-bundle.sh writes is unpacked under --work, where its
JIT module is built on first use (nvcc needed); the build time and the peer's largest difference
from SDPA on a small problem are reported with its first row.

usage: attention_peers.py BIN_DIR [--seq 32768,131072,...] [--ctx 32768,...] [--iters N]
                          [--flashinfer ARCHIVE [--work DIR] [--flashinfer-backend fa3|fa2]]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def cuda_time_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters


def sdpa_call(backend, q, k, v, causal):
    """SDPA with native GQA where the backend takes it, else with K/V expanded to the q heads."""
    def native():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    try:
        native()
        return native, "gqa"
    except RuntimeError:
        group = q.shape[1] // k.shape[1]
        ke = k.repeat_interleave(group, dim=1)
        ve = v.repeat_interleave(group, dim=1)

        def expanded():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)
        expanded()
        return expanded, "expanded kv"


def peers_prefill(seq, warmup, iters):
    out = []
    q = torch.randn(1, Q_HEADS, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, KV_HEADS, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, KV_HEADS, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    flops = 4.0 * seq * seq / 2 * Q_HEADS * HEAD_DIM
    for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            fn, how = sdpa_call(backend, q, k, v, True)
            ms = cuda_time_ms(fn, warmup, iters)
            out.append({"kind": "prefill", "impl": name, "seq": seq, "ms": ms,
                        "tflops": flops / (ms * 1e-3) / 1e12, "gqa": how})
        except RuntimeError as e:
            out.append({"kind": "prefill", "impl": name, "seq": seq, "error": str(e)[:200]})
        torch.cuda.empty_cache()
    return out


def load_flashinfer(archive, work):
    """FlashInfer unpacked from cluster/peer-bundle.sh's archive (sparse_peers.py's loader)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sparse_peers
    Path(work).mkdir(parents=True, exist_ok=True)
    ninja = Path(archive).parent / "site"  # the bundle's ninja, which the JIT build runs
    if ninja.is_dir():
        sparse_peers.add_site(ninja)
    return sparse_peers.load_flashinfer(Path(archive), Path(work))


def flashinfer_check(fi, backend):
    """Builds (first use) FlashInfer's prefill module on a small causal GQA problem and compares
    it with SDPA's math backend; returns (seconds, max |difference|)."""
    torch.manual_seed(0)
    q = torch.randn(1000, Q_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1000, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1000, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    start = time.perf_counter()
    ours = fi.single_prefill_with_kv_cache(q, k, v, causal=True, backend=backend)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    group = Q_HEADS // KV_HEADS
    qh, kh, vh = (x.transpose(0, 1).unsqueeze(0).float() for x in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(qh, kh.repeat_interleave(group, dim=1),
                                             vh.repeat_interleave(group, dim=1), is_causal=True)
    diff = (ours.float() - ref[0].transpose(0, 1)).abs().max().item()
    return seconds, diff


def flashinfer_prefill(fi, backend, seq, warmup, iters, first):
    flops = 4.0 * seq * seq / 2 * Q_HEADS * HEAD_DIM
    row = {"kind": "prefill", "impl": f"flashinfer-{backend}", "seq": seq}
    try:
        if first:
            row["jit_s"], row["max_diff_vs_sdpa_math"] = flashinfer_check(fi, backend)
        q = torch.randn(seq, Q_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(seq, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(seq, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        ms = cuda_time_ms(
            lambda: fi.single_prefill_with_kv_cache(q, k, v, causal=True, backend=backend),
            warmup, iters)
        row.update({"ms": ms, "tflops": flops / (ms * 1e-3) / 1e12})
    except Exception as e:  # a peer that fails is reported, not a crash
        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    torch.cuda.empty_cache()
    return [row]


def peers_decode(ctx, warmup, iters):
    out = []
    q = torch.randn(1, Q_HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    kv_bytes = 2.0 * ctx * KV_HEADS * HEAD_DIM * 2
    for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            fn, how = sdpa_call(backend, q, k, v, False)
            ms = cuda_time_ms(fn, warmup, iters)
            # With expanded K/V the peer reads group x more bytes; report the model's KV bytes.
            out.append({"kind": "decode", "impl": name, "ctx": ctx, "us": ms * 1e3,
                        "gb_per_s": kv_bytes / (ms * 1e-3) / 1e9, "gqa": how})
        except RuntimeError as e:
            out.append({"kind": "decode", "impl": name, "ctx": ctx, "error": str(e)[:200]})
        torch.cuda.empty_cache()
    return out


def millipede(bin_dir, seq, ctx, warmup, iters, kernel="auto"):
    cmd = [f"{bin_dir}/millipede-bench-attention", "--seq", str(seq), "--ctx", str(ctx),
           "--warmup", str(warmup), "--iters", str(iters), "--kernel", kernel]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    out = []
    if seq:
        p = r["prefill_causal"]
        impl = "millipede" if kernel == "auto" else f"millipede-{kernel}"
        out.append({"kind": "prefill", "impl": impl, "seq": seq, "ms": p["ms"],
                    "tflops": p["tflops"], "cmd": " ".join(cmd[1:])})
        for key in ("operands_ms", "kernel_tflops", "max_error_vs_bf16", "rms_error_vs_bf16"):
            if key in p:
                out[-1][key] = p[key]
    if ctx:
        d = r["decode"]["split"]
        out.append({"kind": "decode", "impl": "millipede", "ctx": ctx, "us": d["us"],
                    "gb_per_s": d["gb_per_s"], "cmd": " ".join(cmd[1:])})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("--seq", default="32768,131072,524288,1048576")
    ap.add_argument("--ctx", default="32768,131072,524288,1048576")
    ap.add_argument("--iters", type=int, default=3, help="timed runs for S <= 128K")
    ap.add_argument("--big-iters", type=int, default=1, help="timed runs for S > 128K")
    ap.add_argument("--fp8", action="store_true",
                    help="also Millipede's FP8 attention (--kernel fp8) at each prefill length")
    ap.add_argument("--flashinfer", metavar="ARCHIVE",
                    help="also FlashInfer's prefill: cluster/peer-bundle.sh's flashinfer.tar.xz")
    ap.add_argument("--flashinfer-backend", default="fa3", choices=("fa3", "fa2"))
    ap.add_argument("--work", default=os.path.join(".gpu", "peers-work"),
                    help="where FlashInfer is unpacked and its module is built")
    args = ap.parse_args()
    fi = None
    if args.flashinfer:
        fi = load_flashinfer(args.flashinfer, args.work)
    rows = []
    for i, seq in enumerate([int(s) for s in args.seq.split(",") if s]):
        warmup, iters = (1, args.iters) if seq <= 131072 else (0, args.big_iters)
        if warmup == 0:  # one small untimed call loads the kernels and builds cuDNN's plan
            peers_prefill(4096, 0, 1)
        ours = millipede(args.bin_dir, seq, 0, warmup, iters)
        if args.fp8:
            ours += millipede(args.bin_dir, seq, 0, warmup, iters, "fp8")
        theirs = peers_prefill(seq, warmup, iters)
        if fi is not None:
            theirs += flashinfer_prefill(fi, args.flashinfer_backend, seq, warmup, iters, i == 0)
        for r in ours + theirs:
            print(json.dumps(r), flush=True)
            rows.append(r)
    for ctx in [int(c) for c in args.ctx.split(",") if c]:
        for r in millipede(args.bin_dir, 0, ctx, 3, 20) + peers_decode(ctx, 3, 20):
            print(json.dumps(r), flush=True)
            rows.append(r)
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print("| kind | size | impl | time | rate |\n| --- | --- | --- | --- | --- |")
    for r in rows:
        size = r.get("seq", r.get("ctx"))
        if "error" in r:
            print(f"| {r['kind']} | {size} | {r['impl']} | error | {r['error'][:60]} |")
        elif r["kind"] == "prefill":
            extra = ""
            if "jit_s" in r:
                extra = (f" (module built in {r['jit_s']:.0f} s; max |diff| vs SDPA math "
                         f"{r['max_diff_vs_sdpa_math']:.1e} at 1000 tokens)")
            if "kernel_tflops" in r:
                extra = (f" (kernel {r['kernel_tflops']:.0f} after {r['operands_ms']:.2f} ms of "
                         f"operands; vs bf16 max {r['max_error_vs_bf16']:.2e}, "
                         f"RMS {r['rms_error_vs_bf16']:.2e})")
            print(f"| prefill | {size} | {r['impl']} | {r['ms']:.2f} ms | {r['tflops']:.0f} TFLOP/s{extra} |")
        else:
            print(f"| decode | {size} | {r['impl']} | {r['us']:.1f} us | {r['gb_per_s']:.0f} GB/s |")


if __name__ == "__main__":
    sys.exit(main())
