"""End-to-end tests of the service: real processes under mpirun (1 coordinator + 2 workers) on
loopback, a tiny random model, and the `millipede` client.

usage: service_test.py --bin DIR --work DIR SCENARIO
"""

import argparse
import json
import urllib.error
import urllib.request
import os
import subprocess
import sys
import threading
import time

from service_faults import scenario_faults, scenario_health, scenario_restart
from service_harness import Failure, Service, check, make_model, offline, read_until
from service_loadgen import scenario_itl_target, scenario_loadgen, scenario_loadgen_sweep
from service_openai import scenario_openai, scenario_sampling
from service_prefix_cache import (scenario_prefix_cache, scenario_prefix_cache_disk,
                                  scenario_prefix_cache_host, scenario_prefix_cache_omnikv,
                                  scenario_prefix_cache_promote)
from service_trained import scenario_trained

PROMPT = "The quick brown fox jumps over the lazy dog"


def long_ids(n, vocab=400):
    return " ".join(str(3 + (i * 7) % (vocab - 3)) for i in range(n))


def expect_error(result, code, *fragments):
    check(result.rc != 0, f"expected {code}, got success: {result}")
    check(code in result.err, f"expected {code}: {result}")
    for f in fragments:
        check(f in result.err, f"expected {f!r} in the error: {result}")


def scenario_stream(bin_dir, model):
    """Streaming and --json answers equal millipede-run's; ids prompts; sampling; models/health;
    concurrent clients each get their own answer; short jobs served beside a running one (batched,
    not one at a time); metrics served."""
    svc = Service(bin_dir, model, http=True)
    try:
        # Greedy text prompt: the service's answer is the offline engine's on as many ranks as
        # the service has workers (no BOS on either). Rank counts may differ in the last bits
        # of the logits (bf16 KV, merge order), so the comparison is always at equal ranks.
        want = offline(bin_dir, model, ["--prompt", PROMPT, "--no-bos", "--max-new-tokens", "12",
                                        "--ignore-eos"], ranks=2)
        r = svc.submit("--prompt", PROMPT, "--max-tokens", "12", "--ignore-eos", "--json")
        check(r.rc == 0, f"submit failed: {r}")
        got = r.json()
        check(got["ids"] == want["ids"], f"ids differ: service {got['ids']} offline {want['ids']}")
        check(got["text"] == want["text"], "text differs from millipede-run")
        check(got["finish_reason"] == "length", f"finish reason {got['finish_reason']}")
        check(got["ttft_s"] > 0 and got["prefill_tokens_per_s"] > 0, f"timings {got}")
        check(got["prefill_density"] == 1.0, f"dense prefill density {got['prefill_density']}")
        check(got["decode_tokens_per_s"] > 0, f"decode rate {got}")

        # The OpenAI HTTP front end runs the same job on the same workers.
        check(svc.http is not None, "no HTTP address in the coordinator's ready line")
        body = json.dumps({"model": "model", "prompt": PROMPT, "max_tokens": 12,
                           "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://{svc.http}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        answer = json.loads(urllib.request.urlopen(req, timeout=30).read())
        check(answer["choices"][0]["text"] == want["text"],
              f"HTTP completion {answer} differs from millipede-run")
        # A number beyond a double, in any field, is a 400 naming it; the service goes on.
        for overflow in ('"x": -1e400', '"max_tokens": 1e400', '"temperature": 1e999'):
            raw = ('{"model": "model", "prompt": "Hello", "max_tokens": 4, ' + overflow +
                   '}').encode()
            req = urllib.request.Request(f"http://{svc.http}/v1/completions", data=raw,
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=30)
                check(False, f"{overflow} was accepted")
            except urllib.error.HTTPError as e:
                detail = e.read().decode()
                check(e.code == 400 and "overflow" in detail, f"{overflow}: {e.code} {detail}")
        req = urllib.request.Request(f"http://{svc.http}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        again = json.loads(urllib.request.urlopen(req, timeout=30).read())
        check(again["choices"][0]["text"] == want["text"], "no answer after the bad requests")

        # A stop string cuts the text before it and ends the job with "stop".
        text = want["text"]
        cut = next((i for i in range(3, len(text) - 2) if text[i:i + 2].strip() == text[i:i + 2]
                    and text.find(text[i:i + 2]) == i), None)
        check(cut is not None, f"no stop string candidate in {text!r}")
        if cut is not None:
            r = svc.submit("--prompt", PROMPT, "--max-tokens", "12", "--ignore-eos", "--json",
                           "--stop", text[cut:cut + 2])
            check(r.rc == 0, f"submit with a stop string failed: {r}")
            check(r.json()["text"] == text[:cut] and r.json()["finish_reason"] == "stop",
                  f"stop string {text[cut:cut + 2]!r}: got {r.json()} from {text!r}")

        # A per-job attention policy reaches the workers: the answer is millipede-run's with the
        # same policy on as many ranks and differs from dense, and the job reports the density
        # its prefill attention achieved.
        policy = os.path.join(os.path.dirname(model), "policy.json")

        def policy_job(what, content):
            with open(policy, "w") as f:
                json.dump(content, f)
            offline_run = offline(bin_dir, model, ["--prompt", PROMPT, "--no-bos",
                                                   "--max-new-tokens", "12", "--ignore-eos",
                                                   "--policy", policy], ranks=2)
            r = svc.submit("--prompt", PROMPT, "--max-tokens", "12", "--ignore-eos", "--json",
                           "--policy", policy)
            check(r.rc == 0, f"submit with the {what} policy failed: {r}")
            check(r.json()["ids"] == offline_run["ids"],
                  f"{what} job: service {r.json()['ids']} offline {offline_run['ids']}")
            check(offline_run["ids"] != want["ids"], f"the {what} policy did not change the answer")
            check(0 < r.json()["prefill_density"] < 1,
                  f"{what} prefill density {r.json()['prefill_density']}")

        # A-shape heads and streaming-head decode layers.
        policy_job("A-shape", {"version": 1,
                               "default": {"prefill": "a-shape", "decode": "streaming-head"},
                               "a_shape": {"sink_tokens": 1, "window_tokens": 3},
                               "streaming_head": {"sink_tokens": 1, "window_tokens": 3}})
        # DuoAttention's layers: KV head 0 streaming (A-shape prefill, streaming-head decode), KV
        # head 1 full, in the same layer.
        policy_job("DuoAttention", {"version": 1,
                                    "default": {"prefill": ["a-shape", "dense"],
                                                "decode": ["streaming-head", "full"]},
                                    "a_shape": {"sink_tokens": 1, "window_tokens": 3},
                                    "streaming_head": {"sink_tokens": 1, "window_tokens": 3}})
        # Parameters per KV head travel too: only KV head 0 has a narrow window (the file's
        # default window covers the prompt), which changes the answer.
        policy_job("per-head window", {"version": 1,
                                       "a_shape": {"sink_tokens": 1, "window_tokens": 100000},
                                       "default": {"prefill": ["a-shape", "a-shape"],
                                                   "a_shape": [{"window_tokens": 2}, None]}})

        # The streamed text is the same text.
        r = svc.submit("--prompt", PROMPT, "--max-tokens", "12", "--ignore-eos")
        check(r.rc == 0, f"streaming submit failed: {r}")
        check(r.out == want["text"] + "\n", f"streamed text {r.out!r} != {want['text']!r}")
        check("prefill [" in r.err and "TTFT" in r.err and "tok/s" in r.err,
              f"no progress bar or timings on stderr: {r.err!r}")

        # Sampling with a seed, token-id prompt from stdin.
        ids = long_ids(300)
        with open(os.path.join(os.path.dirname(model), "ids.txt"), "w") as f:
            f.write(ids)
        want = offline(bin_dir, model, ["--prompt-ids", f.name, "--max-new-tokens", "20",
                                        "--temperature", "0.9", "--top-k", "50", "--top-p",
                                        "0.95", "--seed", "11", "--ignore-eos"], ranks=2)
        r = svc.submit("-", "--ids", "--max-tokens", "20", "--temperature", "0.9", "--top-k",
                       "50", "--top-p", "0.95", "--seed", "11", "--ignore-eos", "--json",
                       stdin=ids)
        check(r.rc == 0, f"ids submit failed: {r}")
        check(r.json()["ids"] == want["ids"], f"sampled ids differ: {r.json()['ids']} vs "
              f"{want['ids']}")

        # Concurrent clients: each answer is that prompt's offline answer, drawn with its own
        # seed. The prompts share their first tokens with earlier jobs' and each other's, so the
        # prefix cache would give them a prefilled prefix: equal to an uncached run within float
        # rounding (the cache's own equivalence is scenario prefix_cache's), hence --no-cache.
        # Batched steps differ from a lone job's in the same last bits (their GEMMs run at other
        # shapes, through other BLAS kernels), and this random model's logits are nearly uniform:
        # at temperature 0.7 such a difference reorders near-equal tokens and moves a draw. At
        # 0.1 the draw still spreads over the dozen or so likeliest tokens, whose gaps are far
        # above rounding.
        prompts = [f"{PROMPT} {i}" for i in range(6)]
        sampled = ["--temperature", "0.1", "--ignore-eos"]
        wants = [offline(bin_dir, model, ["--prompt", p, "--no-bos", "--max-new-tokens", "8",
                                          "--seed", str(i)] + sampled, ranks=2)["ids"]
                 for i, p in enumerate(prompts)]
        greedy = [offline(bin_dir, model, ["--prompt", p, "--no-bos", "--max-new-tokens", "8",
                                           "--ignore-eos"], ranks=2)["ids"] for p in prompts]
        check(wants != greedy, f"temperature 0.1 draws only the greedy tokens: {wants}")
        results = [None] * len(prompts)

        def run(i):
            results[i] = svc.submit("--prompt", prompts[i], "--max-tokens", "8", "--seed", str(i),
                                    *sampled, "--json", "--no-cache")

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, r in enumerate(results):
            check(r.rc == 0, f"concurrent client {i} failed: {r}")
            check(r.json()["ids"] == wants[i],
                  f"concurrent client {i} got {r.json()['ids']}, alone {wants[i]}")

        # Continuous batching: while a long job decodes, two short jobs submitted after it
        # start beside it and finish first, each with the tokens it gets alone.
        a = svc.client_bg("submit", "--prompt", PROMPT, "--max-tokens", "2000", "--ignore-eos",
                          "--no-progress")
        ja = int(read_until(a.stderr, r"job (\d+) queued", 20).group(1))
        read_until(a.stdout, r"\S", 20)
        alone = offline(bin_dir, model, ["--prompt", PROMPT, "--no-bos", "--max-new-tokens", "2"],
                        ranks=2)
        for _ in range(2):
            r = svc.submit("--prompt", PROMPT, "--max-tokens", "2", "--json")
            check(r.rc == 0 and r.json()["ids"] == alone["ids"],
                  f"a short job beside a running one: {r} (alone: {alone['ids']})")
        sa = svc.status(ja)
        check(sa["state"] == "decode", f"the long job stopped running: {sa}")
        h = svc.client("health")
        check(h.rc == 0 and h.json()["running"] == 1, f"health while the long job runs: {h}")
        check(svc.client("cancel", str(ja)).rc == 0, "cancel failed")
        check(a.wait(30) != 0, "the cancelled client exited 0")
        check(svc.metric("millipede_batch_size_count") >= 2, "no batched decode steps in /metrics")

        m = svc.client("models")
        check(m.rc == 0 and m.json()["num_workers"] == 2 and m.json()["context_limit"] == 2048,
              f"models: {m}")
        h = svc.client("health")
        check(h.rc == 0 and h.json()["alive"] and h.json()["accepting"], f"health: {h}")
        # The metrics saw the jobs.
        check(svc.metric("millipede_time_to_first_token_seconds_count") >= 8,
              "TTFT observations missing from /metrics")
        check(svc.metric("millipede_generation_tokens_total") >= 60,
              "generated tokens missing from /metrics")
        check(svc.metric("millipede_request_finished_total", 'reason="length"') >= 8,
              "finished jobs missing from /metrics")
        check(svc.metric("millipede_request_finished_total", 'reason="cancelled"') >= 1,
              "the cancelled job is missing from /metrics")
        check(svc.metric("millipede_communication_bytes_total", 'rank="2"') > 0,
              "rank 2's data-plane bytes missing from /metrics")
        check(svc.metric("millipede_prefill_attention_density_count") >= 8,
              "prefill densities missing from /metrics")
        check(svc.metric("millipede_prefill_attention_density_bucket", 'le="0.9"') >= 2,
              "the A-shape jobs' densities are missing from /metrics")
    finally:
        svc.stop()


def scenario_errors(bin_dir, model):
    """Every bad input gets its clear error and the next job is served; queue full."""
    # One job holding KV at a time, so that later ones wait in the queue.
    svc = Service(bin_dir, model, coordinator_args=["--max-queue", "2", "--max-running", "1"])
    work = os.path.dirname(model)
    try:
        def served():
            r = svc.submit("--prompt", PROMPT, "--max-tokens", "3", "--json")
            check(r.rc == 0 and len(r.json()["ids"]) >= 1, f"the next job was not served: {r}")

        expect_error(svc.submit("--prompt", ""), "INVALID_ARGUMENT", "the prompt is empty")
        served()
        bad_policy = os.path.join(work, "bad-policy.json")
        with open(bad_policy, "w") as f:
            f.write('{"version": 1, "default": {"decode": ["full", "filter"]}}')
        expect_error(svc.submit("--prompt", PROMPT, "--policy", bad_policy), "INVALID_ARGUMENT",
                     '"full" beside "filter"')
        served()
        sparse_policy = os.path.join(work, "sparse-policy.json")
        with open(sparse_policy, "w") as f:
            f.write('{"version": 1, "default": {"prefill": ["vertical-slash", "block-sparse"]},'
                    ' "vertical_slash": {"vertical": 4, "slash": 8},'
                    ' "block_sparse": {"block": 16, "top_blocks": 2}}')
        r = svc.submit("--prompt", PROMPT * 8, "--max-tokens", "3", "--policy", sparse_policy,
                       "--json")
        check(r.rc == 0 and len(r.json()["ids"]) >= 1, f"a sparse prefill policy was not served: {r}")
        check(0 < r.json()["prefill_density"] < 1,
              f"sparse prefill density {r.json()['prefill_density']}")
        with open(bad_policy, "w") as f:
            f.write('{"version": 1, "layers": [{"layer": 99}]}')
        expect_error(svc.submit("--prompt", PROMPT, "--policy", bad_policy), "INVALID_ARGUMENT",
                     "layer 99")
        served()
        expect_error(svc.submit("-", "--ids", stdin=long_ids(2100)), "OUT_OF_RANGE", "2100",
                     "2048")
        served()
        expect_error(svc.submit("-", "--ids", "--max-tokens", "1", stdin=long_ids(2048)),
                     "OUT_OF_RANGE", "at least one generated token must fit")
        expect_error(svc.submit("-", "--ids", "--max-tokens", "100", stdin=long_ids(2000)),
                     "OUT_OF_RANGE", "exceeds the context limit")
        served()
        expect_error(svc.submit("-", "--ids", stdin="1 2 512"), "INVALID_ARGUMENT", "vocabulary")
        expect_error(svc.submit("-", "--ids", stdin="1 -4 2"), "INVALID_ARGUMENT", "vocabulary")
        served()
        expect_error(svc.submit("--prompt", PROMPT, "--temperature", "-1"), "INVALID_ARGUMENT",
                     "temperature")
        expect_error(svc.submit("--prompt", PROMPT, "--top-p", "0"), "INVALID_ARGUMENT", "top_p")
        expect_error(svc.submit("--prompt", PROMPT, "--top-p", "1.5"), "INVALID_ARGUMENT",
                     "top_p")
        expect_error(svc.submit("--prompt", PROMPT, "--top-k", "-2"), "INVALID_ARGUMENT", "top_k")
        expect_error(svc.submit("--prompt", PROMPT, "--max-tokens", "0"), "INVALID_ARGUMENT",
                     "max_new_tokens")
        expect_error(svc.submit("--prompt", PROMPT, "--stop-id", "9999"), "INVALID_ARGUMENT",
                     "stop id")
        served()
        bad = os.path.join(work, "bad-utf8.txt")
        with open(bad, "wb") as f:
            f.write(b"hello \xff\xfe world")
        expect_error(svc.submit("--prompt-file", bad), "INVALID_ARGUMENT", "not valid UTF-8")
        served()
        # Larger than the prompt limit (32 MiB) but within the message limit: a clear error.
        big = os.path.join(work, "big.txt")
        with open(big, "w") as f:
            f.write("a" * (40 << 20))
        expect_error(svc.submit("--prompt-file", big), "INVALID_ARGUMENT", "at most")
        served()
        # Beyond the RPC message limit (64 MiB): the transport refuses it; the service goes on.
        with open(big, "w") as f:
            f.write("a" * (70 << 20))
        r = svc.submit("--prompt-file", big)
        check(r.rc != 0 and "error" in r.err, f"an oversized message was accepted: {r}")
        os.remove(big)
        served()

        # Queue full: one job running, two waiting, the fourth is refused.
        a = svc.client_bg("submit", "--prompt", PROMPT, "--max-tokens", "2000", "--ignore-eos",
                          "--no-progress")
        ja = int(read_until(a.stderr, r"job (\d+) queued", 20).group(1))
        read_until(a.stdout, r"\S", 20)
        waiting = [svc.client_bg("submit", "--prompt", PROMPT, "--max-tokens", "2",
                                 "--no-progress") for _ in range(2)]
        ids = [int(read_until(p.stderr, r"job (\d+) queued", 20).group(1)) for p in waiting]
        expect_error(svc.submit("--prompt", PROMPT), "RESOURCE_EXHAUSTED", "queue full")
        # Cancelling a queued job ends it at once and frees its place.
        check(svc.client("cancel", str(ids[1])).rc == 0, "cancel of a queued job failed")
        out, err = waiting[1].communicate(timeout=30)
        check(waiting[1].returncode != 0 and "CANCELLED" in err, f"queued cancel: {err}")
        check(svc.status(ids[1])["state"] == "cancelled", "the queued job is not cancelled")
        check(svc.client("cancel", str(ja)).rc == 0, "cancel failed")
        check(waiting[0].wait(30) == 0, "a waiting job failed")
        a.wait(30)
        served()
        expect_error(svc.client("status", "999999"), "NOT_FOUND", "no job 999999")
        expect_error(svc.client("cancel", "999999"), "NOT_FOUND", "no job 999999")
        # Cancelling a job that already ended is a no-op, not an error.
        r = svc.client("cancel", str(ids[0]))
        check(r.rc == 0 and "had already ended (finished)" in r.out, f"cancel after the end: {r}")
        check(svc.status(ids[0])["state"] == "finished", "a late cancel changed the job")
    finally:
        svc.stop()


def scenario_limits(bin_dir, model):
    """The workers' KV budget bounds admission; a worker that cannot start stops the service
    with its reason."""
    # 8 layers x 2 KV heads x 16 dims x (K, V) x bf16 = 1 KiB per position: 256 per rank.
    svc = Service(bin_dir, model, worker_args=["--kv-budget-mb", "0.25"], http=True)
    try:
        m = svc.client("models").json()
        check(m["kv_capacity_tokens"] == 512, f"KV capacity {m}")
        # The longest job every split of which fits: 2 x (256 - 2) + 2, below the context's 2048;
        # the same over HTTP, with the vocabulary.
        check(m["max_model_len"] == 510 and m["context_limit"] == 2048, f"max_model_len {m}")
        with urllib.request.urlopen(f"http://{svc.http}/v1/models", timeout=30) as reply:
            listed = json.loads(reply.read())["data"][0]
        check(listed["max_model_len"] == 510 and listed["vocab_size"] == m["vocab_size"],
              f"/v1/models {listed} vs {m}")
        # The worst split (a prompt of 1 mod 2 x workers tokens) fits exactly; one more does not.
        r = svc.submit("-", "--ids", "--max-tokens", "13", "--json", stdin=long_ids(497))
        check(r.rc == 0, f"a job of max_model_len tokens failed: {r}")
        expect_error(svc.submit("-", "--ids", "--max-tokens", "14", stdin=long_ids(497)),
                     "OUT_OF_RANGE", "KV")
        # A job that must wait for a running one's KV is counted in
        # millipede_kv_admission_waits_total: A holds 230 of the 256 positions per rank, B needs
        # 108 and waits until A ends.
        waits = svc.metric("millipede_kv_admission_waits_total")
        ids_a = os.path.join(os.path.dirname(model), "limits-a.txt")
        with open(ids_a, "w") as f:
            f.write(long_ids(60))
        a = svc.client_bg("submit", "--prompt-file", ids_a, "--ids", "--max-tokens", "400",
                          "--ignore-eos", "--no-progress", "--json")
        job_a = int(read_until(a.stderr, r"job (\d+) queued", 20).group(1))
        # B goes in at once, behind A, whatever the machine's speed: it waits for A's KV.
        ids_b = os.path.join(os.path.dirname(model), "limits-b.txt")
        with open(ids_b, "w") as f:
            f.write(long_ids(200))
        b = svc.client_bg("submit", "--prompt-file", ids_b, "--ids", "--max-tokens", "16",
                          "--no-progress", "--json")
        read_until(b.stderr, r"job (\d+) queued", 20)
        check(svc.status(job_a)["state"] in ("queued", "prefill", "decode"),
              "job A ended before B was queued")
        _, err = b.communicate(timeout=60)
        check(b.returncode == 0, f"the job waiting for KV failed: {err}")
        check(a.wait(60) == 0, "job A failed")
        check(svc.metric("millipede_kv_admission_waits_total") == waits + 1,
              f"KV waits {svc.metric('millipede_kv_admission_waits_total')}, before {waits}")
        r = svc.submit("-", "--ids", "--max-tokens", "16", "--json", stdin=long_ids(300))
        check(r.rc == 0, f"a job within the KV budget failed: {r}")
        expect_error(svc.submit("-", "--ids", "--max-tokens", "16", stdin=long_ids(500)),
                     "OUT_OF_RANGE", "KV", "256 per rank")
        r = svc.submit("--prompt", PROMPT, "--max-tokens", "3", "--json")
        check(r.rc == 0, f"the next job was not served: {r}")
    finally:
        svc.stop()

    # A DuoAttention policy whose streaming heads keep only their window (steps of 32 tokens):
    # a job too large for the budget in dense KV fits it, is admitted and served.
    policy = os.path.join(os.path.dirname(model), "duo-limits.json")
    with open(policy, "w") as f:
        f.write('{"version": 1, "default": {"prefill": ["dense", "a-shape"], '
                '"decode": ["full", "streaming-head"]}, '
                '"a_shape": {"sink_tokens": 4, "window_tokens": 16}, '
                '"streaming_head": {"sink_tokens": 4, "window_tokens": 16}}')
    svc = Service(bin_dir, model, coordinator_args=["--max-step-tokens", "32",
                                                    "--max-running", "8"],
                  worker_args=["--kv-budget-mb", "0.25"])
    try:
        # 258 positions on the busiest rank: over the 256 of dense KV, 163 with the policy's.
        expect_error(svc.submit("-", "--ids", "--max-tokens", "16", stdin=long_ids(500)),
                     "OUT_OF_RANGE", "258 KV positions")
        r = svc.submit("-", "--ids", "--max-tokens", "16", "--ignore-eos", "--json",
                       "--policy", policy, stdin=long_ids(500))
        check(r.rc == 0, f"a DuoAttention job within its KV cost failed: {r}")
        check(len(r.json()["ids"]) == 16, f"the DuoAttention job's tokens: {r.json()}")
    finally:
        svc.stop()

    t0 = time.time()
    try:
        Service(bin_dir, model, worker_args=["--backend", "tpu"])
        raise Failure("the service started with a bad worker flag")
    except Failure as e:
        check("worker rank" in str(e) and "failed to start" in str(e) and "tpu" in str(e),
              f"the coordinator did not report the worker's reason: {e}")
    check(time.time() - t0 < 30, "a worker's start failure took too long to surface")


def scenario_cancel(bin_dir, model):
    """Cancel in prefill and in decode, and a client that disconnects: the job ends and its KV
    is freed on every worker rank."""
    work = os.path.dirname(model)
    # A longer context than the shared model's, so that prefill lasts seconds on the CPU
    # backend's threaded kernels (2000 tokens take a fraction of a second).
    svc = Service(bin_dir, make_model(bin_dir, os.path.join(work, "model-16k"), context=16384))
    try:
        svc.wait_kv(lambda kv: kv == [0, 0], "reported as zero before any job")
        # Prefill: a long prompt over 8 layers; cancel once progress shows.
        ids = os.path.join(work, "long-ids.txt")
        with open(ids, "w") as f:
            f.write(long_ids(12000))
        p = svc.client_bg("submit", "--prompt-file", ids, "--ids", "--max-tokens", "8")
        job = int(read_until(p.stderr, r"job (\d+) queued", 20).group(1))
        read_until(p.stderr, r"prefill \[", 30)
        svc.wait_kv(lambda kv: all(b > 0 for b in kv), "held during prefill")
        t0 = time.time()
        check(svc.client("cancel", str(job)).rc == 0, "cancel failed")
        out, err = p.communicate(timeout=30)
        # Bounded by one layer of one prefill chunk (--max-step-tokens), not by the prompt.
        print(f"cancel in prefill of a 12000-token prompt: the client saw it after "
              f"{time.time() - t0:.2f} s")
        check(p.returncode != 0 and "CANCELLED" in err, f"prefill cancel: rc={p.returncode} {err}")
        check(out.strip() == "", f"a job cancelled in prefill streamed text: {out!r}")
        check(svc.status(job)["state"] == "cancelled", f"state {svc.status(job)}")
        svc.wait_kv(lambda kv: kv == [0, 0], "freed after the prefill cancel")

        # Decode: cancel after some tokens streamed.
        p = svc.client_bg("submit", "--prompt", PROMPT, "--max-tokens", "1500", "--ignore-eos")
        job = int(read_until(p.stderr, r"job (\d+) queued", 20).group(1))
        read_until(p.stdout, r"\S", 30)
        svc.wait_kv(lambda kv: all(b > 0 for b in kv), "held during decode")
        check(svc.metric("millipede_kv_cache_bytes", 'rank="1"') > 0 and
              svc.metric("millipede_kv_cache_bytes", 'rank="2"') > 0,
              "the metrics do not show the running job's KV on both ranks")
        check(svc.status(job)["state"] == "decode", "the job is not decoding")
        check(svc.client("cancel", str(job)).rc == 0, "cancel failed")
        out, err = p.communicate(timeout=30)
        check(p.returncode != 0 and "CANCELLED" in err, f"decode cancel: rc={p.returncode} {err}")
        st = svc.status(job)
        check(st["state"] == "cancelled" and st["generated_tokens"] < 1500, f"state {st}")
        svc.wait_kv(lambda kv: kv == [0, 0], "freed after the decode cancel")
        check(svc.metric("millipede_kv_cache_bytes") == 0,
              "the metrics still show KV after the cancel")

        # Disconnect: kill the client mid-decode.
        p = svc.client_bg("submit", "--prompt", PROMPT, "--max-tokens", "1500", "--ignore-eos")
        job = int(read_until(p.stderr, r"job (\d+) queued", 20).group(1))
        read_until(p.stdout, r"\S", 30)
        p.kill()
        p.wait()
        deadline = time.time() + 10
        while svc.status(job)["state"] not in ("cancelled",) and time.time() < deadline:
            time.sleep(0.05)
        check(svc.status(job)["state"] == "cancelled", f"disconnect: {svc.status(job)}")
        svc.wait_kv(lambda kv: kv == [0, 0], "freed after the client disconnected")
        # Cancelling it again (a client racing its job's end) succeeds and says so.
        r = svc.client("cancel", str(job))
        check(r.rc == 0 and "had already ended (cancelled)" in r.out, f"second cancel: {r}")
        r = svc.submit("--prompt", PROMPT, "--max-tokens", "3", "--json")
        check(r.rc == 0, f"the service did not serve after the cancels: {r}")
    finally:
        svc.stop()


def scenario_drain(bin_dir, model):
    """SIGTERM: new jobs refused, the running one finishes, everything exits 0; a job past the
    drain deadline is cancelled."""
    svc = Service(bin_dir, model, coordinator_args=["--drain-timeout-s", "20"])
    p = svc.client_bg("submit", "--prompt", PROMPT, "--max-tokens", "300", "--ignore-eos",
                      "--json")
    read_until(p.stderr, r"job (\d+) queued", 20)
    time.sleep(0.2)
    svc.terminate()
    time.sleep(0.2)
    r = svc.submit("--prompt", PROMPT)
    check(r.rc != 0 and ("FAILED_PRECONDITION" in r.err or "connect" in r.err),
          f"a job was accepted while draining: {r}")
    out, err = p.communicate(timeout=60)
    check(p.returncode == 0, f"the running job did not finish during the drain: {err}")
    check(len(json.loads(out)["ids"]) == 300, "the drained job was cut short")
    rc = svc.wait(30)
    check(rc == 0, f"the service exited {rc} after the drain:\n{svc.log()}")

    svc = Service(bin_dir, model, coordinator_args=["--drain-timeout-s", "0.5"])
    p = svc.client_bg("submit", "--prompt", PROMPT, "--max-tokens", "2000", "--ignore-eos",
                      "--no-progress")
    read_until(p.stdout, r"\S", 30)
    svc.terminate()
    out, err = p.communicate(timeout=60)
    check(p.returncode != 0 and "CANCELLED" in err, f"past the deadline: {err}")
    rc = svc.wait(30)
    check(rc == 0, f"the service exited {rc} after a drain with a cancel:\n{svc.log()}")


def scenario_worker_death(bin_dir, model):
    """A killed worker — the leader, a middle rank, the last — is named: the client gets a
    retryable error naming it and the service exits non-zero in time (the live ranks keep beating
    while they wait on the dead one, so they are not blamed)."""
    for victim in (1, 2, 3):
        svc = Service(bin_dir, model, workers=3, coordinator_args=["--worker-timeout-s", "3"])
        try:
            p = svc.client_bg("submit", "--prompt", PROMPT, "--max-tokens", "1900",
                              "--ignore-eos", "--no-progress")
            read_until(p.stdout, r"\S", 30)
            t0 = time.time()
            os.kill(svc.worker_pids[victim], 9)
            out, err = p.communicate(timeout=30)
            check(p.returncode != 0 and "error" in err, f"the client got no error: {err}")
            check("FAILED_PRECONDITION" in err and "did not finish" in err and
                  f"worker rank {victim} " in err,
                  f"the client's error does not name worker rank {victim}: {err}")
            rc = svc.wait(30)
            check(time.time() - t0 < 30, "the failure took too long to surface")
            # Under --enable-recovery OpenMPI 4.1's mpirun exits 0 whatever its ranks do unless
            # a rank signals it, which the coordinator does when it ends the job.
            check(rc != 0, f"mpirun exited {rc} after worker rank {victim} died")
            log = svc.log()
            check(f"worker rank {victim} stopped responding" in log,
                  f"no reason naming rank {victim} in the log:\n{log}")
            for other in (1, 2, 3):
                if other != victim:
                    check(f"worker rank {other} stopped responding" not in log,
                          f"rank {other} blamed for rank {victim}'s death:\n{log}")
            check("ending the job with MPI_Abort, exit code 3" in log,
                  f"the coordinator did not end the job with status 3:\n{log}")
        finally:
            svc.kill()


def scenario_liveness(bin_dir, model):
    """Liveness does not depend on how long a layer takes, and a step that makes no progress
    fails its job without taking the service down: on a model whose prefill layers take seconds,
    a worker timeout shorter than one layer (the heartbeat thread keeps the worker alive) and a
    stall timeout shorter than one layer (the job fails, the next job is served)."""
    work = os.path.dirname(model)
    slow = os.path.join(work, "model-slow")
    if not os.path.exists(os.path.join(slow, "config.json")):
        r = subprocess.run([os.path.join(bin_dir, "millipede-mkmodel"), "--preset", "tiny",
                            "--out", slow, "--seed", "5", "--num-layers", "2", "--hidden-size",
                            "2048", "--intermediate-size", "8192", "--num-heads", "16",
                            "--num-kv-heads", "4", "--head-dim", "128",
                            "--max-position-embeddings", "8192"],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"mkmodel failed: {r.stderr}")
    svc = Service(bin_dir, slow, workers=1,
                  coordinator_args=["--worker-timeout-s", "1.5", "--stall-timeout-s", "2",
                                    "--stall-abort-s", "120", "--max-step-tokens", "8192"])
    try:
        p = svc.client_bg("submit", "--prompt", long_ids(4000), "--ids", "--max-tokens", "4",
                          "--no-progress")
        out, err = p.communicate(timeout=60)
        check(p.returncode != 0 and "DEVICE_ERROR" in err and "made no progress" in err,
              f"the stalled job's client: rc={p.returncode} {err}")
        # The stalled step is cancelled, so it stops after its current layer rather than run
        # the whole prefill (on a loaded machine that is minutes).
        r = svc.submit("--prompt", "12 13 14", "--ids", "--max-tokens", "2", "--json",
                       timeout=110)
        check(r.rc == 0 and len(r.json()["ids"]) == 2, f"the next job was not served: {r}")
        log = svc.log()
        check("stalled step 1 stopped" in log, f"the stalled step was not stopped:\n{log}")
        check("stopped responding" not in log, f"a live worker was declared dead:\n{log}")
        check(svc.metric("millipede_request_errors_total", 'reason="worker"') >= 1,
              "the stalled job is not counted")
        h = svc.client("health")
        check(h.rc == 0 and h.json()["alive"], f"health after the stall: {h}")
    finally:
        svc.stop()
    # A stalled step that does not return within --stall-abort-s of its cancel (here: a layer
    # longer than both limits) ends the service with exit code 3, for a supervisor to restart.
    svc = Service(bin_dir, slow, workers=1,
                  coordinator_args=["--stall-timeout-s", "1", "--stall-abort-s", "0.5",
                                    "--max-step-tokens", "8192"])
    try:
        p = svc.client_bg("submit", "--prompt", long_ids(4000), "--ids", "--max-tokens", "4",
                          "--no-progress")
        p.communicate(timeout=60)
        rc = svc.wait(60)
        log = svc.log()
        check(rc != 0 and "did not stop within 0.5 s of its cancel" in log and
              "exit code 3" in log, f"a step that does not stop: rc {rc}\n{log}")
    finally:
        svc.kill()


SCENARIOS = {
    "stream": scenario_stream,
    "errors": scenario_errors,
    "cancel": scenario_cancel,
    "limits": scenario_limits,
    "drain": scenario_drain,
    "worker_death": scenario_worker_death,
    "liveness": scenario_liveness,
    "sampling": scenario_sampling,
    "openai": scenario_openai,
    "loadgen": scenario_loadgen,
    "itl_target": scenario_itl_target,
    "loadgen_sweep": scenario_loadgen_sweep,
    "health": scenario_health,
    "restart": scenario_restart,
    "faults": scenario_faults,
    "prefix_cache": scenario_prefix_cache,
    "prefix_cache_host": scenario_prefix_cache_host,
    "prefix_cache_disk": scenario_prefix_cache_disk,
    "prefix_cache_omnikv": scenario_prefix_cache_omnikv,
    "prefix_cache_promote": scenario_prefix_cache_promote,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", help="serve this model instead of a generated one (the trained "
                    "scenario: a GGUF file)")
    ap.add_argument("scenario", choices=sorted(SCENARIOS) + ["trained"])
    args = ap.parse_args()
    work = os.path.join(args.work, args.scenario)
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    try:
        if args.scenario == "trained":
            check(args.model is not None and os.path.isfile(args.model),
                  f"the trained scenario needs the model file (--model {args.model}); "
                  "cluster/fetch-smollm2.sh fetches it")
            scenario_trained(args.bin, args.model)
        else:
            SCENARIOS[args.scenario](args.bin, make_model(args.bin, os.path.join(work, "model")))
    except Failure as e:
        print(f"FAIL {args.scenario}: {e}", file=sys.stderr)
        return 1
    print(f"PASS {args.scenario} ({time.time() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
