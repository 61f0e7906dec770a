#!/usr/bin/env python3
"""cluster/real-attention.py end to end on the CPU, small: SmolLM2-135M-Instruct (GGUF) at 256
and 512 tokens with dense, MInference-style vertical-slash and DuoAttention-style policies, a
few generated tokens. Checks that the outputs are well-formed and that the numbers can be
trusted where they are known:

- an explicit all-dense policy agrees with the reference (no --policy) on every token, needle
  answers included (run apart, so this can fail);
- the measured prefill density is 1 for dense and below 1 for vertical-slash (the policy was
  applied), and `show`'s expected densities are 1 and below 1;
- every needle prompt fits its length and is within a sentence of it, the needle sits near its
  depth, and a prompt's ids decode back to its text;
- the PNG decodes (signature, chunk CRCs, IHDR, inflated size), results.md has its tables;
- where jinja2 is importable, the script's ChatML rendering equals the model's own template
  rendered by Jinja.

The model file must be there (CI fetches it with cluster/fetch-smollm2.sh): without it the test
fails rather than skips.
  real_attention_smoke_test.py BIN_DIR MODEL.gguf [WORK_DIR]
"""
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "cluster", "real-attention.py")
LENGTHS = [256, 512]
DEPTHS = [0.0, 0.5, 1.0]
NEEDLE_TOKENS = 16
POLICIES = ["dense", "minference", "duo"]

failures = []


def expect(condition, what):
    print(("ok: " if condition else "FAIL: ") + what, flush=True)
    if not condition:
        failures.append(what)


def check_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return "bad signature"
    pos, chunks, idat = 8, [], b""
    while pos < len(data):
        length, = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        crc, = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            return f"bad CRC in {kind!r}"
        chunks.append(kind)
        if kind == b"IDAT":
            idat += body
        pos += 12 + length
    if chunks[0] != b"IHDR" or chunks[-1] != b"IEND":
        return f"chunks {chunks}"
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    raw = zlib.decompress(idat)
    if (depth, colour) != (8, 2) or len(raw) != height * (1 + 3 * width):
        return f"{width}x{height} depth {depth} colour {colour}, {len(raw)} bytes inflated"
    if any(raw[r * (1 + 3 * width)] != 0 for r in range(height)):
        return "a row filter other than 0"
    return None


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    bin_dir, model = sys.argv[1], sys.argv[2]
    if not os.path.exists(model):
        sys.exit(f"{model} is not there (cluster/fetch-smollm2.sh fetches it)")
    work = sys.argv[3] if len(sys.argv) == 4 else tempfile.mkdtemp(prefix="real-attention-")
    out = os.path.join(work, "out")
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, SCRIPT, "--bin", bin_dir, "--model", model, "--backend", "cpu",
               "--out", out, "--lengths", ",".join(map(str, LENGTHS)),
               "--depths", ",".join(map(str, DEPTHS)), "--policies", ",".join(POLICIES),
               "--agreement-prompts", "1", "--agreement-tokens", "8",
               "--needle-tokens", str(NEEDLE_TOKENS), "--jobs", "2"]
    print(" ".join(command), flush=True)
    r = subprocess.run(command)
    expect(r.returncode == 0, f"real-attention.py exits 0 (got {r.returncode})")
    if r.returncode != 0:
        sys.exit(1)

    results = json.load(open(os.path.join(out, "results.json")))
    expect(results["errors"] == [], "no errors recorded")
    expect(results["lengths"] == LENGTHS and results["depths"] == DEPTHS, "lengths and depths")
    expect(sorted(results["policies"]) == sorted(POLICIES), "every policy written and shown")
    expect(results["corpus"]["decode_round_trip"], "prompt ids decode back to the prompt text")
    expect(results["corpus"]["tokens"] > 20000, "the corpus has real size")

    agreement = results["agreement"]["by_policy"]
    for name in ["reference"] + POLICIES:
        expect(name in agreement and agreement[name]["per_prompt"][0] is not None,
               f"agreement measured for {name}")
    dense = agreement["dense"]
    expect(dense["prefix_share"] == 1.0 and dense["equal_share"] == 1.0,
           "dense policy vs reference: 100% greedy agreement "
           f"(prefix {dense['prefix_share']}, equal {dense['equal_share']})")
    expect(dense["per_prompt"][0]["prefix"] == 8, "8 tokens compared")
    expect(dense["prefill_density"] == 1.0, "dense runs measure prefill density 1")
    vs = agreement["minference"]["prefill_density"]
    expect(vs is not None and 0 < vs < 1, f"vertical-slash measures prefill density < 1 ({vs})")
    for name in POLICIES:
        for length in LENGTHS:
            d = results["policies"][name]["expected_density"][str(length)]
            if name == "minference":
                expect(d is not None and 0 < d < 1, f"show: {name} at {length} below 1 ({d})")
            elif name == "dense":
                expect(d == 1.0, f"show: dense at {length} is 1 ({d})")
    expect("streaming-head 45" in results["policies"]["duo"]["summary"],
           "duo: 45 of 90 KV heads stream (" + str(results["policies"]["duo"]["summary"]) + ")")

    needle = results["needle"]["by_policy"]
    for name in ["reference"] + POLICIES:
        cells = needle[name]["cells"]
        expect(len(cells) == len(LENGTHS) * len(DEPTHS) and
               all("correct" in c for c in cells), f"{name}: every needle cell answered")
    ref, dense_cells = needle["reference"]["cells"], needle["dense"]["cells"]
    expect(all(a["ids"] == b["ids"] for a, b in zip(ref, dense_cells)),
           "dense policy gives the reference's needle answers token for token")
    for c in ref:
        budget = c["length"] - NEEDLE_TOKENS
        expect(budget - 80 < c["prompt_tokens"] <= budget,
               f"needle prompt at {c['length']}, depth {c['depth']}: {c['prompt_tokens']} "
               f"tokens, within a sentence of {budget}")
        if c["length"] >= 512:  # 256 tokens hold only two or three of the sentences
            expect(abs(c["placed"] - c["depth"]) <= 0.3,
                   f"needle at {c['length']}, depth {c['depth']} placed at {c['placed']}")

    spec = importlib.util.spec_from_file_location("real_attention", SCRIPT)
    ra = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ra)
    meta = ra.read_gguf_metadata(model)
    chat = ra.ChatML(meta.get("tokenizer.chat_template"))
    try:
        import jinja2
        template = jinja2.Environment().from_string(meta["tokenizer.chat_template"])
        rendered = template.render(messages=[{"role": "user", "content": "Hi there."}],
                                   add_generation_prompt=True)
        expect(rendered == chat.render("Hi there."),
               "ChatML rendering equals the model's template rendered by Jinja")
    except ImportError:
        print("note: no jinja2, the template rendering is not compared")

    md = open(os.path.join(out, "results.md"), encoding="utf-8").read()
    for heading in ("## Policies", "## Greedy agreement", "## Needle in a haystack"):
        expect(heading in md, f"results.md has {heading!r}")
    problem = check_png(os.path.join(out, "needle.png"))
    expect(problem is None, f"needle.png decodes ({problem or 'ok'})")

    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
