"""The prefix cache through the service: time to first token of a follow-up question about a
long document (about 100 new tokens after it) beside the document's cold prefill, with the
follow-up taking the cached KV over (the usual case), copying it (the entry pinned, so that it
stays: it shares the entry's blocks), with --concurrent N that many questions on the pinned
document at once, and with the cache turned off for the request (`--no-cache`: the same prompt prefilled
whole, in the same call); and ten questions about one document.

With --tier host|disk: the follow-up from the tier below the KV memory. The workers' KV budget
(--worker-args "--kv-budget-mb ...") must hold one document but not two: a second document
pushes the first one's entry down (to host memory with --kv-cache-host-mb, to disk with
--kv-cache-dir and no host tier); once it is there (for disk: its file complete, synced and out of
the page cache) and the second document's entry dropped, the follow-up's TTFT is its KV read back
(and checked) and copied in. For disk, the same file is then read with dd (O_DIRECT) for the
disk's raw sequential rate beside it. With --promote (disk, and a host tier of one document:
--kv-cache-host-mb): a third document pushes the first one from host memory to disk, the other two
entries are dropped, and the follow-up's hit moves the entry up to the host tier (read back in the
background) before it starts. With --background-output N: one job of a 1024-token prompt and N
output tokens (millipede-loadgen) decodes while the follow-up starts; its inter-token latencies
show whether the read held the other jobs' steps up.

One coordinator and one or more CUDA workers under mpirun, random weights (`--random-weights`),
ids prompts; every figure is the client's TTFT (submit to first token, as the service reports it
in the job's record). Writes one JSON object per document length.

usage: prefix_cache_bench.py --bin DIR --model DIR --lengths 131072,262144 [--workers N]
           [--questions 10] [--skip-copy] [--skip-uncached] [--concurrent N] [--json OUT]
           [--coordinator-args "..."] [--worker-args "..."]
           [--tier host|disk --cache-dir DIR [--promote] [--background-output N]]
"""

import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import threading
import time

ALLOW = ["--allow-run-as-root", "--oversubscribe"]


def start_service(args):
    coord = [os.path.join(args.bin, "millipede-coordinator"), "--model", args.model,
             "--rpc", f"127.0.0.1:{args.port}", "--metrics", "127.0.0.1:0", "--http", "off",
             *shlex.split(args.coordinator_args)]
    worker = [os.path.join(args.bin, "millipede-worker"), "--model", args.model,
              "--random-weights", "--backend", "cuda", *shlex.split(args.worker_args)]
    cmd = ["mpirun", *ALLOW, "--bind-to", "none", "-np", "1", *coord, ":", "-np",
           str(args.workers), *worker]
    log = open(os.path.join(args.work, "service.log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the service exited ({proc.returncode}); see {log.name}")
        r = client(args, "health")
        if r.returncode == 0:
            return proc
        time.sleep(2)
    proc.kill()
    sys.exit("the service did not come up")


def client(args, *argv):
    return subprocess.run([os.path.join(args.bin, "millipede"), "--server",
                           f"127.0.0.1:{args.port}", *argv], capture_output=True, text=True)


def submit(args, ids, *extra, name="prompt"):
    path = os.path.join(args.work, name + ".ids")
    with open(path, "w") as f:
        f.write(" ".join(map(str, ids)))
    t0 = time.time()
    r = client(args, "submit", "--ids", "--prompt-file", path, "--max-tokens",
               str(args.max_tokens), "--ignore-eos", "--json", "--no-progress", *extra)
    wall = time.time() - t0
    if r.returncode != 0:
        sys.exit(f"submit failed: {r.stderr.strip()}")
    out = json.loads(r.stdout)
    out["client_wall_s"] = wall
    # Progress as it comes: a run cut short by a time limit still shows what it measured.
    print(f"{out['prompt_tokens']} prompt tokens: TTFT {out['ttft_s']:.3f} s, "
          f"{out['cached_tokens']} cached (client {wall:.1f} s)", file=sys.stderr, flush=True)
    return out


def ids(rng, n, vocab):
    return [rng.randrange(16, vocab) for _ in range(n)]


def one_length(args, n, rng):
    doc = ids(rng, n, args.vocab)
    question = lambda: ids(rng, args.new_tokens, args.vocab)  # noqa: E731
    row = {"document_tokens": n, "new_tokens": args.new_tokens, "workers": args.workers}
    cold = submit(args, doc + question())
    row["cold_ttft_s"] = cold["ttft_s"]
    take = submit(args, doc + question())
    row["take_ttft_s"], row["take_cached_tokens"] = take["ttft_s"], take["cached_tokens"]
    if not args.skip_copy:
        # Pinned: the next follow-ups copy it (a pinned entry stays in the cache).
        pinned = submit(args, doc + question(), "--pin")
        row["pinned_entry"] = pinned["cache_entry"]
        copy = submit(args, doc + question())
        row["copy_ttft_s"], row["copy_cached_tokens"] = copy["ttft_s"], copy["cached_tokens"]
        if args.concurrent > 0:
            concurrent(args, doc, question, row)
        client(args, "cache", "drop", str(row.pop("pinned_entry")))
    if not args.skip_uncached:
        uncached = submit(args, doc + question(), "--no-cache")
        row["uncached_ttft_s"] = uncached["ttft_s"]
    if args.questions > 0:
        t0 = time.time()
        ttfts = [submit(args, doc + question())["ttft_s"] for _ in range(args.questions)]
        row["questions"] = args.questions
        row["questions_wall_s"] = time.time() - t0
        row["questions_ttft_s"] = ttfts
    return row


def concurrent(args, doc, question, row):
    """N questions on the pinned document submitted at once: each maps the entry's blocks."""
    prompts = [doc + question() for _ in range(args.concurrent)]
    out = [None] * len(prompts)

    def ask(i):
        try:
            out[i] = submit(args, prompts[i], name=f"q{i}")
        except SystemExit as e:  # a failed submit: its message, not the thread's silent end
            out[i] = {"error": str(e), "ttft_s": None, "cached_tokens": None}

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    row["concurrent"] = len(prompts)
    row["concurrent_wall_s"] = time.time() - t0
    row["concurrent_ttft_s"] = [o["ttft_s"] for o in out]
    row["concurrent_cached_tokens"] = [o["cached_tokens"] for o in out]
    errors = [o["error"] for o in out if "error" in o]
    if errors:
        row["concurrent_errors"] = errors


def wait_for_tier(args, entry, tier, timeout=900):
    """Seconds until `entry` is listed in `tier` (and, for disk, every worker's file exists)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        listed = {e["id"]: e for e in json.loads(client(args, "cache", "list").stdout or "[]")}
        if entry in listed and listed[entry]["tier"] == tier:
            if tier != "disk" or all(os.path.exists(file_of(args, entry, r))
                                     for r in range(1, args.workers + 1)):
                return time.time() - t0
        time.sleep(0.5)
    sys.exit(f"entry {entry} never reached the {tier} tier")


def file_of(args, entry, rank):
    return os.path.join(args.cache_dir, f"rank-{rank}", f"{entry}.mkv")


def raw_read(path):
    """Seconds dd takes to read `path` with O_DIRECT (the disk's sequential rate, no cache)."""
    t0 = time.time()
    r = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=64M", "iflag=direct"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"dd failed: {r.stderr}")
    return time.time() - t0


def background_decode(args):
    """Starts one job of a 1024-token prompt and args.background_output tokens; the loadgen's
    process (its report goes to background.json)."""
    out = os.path.join(args.work, "background.json")
    cmd = [os.path.join(args.bin, "millipede-loadgen"), "--rpc", f"127.0.0.1:{args.port}",
           "--num-requests", "1", "--prompt-len", "1024", "--output-len",
           str(args.background_output), "--json", out, "--quiet"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), out


def tier_length(args, n, rng):
    doc = ids(rng, n, args.vocab)
    question = lambda: ids(rng, args.new_tokens, args.vocab)  # noqa: E731
    row = {"document_tokens": n, "new_tokens": args.new_tokens, "workers": args.workers,
           "tier": args.tier, "promote": args.promote}
    cold = submit(args, doc + question())
    row["cold_ttft_s"] = cold["ttft_s"]
    others = [submit(args, ids(rng, n, args.vocab) + question())]
    # Its TTFT includes moving the first document's entry down (saved to host memory; for disk,
    # saved there and queued for the writer).
    row["push_ttft_s"] = others[0]["ttft_s"]
    if args.promote:
        # The first entry went to host memory; a third document pushes the second there, which
        # moves the first one on to disk.
        others.append(submit(args, ids(rng, n, args.vocab) + question()))
    row["moved_after_s"] = wait_for_tier(args, cold["cache_entry"], args.tier)
    for other in others:
        client(args, "cache", "drop", str(other["cache_entry"]))
    if args.tier == "disk":
        # Read with O_DIRECT before the follow-up (which may move the entry up and remove it):
        # the page cache is left as it was.
        path = file_of(args, cold["cache_entry"], 1)
        row["file_bytes_per_rank"] = os.path.getsize(path)
        row["dd_direct_s"] = raw_read(path)
        row["dd_direct_gbps"] = row["file_bytes_per_rank"] / row["dd_direct_s"] / 1e9
    background = None
    if args.background_output > 0:
        background, report = background_decode(args)
        time.sleep(5)  # in its decode
    follow = submit(args, doc + question())
    row["follow_ttft_s"], row["follow_cached_tokens"] = follow["ttft_s"], follow["cached_tokens"]
    if background is not None:
        _, err = background.communicate(timeout=600)
        if background.returncode != 0:
            sys.exit(f"the background job failed: {err}")
        with open(report) as f:
            itl = json.load(f)["summary"]["itl_s"]
        row["background_itl_p50_s"], row["background_itl_max_s"] = itl["p50"], itl["max"]
    listed = {e["id"]: e["tier"] for e in json.loads(client(args, "cache", "list").stdout or "[]")}
    row["entry_tier_after"] = listed.get(cold["cache_entry"], "gone")
    if args.tier == "disk":
        row["follow_gbps"] = row["file_bytes_per_rank"] / row["follow_ttft_s"] / 1e9
    for entry in (cold["cache_entry"], follow["cache_entry"]):
        client(args, "cache", "drop", str(entry))
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", default="/tmp/prefix_cache_bench")
    ap.add_argument("--lengths", default="131072")
    ap.add_argument("--new-tokens", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--port", type=int, default=7731)
    ap.add_argument("--coordinator-args", default="--max-step-tokens 16384")
    ap.add_argument("--worker-args", default="")
    ap.add_argument("--skip-copy", action="store_true",
                    help="no pinned entry and copying follow-up (a copy needs the document's KV "
                    "twice)")
    ap.add_argument("--skip-uncached", action="store_true",
                    help="no --no-cache run (the cold run is the same prefill)")
    ap.add_argument("--tier", choices=["host", "disk"],
                    help="the follow-up from this tier (see the module's doc)")
    ap.add_argument("--cache-dir", help="the workers' --kv-cache-dir (for --tier disk)")
    ap.add_argument("--promote", action="store_true",
                    help="with --tier disk and a host tier: the hit moves the entry up first")
    ap.add_argument("--background-output", type=int, default=0,
                    help="a job decoding this many tokens while the follow-up starts")
    ap.add_argument("--concurrent", type=int, default=0,
                    help="N questions on the pinned document at once (sharing its blocks)")
    ap.add_argument("--json")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    proc = start_service(args)
    rows = []
    try:
        rng = random.Random(7)
        for n in map(int, args.lengths.split(",")):
            row = tier_length(args, n, rng) if args.tier else one_length(args, n, rng)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
