#!/usr/bin/env python3
"""The constructed retrieval model end to end, with Hugging Face as the independent oracle.

1. millipede-mkmodel --preset retrieval writes the model (fp32 and bf16 weights).
2. millipede-quality runs a grid of needle / kv / chain tasks and must answer every one
   (--min-accuracy 1); its control (needle removed) must answer none. Its heatmap PNGs are
   decoded here (zlib + struct) and checked pixel by pixel at the cell centres.
3. Hugging Face `tokenizers` loads tokenizer.json and round-trips every prompt's text.
4. Hugging Face transformers loads the same files and, greedy, gives the expected answers and
   the engine's tokens for every task, in fp32 and bf16.
5. The margins: attention weight of every retrieval head on the needle, the logit gap of the
   answer over the runner-up, the local heads' sink + recent pattern, and the same needle found
   with the query 2^20 - 64 positions after it (position_ids shifted), which the CPU engine
   cannot reach in a test. (bf16 HF replays tasks up to 512 tokens: slow bf16 CPU matmuls.)

Usage: hf_retrieval_test.py BIN_DIR. Exit 0 all passed, 1 a failure, 77 (skipped) without
torch / transformers / tokenizers.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

try:
    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
    IMPORT_ERROR = None
except Exception as e:  # ImportError, or a broken install failing inside an import
    IMPORT_ERROR = e

SKIP = 77
# Retrieval heads (layer -> query heads): layer 0 is all local, then KV head 0, then KV head 1.
RETRIEVAL_HEADS = {1: range(0, 4), 2: range(4, 8)}
HEAD_DIM = 64
MIN_NEEDLE_WEIGHT = 1 - 1e-6
MIN_LOGIT_GAP = 20.0
GREEN = (26, 152, 80)


class Failure(Exception):
    pass


def run(args):
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failure(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc.stdout


def decode_png(path):
    """(width, height, rows of RGB bytes) of an 8-bit RGB PNG with filter 0 rows."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise Failure(f"{path}: not a PNG")
    at, idat, width, height = 8, b"", 0, 0
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 4:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        if zlib.crc32(body) != crc:
            raise Failure(f"{path}: bad CRC in {kind}")
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[4:14])
            if (depth, colour) != (8, 2):
                raise Failure(f"{path}: not 8-bit RGB")
        elif kind == b"IDAT":
            idat += body[4:]
        at += 12 + length
    raw = zlib.decompress(idat)
    stride = 3 * width + 1
    if len(raw) != stride * height or any(raw[y * stride] != 0 for y in range(height)):
        raise Failure(f"{path}: bad scanlines")
    return width, height, [raw[y * stride + 1:(y + 1) * stride] for y in range(height)]


def check_heatmap(path, columns, rows):
    """Layout as quality/heatmap.h: cells 48x24 after a 48-pixel left and 8-pixel top margin."""
    width, height, pixels = decode_png(path)
    want = (48 + 48 * columns + 12 + 16 + 56, 8 + 24 * rows + 24)
    if (width, height) != want:
        raise Failure(f"{path}: {width}x{height}, expected {want[0]}x{want[1]}")
    for r in range(rows):
        for c in range(columns):
            x, y = 48 + 48 * c + 24, 8 + 24 * r + 12
            got = tuple(pixels[y][3 * x:3 * x + 3])
            if got != GREEN:
                raise Failure(f"{path}: cell ({r}, {c}) is {got}, not green")


def load_tasks(out_dir):
    with open(os.path.join(out_dir, "tasks.jsonl")) as f:
        return [json.loads(line) for line in f]


def hf_model(model_dir, dtype):
    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation="eager", output_loading_info=True, torch_dtype=dtype)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise Failure(f"transformers did not load {model_dir} cleanly: {problems}")
    attn = model.model.layers[0].self_attn
    if attn.head_dim != HEAD_DIM or model.model.rotary_emb.inv_freq.numel() != HEAD_DIM // 2:
        raise Failure(f"transformers reads head_dim {attn.head_dim}, not {HEAD_DIM}")
    return model.eval()


def hf_greedy(model, prompt, steps):
    ids = list(prompt)
    with torch.no_grad():
        past, inp = None, torch.tensor([ids])
        for _ in range(steps):
            out = model(inp, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = int(out.logits[0, -1].float().argmax())
            ids.append(nxt)
            inp = torch.tensor([[nxt]])
    return ids[len(prompt):]


START = time.monotonic()


def note(text):
    print(f"[{time.monotonic() - START:6.1f} s] {text}", flush=True)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if IMPORT_ERROR is not None:
        print(f"SKIP: needs torch, transformers and tokenizers ({IMPORT_ERROR})")
        return SKIP
    transformers.logging.set_verbosity_error()
    # The test machines are small and shared: one intra-op thread avoids oversubscription.
    torch.set_num_threads(1)
    bin_dir = sys.argv[1]
    work = tempfile.mkdtemp(prefix="hf_retrieval_")
    checks = 0
    try:
        models = {}
        for dtype in ("fp32", "bf16"):
            models[dtype] = os.path.join(work, f"model_{dtype}")
            run([os.path.join(bin_dir, "millipede-mkmodel"), "--preset", "retrieval",
                 "--out", models[dtype], "--dtype", dtype])

        # 2. the engine on a grid, and its control
        out = os.path.join(work, "run")
        lengths, depths = ["64", "512", "1K"], ["0", "0.5", "1"]
        run([os.path.join(bin_dir, "millipede-quality"), "--model", models["fp32"],
             "--kv-dtype", "fp32", "--tasks", "needle,kv,chain", "--lengths", ",".join(lengths),
             "--depths", ",".join(depths), "--hops", "5", "--pairs", "12", "--out", out,
             "--min-accuracy", "1"])
        tasks = load_tasks(out)
        if len(tasks) != 27 or not all(t["correct"] for t in tasks):
            raise Failure("millipede-quality: not every task right")
        check_heatmap(os.path.join(out, "needle.png"), len(lengths), len(depths))
        check_heatmap(os.path.join(out, "kv.png"), len(lengths), len(depths))
        check_heatmap(os.path.join(out, "chain.png"), len(lengths), 5)
        checks += 4
        note("millipede-quality: 27 tasks right, heatmaps decoded")
        control = os.path.join(work, "control")
        run([os.path.join(bin_dir, "millipede-quality"), "--model", models["bf16"],
             "--tasks", "needle,kv,chain", "--lengths", "64,512", "--depths", "0,1",
             "--control", "remove-needle", "--out", control])
        if any(t["correct"] for t in load_tasks(control)):
            raise Failure("control: a task was answered without its needle")
        checks += 1
        note("control: every task wrong without its needle")

        # 3. tokenizers round trip
        tok = Tokenizer.from_file(os.path.join(models["fp32"], "tokenizer.json"))
        for t in tasks:
            text = tok.decode(t["prompt"], skip_special_tokens=False)
            if tok.encode(text, add_special_tokens=False).ids != t["prompt"]:
                raise Failure(f"tokenizers: {t['kind']} {t['context_tokens']} does not round-trip")
        bos = tasks[0]["prompt"][0]
        if tok.encode("<k3:v9> The river.<k3>").ids != [bos] + tok.encode(
                "<k3:v9> The river.<k3>", add_special_tokens=False).ids:
            raise Failure("tokenizers: the template does not put BOS first")
        checks += 1

        # 4. transformers answers as the engine does (bf16 matmuls are slow on CPUs without bf16
        # instructions, so bf16 replays the tasks up to 512 tokens)
        for dtype, torch_dtype, limit in (("fp32", torch.float32, 1 << 20),
                                          ("bf16", torch.bfloat16, 512)):
            model = hf_model(models[dtype], torch_dtype)
            for t in (t for t in tasks if t["context_tokens"] <= limit):
                got = hf_greedy(model, t["prompt"], len(t["expected"]))
                if got != t["expected"] or got != t["output"]:
                    raise Failure(f"HF {dtype} {t['kind']} {t['context_tokens']} depth "
                                  f"{t['depth']}: {got}, expected {t['expected']}, engine "
                                  f"{t['output']}")
            checks += 1
            note(f"HF {dtype}: every task answered as expected")

        # 5. margins
        model = hf_model(models["fp32"], torch.float32)
        worst_miss, worst_gap = 0.0, float("inf")
        for t in tasks:
            if t["kind"] != "needle":
                continue
            with torch.no_grad():
                o = model(torch.tensor([t["prompt"]]), output_attentions=True)
            needle = t["needle_positions"][0]
            for layer, heads in RETRIEVAL_HEADS.items():
                for h in heads:
                    miss = 1 - o.attentions[layer][0, h, -1, needle].double()
                    worst_miss = max(worst_miss, float(miss))
            if t["context_tokens"] == 1024:
                # Local heads (all of layer 0): a sink plus recent tokens, not the needle.
                for h in range(8):
                    a = o.attentions[0][0, h, -1].double()
                    sink, recent = float(a[0]), float(a[-64:].sum())
                    if sink < 0.2 or recent < 0.1 or float(a[needle]) > 0.01:
                        raise Failure(f"local head {h}: {sink:.2f} on BOS, {recent:.2f} on the "
                                      f"last 64 tokens, {float(a[needle]):.2e} on the needle")
            logits = o.logits[0, -1]
            want = t["expected"][0]
            others = torch.cat([logits[:want], logits[want + 1:]])
            worst_gap = min(worst_gap, float(logits[want] - others.max()))
        note(f"attention off the needle, worst retrieval head: 1 - w = {worst_miss:.1e}; "
              f"logit gap (worst): {worst_gap:.3f}")
        if 1 - worst_miss < MIN_NEEDLE_WEIGHT or worst_gap < MIN_LOGIT_GAP:
            raise Failure("margins below the construction's")
        checks += 1
        # The query ~1M positions after the needle: RoPE must not break the match.
        t = next(t for t in tasks if t["kind"] == "needle" and t["context_tokens"] == 64
                 and t["depth"] == 0.5)
        n = len(t["prompt"])
        needle = t["needle_positions"][0]
        shift = (1 << 20) - n
        for dtype, torch_dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            model = hf_model(models[dtype], torch_dtype)
            pos = [i if i <= needle else i + shift for i in range(n)]
            with torch.no_grad():
                logits = model(torch.tensor([t["prompt"]]),
                               position_ids=torch.tensor([pos])).logits[0, -1].float()
            want = t["expected"][0]
            gap = float(logits[want] - torch.cat([logits[:want], logits[want + 1:]]).max())
            note(f"{dtype}: query at position {pos[-1]}, needle at {needle}: logit gap {gap:.3f}")
            if int(logits.argmax()) != want or gap < MIN_LOGIT_GAP:
                raise Failure(f"{dtype}: the needle is lost 2^20 positions away")
            checks += 1
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"PASS: {checks} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
