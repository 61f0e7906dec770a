#!/usr/bin/env python3
"""CPU speed on a trained GGUF model: Millipede's CPU engine beside llama.cpp's CPU path
(llama-cpp-python, a peer installed by whoever runs this; never a dependency of the project) on
the same file, the same prompts and the same thread count, in one run.

usage: cpu_gguf_bench.py --bin BIN_DIR --model MODEL.gguf [--lengths 128,512,2048]
                         [--new-tokens 128] [--repeats 3] [--threads N] [--out results.json]

For each prompt length (real English prose: the repository's documentation) it records prefill
tokens/s (the whole prompt, one pass) and decode tokens/s (greedy, --new-tokens tokens), the best
of --repeats runs for each engine, and the load average before and after each measurement.
Millipede runs `millipede-run --json` (its own prefill/decode timings, weights dequantised to
fp32 at load); llama.cpp evaluates the prompt with n_batch = the prompt length and then decodes
token by token from its quantised weights. Prints one JSON object.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from docs_prose import prose  # noqa: E402


def load():
    return [round(x, 2) for x in os.getloadavg()]


def millipede_once(bin_dir, model, ids, new_tokens, threads, tmp):
    path = os.path.join(tmp, "ids.txt")
    with open(path, "w") as f:
        f.write(" ".join(map(str, ids)))
    env = dict(os.environ, MILLIPEDE_CPU_THREADS=str(threads))
    r = subprocess.run([os.path.join(bin_dir, "millipede-run"), "--model", model,
                        "--prompt-ids", path, "--max-new-tokens", str(new_tokens),
                        "--ignore-eos", "--json"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    j = json.loads(r.stdout)
    return j["prefill_tokens_per_s"], j["decode_tokens_per_s"], j["ids"]


def llama_once(llm, ids, new_tokens):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    prefill = len(ids) / (time.perf_counter() - t0)
    out = []
    t0 = time.perf_counter()
    for _ in range(new_tokens):
        tok = llm.sample(temp=0.0)
        out.append(int(tok))
        llm.eval([tok])
    decode = new_tokens / (time.perf_counter() - t0)
    return prefill, decode, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--lengths", default="128,512,2048")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out")
    args = ap.parse_args()
    import llama_cpp  # the peer

    lengths = [int(v) for v in args.lengths.split(",")]
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=max(lengths) + args.new_tokens + 16,
                          n_batch=max(lengths), n_threads=args.threads,
                          n_threads_batch=args.threads, verbose=False)
    text_ids = llm.tokenize(prose().encode(), add_bos=False, special=False)
    result = {"model": os.path.basename(args.model), "threads": args.threads,
              "cpus": os.cpu_count(), "llama_cpp_python": llama_cpp.__version__, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n in lengths:
            ids = text_ids[:n]
            row = {"prompt_tokens": n, "new_tokens": args.new_tokens}
            for name, once in (
                    ("millipede", lambda: millipede_once(args.bin, args.model, ids,
                                                          args.new_tokens, args.threads, tmp)),
                    ("llama.cpp", lambda: llama_once(llm, ids, args.new_tokens))):
                before = load()
                runs = [once() for _ in range(args.repeats)]
                row[name] = {"prefill_tok_s": round(max(r[0] for r in runs), 1),
                             "decode_tok_s": round(max(r[1] for r in runs), 1),
                             "load_before": before, "load_after": load()}
                row[name + "_ids"] = runs[0][2][:16]
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
