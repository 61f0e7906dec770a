"""millipede-loadgen against the CPU service (imported by service_test.py):
  loadgen  24 requests of mixed lengths at a high rate, at most 4 in flight, a quarter of them
           cancelled (RPC) or disconnected (HTTP) mid-way, over both APIs; every request ends as
           planned (none failed), the service ends every job, and afterwards the workers hold no
           KV and no job runs or waits. Then questions about two shared documents, one at a
           time: each question after the first about its document reuses the document's KV
           (cached_tokens in the report), fresh prompts reuse nothing; with --warm-documents
           every question about a document does. No timing is asserted.
  loadgen_sweep  --sweep-rates over --policies (RPC): every policy at every rate, in order, each
           run's requests ended as planned under a valid policy; a policy the service refuses
           fails every request of its runs (so each run's requests carry their policy), and the
           sweep exits 2; each policy's best run is reported; decode batch sizes are counted
           per decode strategy; each run draws its own prompts (no prefix-cache hit).
  itl_target  an inter-token latency target no step can meet (--itl-target-ms 0.001): every
           request still finishes (a step's first prefill chunk always progresses), and every
           step that decoded tokens counts as a miss.
"""

import json
import os
import subprocess
import time

from service_harness import Service, check

REQUESTS = 24
CANCELLED = 6  # 25%
MAX_CONCURRENCY = 4


def run_loadgen(svc, api, address, out, extra=()):
    cmd = [os.path.join(svc.bin_dir, "millipede-loadgen"), f"--{api}", address,
           "--num-requests", str(REQUESTS), "--rate", "100", "--seed", "11",
           "--mix", "3:16:64,2:300:48,1:1500:16", "--cancel-fraction", "0.25",
           "--request-timeout-s", "60", "--max-concurrency", str(MAX_CONCURRENCY), "--json", out,
           "--metrics-url", svc.metrics_url, "--wait-idle-s", "10", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    check(r.returncode == 0, f"loadgen over {api}: rc={r.returncode}\n{r.stdout}\n{r.stderr}")
    check("TTFT" in r.stdout and "ok " in r.stdout, f"no table on stdout: {r.stdout}")
    with open(out) as f:
        return json.load(f)


def check_requests(report, api, total):
    s = report["summary"]
    check(s["requests"] == total and s["failed"] == 0,
          f"{api}: {s['failed']} failed: {s['failures']} {s['failure_examples']}")
    check(s["ok"] + s["cancelled"] == total, f"{api}: counts {s}")
    planned = [r for r in report["requests"] if "cancel_after_tokens" in r]
    check(len(planned) == CANCELLED, f"{api}: {len(planned)} cancels planned")
    check(s["cancelled"] + s["cancel_too_late"] == CANCELLED, f"{api}: cancels {s}")
    # A cancel may race the last tokens of its job, but not every one of them.
    check(s["cancelled"] >= 1, f"{api}: no cancel took effect: {s}")
    for r in report["requests"]:
        if "cancel_after_tokens" in r:
            check(r["outcome"] in ("cancelled", "ok"), f"{api}: {r}")
        else:
            check(r["outcome"] == "ok" and r["output_tokens"] == r["requested_output_tokens"],
                  f"{api}: a request that was not cancelled did not run to its length: {r}")
    check(s["ttft_s"]["count"] == s["ok"] and s["e2e_s"]["count"] == s["ok"],
          f"{api}: latencies not counted for every finished request: {s}")
    # The arrivals (100/s) outpace the CPU service, so the limit is reached.
    check(max_in_flight(report) == MAX_CONCURRENCY,
          f"{api}: {max_in_flight(report)} requests in flight at most, the limit is "
          f"{MAX_CONCURRENCY}")
    m = report["metrics"]
    check(m["idle"] and m["kv_bytes_total"] == 0 and m["requests_running"] == 0,
          f"{api}: the service did not return to idle: {m}")


def max_in_flight(report):
    """The most requests in flight at once, from their send and end times."""
    events = sorted([(r["start_s"], 1) for r in report["requests"]] +
                    [(r["start_s"] + r["e2e_s"], -1) for r in report["requests"]])
    most = now = 0
    for _, step in events:  # at a tie the end (-1) sorts first
        now += step
        most = max(most, now)
    return most


def finished(svc):
    """millipede_request_finished_total by reason."""
    return {reason: svc.metric("millipede_request_finished_total", f'reason="{reason}"')
            for reason in ("stop", "length", "cancelled", "error")}


def wait_idle(svc, api, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        kv = svc.kv_bytes()
        running = svc.metric("millipede_requests_running")
        if kv == [0, 0] and running == 0 and svc.metric("millipede_kv_cache_bytes") == 0:
            return
        time.sleep(0.1)
    check(False, f"{api}: KV {svc.kv_bytes()} and running jobs "
                 f"{svc.metric('millipede_requests_running')} did not return to 0")


def check_documents(svc, out):
    """--documents: 12 requests one at a time, about 80% of them about one of two documents of
    256 tokens (16 whole blocks of the prefix cache) before their own 20."""
    cmd = [os.path.join(svc.bin_dir, "millipede-loadgen"), "--rpc", svc.server,
           "--num-requests", "12", "--rate", "inf", "--seed", "5", "--documents", "2:256",
           "--prompt-len", "20", "--output-len", "4", "--max-concurrency", "1", "--json", out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    check(r.returncode == 0, f"loadgen --documents: rc={r.returncode}\n{r.stdout}\n{r.stderr}")
    check("questions about documents" in r.stdout, f"no documents table: {r.stdout}")
    with open(out) as f:
        report = json.load(f)
    seen, repeats = set(), 0
    for q in report["requests"]:
        check(q["outcome"] == "ok", f"documents: {q}")
        doc = q.get("document")
        if doc is None:
            check(q["prompt_tokens"] == 20 and q["cached_tokens"] == 0, f"fresh prompt: {q}")
        elif doc in seen:
            repeats += 1
            check(q["prompt_tokens"] == 276 and q["cached_tokens"] == 256,
                  f"a question about document {doc} did not reuse it: {q}")
        else:
            seen.add(doc)
    check(repeats >= 1 and report["about_documents"]["cached_tokens"] == 256 * repeats,
          f"documents: {repeats} repeated questions, {report['about_documents']}")
    # Warmed: one question about each document first (its own ids), then every question of the
    # load about a document finds it cached, the first included.
    warmed = [("6" if a == "5" and cmd[i - 1] == "--seed" else a) for i, a in enumerate(cmd)]
    r = subprocess.run(warmed + ["--warm-documents"], capture_output=True, text=True, timeout=180)
    check(r.returncode == 0, f"loadgen --warm-documents: rc={r.returncode}\n{r.stdout}\n{r.stderr}")
    with open(out) as f:
        report = json.load(f)
    warm = report["warm_up"]
    check(len(warm) == 2 and sorted(w["document"] for w in warm) == [0, 1] and
          all(w["outcome"] == "ok" for w in warm), f"warm-up: {warm}")
    about = [q for q in report["requests"] if "document" in q]
    check(about and all(q["cached_tokens"] == 256 for q in about),
          f"warmed: a question about a document missed: {about}")


def scenario_loadgen(bin_dir, model):
    work = os.path.dirname(model)
    svc = Service(bin_dir, model, http=True)
    try:
        vocab = str(json.loads(svc.client("models").out)["vocab_size"])
        # RPC, with a long prompt placed first; the vocabulary comes from the model's info.
        before = finished(svc)
        report = run_loadgen(svc, "rpc", svc.server, os.path.join(work, "loadgen-rpc.json"),
                             ["--place", "0:1800:8"])
        check_requests(report, "rpc", REQUESTS + 1)
        check(len(report["placed"]) == 1 and report["placed"][0]["prompt_tokens"] == 1800 and
              report["arrivals"]["requests"] == REQUESTS, f"rpc: placed request {report}")
        wait_idle(svc, "rpc")
        after = finished(svc)
        delta = {k: after[k] - before[k] for k in after}
        check(sum(delta.values()) == REQUESTS + 1 and delta["error"] == 0,
              f"rpc: the service ended {delta}")
        # Over RPC the client waits for each job's last event: the counts agree exactly.
        check(delta["cancelled"] == report["summary"]["cancelled"],
              f"rpc: the service counted {delta}, loadgen {report['summary']}")

        # HTTP: a disconnect may reach the service after its job ended, so only totals agree.
        # No --vocab-size: the vocabulary comes from GET /v1/models.
        before = finished(svc)
        report = run_loadgen(svc, "http", svc.http, os.path.join(work, "loadgen-http.json"), [])
        check(str(report["config"]["vocab_size"]) == vocab,
              f"http: the vocabulary {report['config']['vocab_size']}, the model's {vocab}")
        check_requests(report, "http", REQUESTS)
        wait_idle(svc, "http")
        after = finished(svc)
        delta = {k: after[k] - before[k] for k in after}
        check(sum(delta.values()) == REQUESTS and delta["error"] == 0,
              f"http: the service ended {delta}")
        check(1 <= delta["cancelled"] <= report["summary"]["cancelled"],
              f"http: the service cancelled {delta}, loadgen {report['summary']}")
        check_documents(svc, os.path.join(work, "loadgen-docs.json"))
    finally:
        svc.stop()


def scenario_itl_target(bin_dir, model):
    work = os.path.dirname(model)
    svc = Service(bin_dir, model, coordinator_args=["--itl-target-ms", "0.001", "--min-chunk", "32"])
    try:
        out = os.path.join(work, "loadgen-itl.json")
        cmd = [os.path.join(svc.bin_dir, "millipede-loadgen"), "--rpc", svc.server,
               "--num-requests", "10", "--rate", "100", "--seed", "3", "--mix", "3:16:24,1:600:8",
               "--max-concurrency", "4", "--request-timeout-s", "120", "--json", out,
               "--metrics-url", svc.metrics_url, "--wait-idle-s", "10"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        check(r.returncode == 0, f"loadgen: rc={r.returncode}\n{r.stdout}\n{r.stderr}")
        with open(out) as f:
            report = json.load(f)
        s = report["summary"]
        check(s["requests"] == 10 and s["ok"] == 10, f"not every request finished: {s}")
        steps = svc.metric("millipede_decode_step_seconds_count")
        misses = svc.metric("millipede_itl_target_misses_total")
        check(steps > 0 and misses == steps, f"{steps} decode steps, {misses} misses of the target")
        check(svc.metric("millipede_decode_prefill_wait_seconds_total") >= 0, "negative wait")
    finally:
        svc.stop()


def scenario_loadgen_sweep(bin_dir, model):
    work = os.path.dirname(model)
    omnikv = os.path.join(work, "sweep-omnikv.json")
    with open(omnikv, "w") as f:
        json.dump({"version": 1, "filter": {"top_k": 24}, "default": {"decode": "selected"},
                   "layers": [{"layer": 0, "decode": "filter"}]}, f)
    broken = os.path.join(work, "sweep-broken.json")
    with open(broken, "w") as f:
        json.dump({"version": 1, "default": {"decode": "no-such-role"}}, f)
    svc = Service(bin_dir, model)
    try:
        out = os.path.join(work, "loadgen-sweep.json")
        cmd = [os.path.join(svc.bin_dir, "millipede-loadgen"), "--rpc", svc.server,
               "--num-requests", "4", "--sweep-rates", "50,200", "--seed", "2",
               "--prompt-len", "40", "--output-len", "6",
               "--policies", f"default,omnikv={omnikv},broken={broken}",
               "--ttft-p50-limit-s", "30", "--request-timeout-s", "60", "--json", out,
               "--metrics-url", svc.metrics_url, "--wait-idle-s", "10"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        check(r.returncode == 2, f"sweep with a refused policy: rc={r.returncode}\n{r.stdout}\n"
                                 f"{r.stderr}")
        check("sweep (latencies in ms)" in r.stdout and "broken: none" in r.stdout,
              f"no sweep table: {r.stdout}")
        with open(out) as f:
            sweep = json.load(f)["sweep"]
        runs = [(x["policy"], x["rate"]) for x in sweep["runs"]]
        check(runs == [("default", 50), ("default", 200), ("omnikv", 50), ("omnikv", 200),
                       ("broken", 50), ("broken", 200)], f"runs {runs}")
        for x in sweep["runs"]:
            s = x["summary"]
            if x["policy"] == "broken":
                check(s["failed"] == 4 and s["ok"] == 0, f"a refused policy's run: {s}")
            else:
                check(s["ok"] == 4 and s["failed"] == 0 and s["output_tokens"] == 24,
                      f"{x['policy']} at {x['rate']}: {s}")
        # Each run draws its own prompts: none found an earlier run's in the prefix cache (the
        # same prompts at the second rate would have).
        hits = svc.metric("millipede_prefix_cache_hit_tokens_total")
        check(hits == 0, f"runs reused each other's prompts: {hits} tokens from the cache")
        # The batch sizes per decode strategy: the omnikv policy's jobs counted apart.
        for strategy in ("full", "omnikv"):
            n = svc.metric("millipede_decode_batch_size_count", f'decode="{strategy}"')
            check(n > 0, f"no decode batch of {strategy} jobs counted")
        best = {b["policy"]: b for b in sweep["best"]}
        check(best["default"]["rate"] == 200 and best["omnikv"]["rate"] == 200 and
              best["broken"]["rate"] is None and best["default"]["vs_first"] == 1,
              f"best runs {sweep['best']}")
    finally:
        svc.stop()
