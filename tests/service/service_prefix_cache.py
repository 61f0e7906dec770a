"""The prefix cache end to end: a follow-up whose prompt starts with an earlier job's prompt
reuses its KV (cached_tokens over RPC and in OpenAI usage) and answers as an uncached run does;
opting out; two follow-ups at once; questions on a pinned document sharing its blocks; questions that wait for their document's job in flight;
the KV budget reclaims cache entries for new jobs but not a
pinned one; listing, pinning, unpinning and dropping entries over RPC and HTTP; a bounded soak
(follow-ups on a few documents, some cancelled) after which the accounting holds exactly the
entries listed and dropping them frees every byte. Scenario prefix_cache_host: the host tier
under a tiny KV and host budget; prefix_cache_disk: the disk tier across a restart, with a
corrupted and a truncated file; prefix_cache_promote: disk hits moved up to the host tier; prefix_cache_omnikv: OmniKV jobs whose selected layers keep their
prompt in the workers' host tier."""

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request

from service_harness import Failure, Service, check, read_until


def ids_arg(ids):
    return " ".join(str(i) for i in ids)


def doc_ids(n, seed):
    x, out = seed * 2654435761 + 1, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append(10 + x % 380)
    return out


def run_at_once(run, prompts, timeout=None):
    """Runs every prompt from a thread of its own, all at once; their results in order (None for
    one whose run raised or had not ended within `timeout` seconds)."""
    results = [None] * len(prompts)

    def one(i):
        results[i] = run(prompts[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    return list(results)


def cache_list(svc):
    r = svc.client("cache", "list")
    check(r.rc == 0, f"cache list failed: {r}")
    return r.json()


def http_json(svc, method, path):
    req = urllib.request.Request(f"http://{svc.http}{path}", method=method)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def http_status(svc, method, path):
    try:
        http_json(svc, method, path)
        return 200
    except urllib.error.HTTPError as e:
        return e.code


def runner(svc):
    """Submits ids, 6 tokens, EOS ignored; the job's record (checked to have succeeded)."""
    def run(ids, *extra):
        r = svc.submit("--ids", "--prompt", ids_arg(ids), "--max-tokens", "6",
                       "--ignore-eos", "--json", *extra)
        check(r.rc == 0, f"submit failed: {r}")
        return r.json()
    return run


def soak(svc, run, documents=3):
    """Follow-ups on a few documents from four clients, every fifth cancelled while it runs (in
    its prefill from the cache or its decode); then no job holds KV, the cache's reservation is
    the sum of its entries' in KV memory, the host and disk entries gauges match the listing,
    and dropping every entry frees every byte on every rank, in every tier."""
    docs = [doc_ids(240, 50 + k) for k in range(documents)]
    failures = []

    def client(c):
        for i in range(15):
            prompt = docs[(c + i) % len(docs)] + [60 + c, 70 + i]
            if (c + i) % 5 == 0:
                bg = svc.client_bg("submit", "--ids", "--prompt", ids_arg(prompt),
                                   "--max-tokens", "40", "--ignore-eos", "--no-progress")
                job = read_until(bg.stderr, r"job (\d+) queued", 30).group(1)
                svc.client("cancel", job)
                bg.wait(timeout=60)
            else:
                try:
                    run(prompt)
                except Failure as e:
                    failures.append(str(e))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not failures, f"soak jobs failed: {failures[:3]}")
    entries = cache_list(svc)
    check(len(entries) >= 1, "the soak left no entry")
    svc.wait_kv(lambda kv: sum(kv) == 0, "free of jobs after the soak")
    reserved = svc.metric("millipede_prefix_cache_reserved_positions")
    device = [e["kv_positions"] for e in entries if e["tier"] == "device"]
    check(reserved == sum(device), f"cache reservation {reserved} != its entries' {device}")
    for tier in ("host", "disk"):
        listed = sum(e["tier"] == tier for e in entries)
        check(svc.metric(f"millipede_prefix_cache_{tier}_entries") == listed,
              f"{tier} entries gauge != the {listed} listed")
    check(svc.metric("millipede_kv_reserved_positions") == 0, "a job still reserves KV")
    for e in entries:
        if e["pinned"]:
            svc.client("cache", "unpin", str(e["id"]))
        r = svc.client("cache", "drop", str(e["id"]))
        check(r.rc == 0, f"drop {e['id']}: {r}")
    check(cache_list(svc) == [], "entries left after dropping them all")
    # A step (of a job that leaves nothing) frees them on the workers, which then report it.
    run(doc_ids(20, 3), "--no-cache")
    deadline = time.time() + 10
    while svc.metric("millipede_prefix_cache_bytes") > 0 and time.time() < deadline:
        time.sleep(0.2)
    check(svc.metric("millipede_prefix_cache_bytes") == 0, "cache bytes left on the workers")
    check(svc.metric("millipede_prefix_cache_reserved_positions") == 0, "cache reservation left")
    check(svc.metric("millipede_prefix_cache_entries") == 0, "entries left in the gauge")


def questions_while_running(svc, run):
    """Questions about a document that arrive while its first job still runs wait for it
    (prefix_cache_waits_total) instead of prefilling the document beside it. That job's prompt
    is stored already, and their copies of it fit beside it: they start at once, copying it from
    the running job, and are answered while it still decodes. Each reuses the whole document and
    answers as an uncached run."""
    doc = doc_ids(400, 9)
    bg = svc.client_bg("submit", "--ids", "--prompt", ids_arg(doc + [5, 6]), "--max-tokens",
                       "1500", "--ignore-eos", "--no-progress")
    leader = read_until(bg.stderr, r"job (\d+) queued", 30).group(1)
    deadline = time.time() + 30
    while svc.status(leader)["generated_tokens"] < 1:
        check(time.time() < deadline, "the document's job did not start decoding")
        time.sleep(0.05)
    waits = svc.metric("millipede_prefix_cache_waits_total")
    results = run_at_once(run, [doc + [41 + i, 42, 43] for i in range(2)], timeout=60)
    check(svc.metric("millipede_prefix_cache_waits_total") >= waits + 2,
          "the questions did not wait for the document's job")
    check(svc.status(leader)["state"] == "decode",
          "the questions were answered only once the document's job ended")
    check(svc.client("cancel", leader).rc == 0, "cancel failed")
    bg.wait(timeout=60)
    for i, r in enumerate(results):
        check(r is not None and r["cached_tokens"] == 400, f"waiting question {i}: {r}")
        alone = run(doc + [41 + i, 42, 43], "--no-cache")
        check(r["ids"] == alone["ids"], f"waiting question {i} answered otherwise")


def scenario_prefix_cache(bin_dir, model):
    # A KV budget of a few documents, so that later ones reclaim the cache's entries. Jobs wait
    # for one in flight that shares 200 more tokens than the cache (the soak's documents are
    # longer: its questions wait too, and some of them are cancelled while they wait).
    svc = Service(bin_dir, model, http=True, worker_args=["--kv-budget-mb", "2"],
                  coordinator_args=["--prefix-wait-tokens", "200"])
    try:
        run = runner(svc)

        doc = doc_ids(300, 1)
        # The document's job ends with more prompt than the follow-ups: room for them to take
        # its entry over.
        first = run(doc + list(range(11, 51)))
        check(first["cached_tokens"] == 0, f"a first prompt came from the cache: {first}")
        # The follow-up shares the document: its 300 tokens come from the cache (any length is
        # reusable with dense attention), and the answer is the uncached one.
        question = doc + [21, 22, 23, 24]
        follow = run(question)
        check(follow["cached_tokens"] == 300, f"follow-up reused {follow['cached_tokens']}")
        uncached = run(question, "--no-cache")
        check(uncached["cached_tokens"] == 0, f"--no-cache reused {uncached['cached_tokens']}")
        check(follow["ids"] == uncached["ids"],
              f"cached answer {follow['ids']} != uncached {uncached['ids']}")
        # The follow-up's own KV (prompt and generated tokens) is an entry too: a third turn
        # that repeats the question and the answer reuses all of it but the last token run.
        third = run(question + follow["ids"] + [31, 32])
        check(third["cached_tokens"] == len(question) + len(follow["ids"]) - 1,
              f"third turn reused {third['cached_tokens']}")

        # Two follow-ups from one entry at once.
        results = run_at_once(run, [doc + [41 + i, 42, 43] for i in range(2)])
        for i, r in enumerate(results):
            check(r is not None and r["cached_tokens"] >= 288, f"concurrent follow-up {i}: {r}")
            alone = run(doc + [41 + i, 42, 43], "--no-cache")
            check(r["ids"] == alone["ids"], f"concurrent follow-up {i} answered otherwise")

        questions_while_running(svc, run)

        # OpenAI usage reports the reuse.
        body = json.dumps({"model": "model", "prompt": question, "max_tokens": 2,
                           "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://{svc.http}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            usage = json.loads(resp.read())["usage"]
        check(usage["prompt_tokens_details"]["cached_tokens"] >= 288, f"usage {usage}")
        body = json.dumps({"model": "model", "prompt": question, "max_tokens": 2,
                           "temperature": 0, "ignore_eos": True, "cache": False}).encode()
        req = urllib.request.Request(f"http://{svc.http}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            usage = json.loads(resp.read())["usage"]
        check(usage["prompt_tokens_details"]["cached_tokens"] == 0, f"cache false: {usage}")

        # A pinned document survives what follows.
        pinned_doc = doc_ids(200, 7)
        pinned = run(pinned_doc + [9], "--pin")
        entry = pinned["cache_entry"]
        check(entry > 0, f"a pinned job left no entry: {pinned}")
        listed = cache_list(svc)
        check(any(e["id"] == entry and e["pinned"] for e in listed), f"cache list {listed}")

        # Many distinct documents: the entries fill the KV budget and are reclaimed for new jobs
        # (every job is served), and an old document's entry is gone or still exact.
        for k in range(12):
            run(doc_ids(700, 100 + k) + [5])
        again = run(doc + [21, 22, 23, 24])
        check(again["ids"] == uncached["ids"], "a follow-up after evictions answered otherwise")
        hits = svc.metric("millipede_prefix_cache_hit_tokens_total")
        check(hits >= 4 * 288, f"hit tokens {hits}")
        check(svc.metric("millipede_prefix_cache_miss_tokens_total") > 0, "no miss counted")
        check(svc.metric("millipede_prefix_cache_evictions_total") >= 1,
              "no entry was evicted under a KV budget of a few documents")
        check(svc.metric("millipede_prefix_cache_entries") >= 1, "no entry is left")
        # (host memory on CPU workers, GPU memory on CUDA workers)
        check(svc.metric("millipede_prefix_cache_bytes") > 0,
              "the workers report no bytes held by the cache")

        # The pinned entry outlived the evictions; unpinned and dropped, it is gone.
        hit = run(pinned_doc + [8, 7])
        check(hit["cached_tokens"] == 200, f"the pinned document was not reused: {hit}")
        r = svc.client("cache", "unpin", str(entry))
        check(r.rc == 0, f"unpin failed: {r}")
        check(not any(e["id"] == entry and e["pinned"] for e in cache_list(svc)), "still pinned")
        r = svc.client("cache", "drop", str(entry))
        check(r.rc == 0, f"drop failed: {r}")
        check(all(e["id"] != entry for e in cache_list(svc)), "dropped entry still listed")
        r = svc.client("cache", "drop", str(entry))
        check(r.rc != 0 and "NOT_FOUND" in r.err, f"second drop: {r}")

        # Over HTTP: list, pin, drop; unknown ids are 404.
        listed = http_json(svc, "GET", "/v1/cache")
        check(listed["object"] == "list" and len(listed["data"]) >= 1, f"GET /v1/cache {listed}")
        some = listed["data"][0]["id"]
        check(http_json(svc, "POST", f"/v1/cache/{some}/pin")["pinned"], "HTTP pin")
        check(any(e["id"] == some and e["pinned"] for e in http_json(svc, "GET", "/v1/cache")["data"]),
              "HTTP pin not listed")
        check(http_json(svc, "DELETE", f"/v1/cache/{some}")["dropped"], "HTTP drop")
        check(http_status(svc, "DELETE", f"/v1/cache/{some}") == 404, "HTTP drop of a dropped id")
        check(http_status(svc, "POST", "/v1/cache/abc/pin") == 404, "HTTP pin of a bad id")
        check(http_status(svc, "PUT", "/v1/cache") == 405, "HTTP PUT /v1/cache")
        # Questions on a pinned document share its blocks (mapped on the workers, not copied),
        # two at once, and answer as uncached runs do.
        shared_doc = doc_ids(600, 9)
        held = run(shared_doc + [9], "--pin")["cache_entry"]
        shared_before = svc.metric("millipede_prefix_cache_shared_starts_total")
        asked = run_at_once(run, [shared_doc + [61 + i, 62] for i in range(2)])
        for i, r in enumerate(asked):
            check(r is not None and r["cached_tokens"] == 600, f"question {i} on a pinned doc: {r}")
            alone = run(shared_doc + [61 + i, 62], "--no-cache")
            check(r["ids"] == alone["ids"], f"question {i} sharing a pinned doc answered otherwise")
        # A question cancelled while it runs frees only its own blocks: the document's still
        # answer as before.
        bg = svc.client_bg("submit", "--ids", "--prompt", ids_arg(shared_doc + [63, 62]),
                           "--max-tokens", "40", "--ignore-eos", "--no-progress")
        job = read_until(bg.stderr, r"job (\d+) queued", 30).group(1)
        svc.client("cancel", job)
        bg.wait(timeout=60)
        again = run(shared_doc + [61, 62])
        check(again["cached_tokens"] == 600 and again["ids"] == asked[0]["ids"],
              f"after a cancelled question the pinned doc answered otherwise: {again}")
        check(svc.metric("millipede_prefix_cache_shared_starts_total") >= shared_before + 3,
              "questions on a pinned document did not share its blocks")
        check(svc.client("cache", "unpin", str(held)).rc == 0, "unpin failed")
        check(svc.client("cache", "drop", str(held)).rc == 0, "drop failed")

        soak(svc, run)
    finally:
        svc.stop()


def scenario_prefix_cache_host(bin_dir, model):
    """The host tier: under a KV budget of a few documents and host memory for about two more,
    entries evicted from KV memory move to host memory (listed as tier "host"), the host tier
    drops its least recently used ones to make room, a pinned entry is never dropped, and a
    follow-up on a document in host memory reuses it (copied back) and answers as an uncached
    run does. Dropping every entry frees every byte."""
    svc = Service(bin_dir, model, worker_args=["--kv-budget-mb", "2", "--kv-cache-host-mb", "1"])
    try:
        run = runner(svc)

        pinned_doc = doc_ids(300, 1)
        pinned = run(pinned_doc + [11], "--pin")["cache_entry"]
        check(pinned > 0, "a pinned job left no entry")
        prompts = {}
        for k in range(8):
            prompt = doc_ids(700, 200 + k) + [5]
            prompts[run(prompt)["cache_entry"]] = prompt
        listed = {e["id"]: e for e in cache_list(svc)}
        check(pinned in listed, f"the pinned entry was dropped: {sorted(listed)}")
        host = [i for i, e in listed.items() if e["tier"] == "host" and i in prompts]
        check(host, f"no document entry in the host tier: {listed}")
        check(svc.metric("millipede_prefix_cache_demotions_total") >= 1, "no demotion counted")
        check(svc.metric("millipede_prefix_cache_evictions_total") >= 1,
              "the host tier of about two documents dropped none of eight")
        check(svc.metric("millipede_prefix_cache_host_entries") ==
              sum(e["tier"] == "host" for e in listed.values()), "host entries miscounted")

        # A follow-up on a document in host memory: its KV copied back, the uncached answer.
        question = prompts[host[-1]] + [99, 98]
        follow = run(question)
        check(follow["cached_tokens"] >= 700, f"host-tier follow-up reused {follow}")
        check(svc.metric("millipede_prefix_cache_host_hits_total") >= 1, "no host hit counted")
        uncached = run(question, "--no-cache")
        check(follow["ids"] == uncached["ids"],
              f"host-tier answer {follow['ids']} != uncached {uncached['ids']}")
        # The pinned document, wherever it is now.
        again = run(pinned_doc + [12, 13])
        check(again["cached_tokens"] == 300, f"the pinned document was not reused: {again}")
        check(again["ids"] == run(pinned_doc + [12, 13], "--no-cache")["ids"],
              "the pinned document answered otherwise")

        # The soak over the tiers: documents enough to move entries down while jobs copy from
        # them and get cancelled; every tier's accounting ends at what is listed, then at zero.
        soak(svc, run, documents=8)
        check(svc.metric("millipede_prefix_cache_host_entries") == 0, "host entries left")
    finally:
        svc.stop()


def corrupt(path, truncate):
    """Truncates the file by 100 bytes, or flips a byte 100 bytes before its end (its rows)."""
    size = os.path.getsize(path)
    if truncate:
        os.truncate(path, size - 100)
        return
    with open(path, "r+b") as f:
        f.seek(size - 100)
        b = f.read(1)
        f.seek(size - 100)
        f.write(bytes([b[0] ^ 0x5A]))


def scenario_prefix_cache_disk(bin_dir, model):
    """The disk tier: under a KV budget of a few documents and no host tier, evicted entries go
    to the workers' disks (listed as tier "disk") and a follow-up on one reads it back and
    answers as an uncached run does. After a restart of the service the entries are found again
    and still hits; a corrupted file and a truncated one are detected and their follow-ups
    computed again (cached_tokens 0, the same answer), never served; new jobs take ids above the
    entries'."""
    cache_dir = os.path.join(os.path.dirname(model), "kv-cache")
    shutil.rmtree(cache_dir, ignore_errors=True)
    worker_args = ["--kv-budget-mb", "2", "--kv-cache-dir", cache_dir, "--kv-cache-disk-mb", "64"]

    def start():
        svc = Service(bin_dir, model, worker_args=worker_args)
        return svc, runner(svc)

    svc, run = start()
    try:
        prompts, answers = {}, {}
        for k in range(11):
            prompt = doc_ids(700, 300 + k) + [5]
            prompts[run(prompt)["cache_entry"]] = prompt
        on_disk = [e["id"] for e in cache_list(svc) if e["tier"] == "disk"]
        check(len(on_disk) >= 4, f"fewer than four entries on disk: {cache_list(svc)}")
        check(svc.metric("millipede_prefix_cache_spills_total") >= 4, "spills not counted")
        for entry in on_disk:
            answers[entry] = run(prompts[entry] + [99], "--no-cache")["ids"]
        # Before the restart: a hit from disk (a pending write or the file).
        follow = run(prompts[on_disk[-1]] + [99])
        check(follow["cached_tokens"] >= 700, f"disk follow-up reused {follow}")
        check(follow["ids"] == answers[on_disk[-1]], "a disk hit answered otherwise")
        check(svc.metric("millipede_prefix_cache_disk_hits_total") >= 1, "no disk hit counted")
    finally:
        svc.stop()

    # Corrupt the first worker's file of the first entry, truncate the last worker's of the
    # second.
    bad = on_disk[:2]
    ranks = sorted(d for d in os.listdir(cache_dir) if d.startswith("rank-"))
    corrupt(os.path.join(cache_dir, ranks[0], f"{bad[0]}.mkv"), truncate=False)
    corrupt(os.path.join(cache_dir, ranks[-1], f"{bad[1]}.mkv"), truncate=True)
    svc, run = start()
    try:
        listed = {e["id"]: e for e in cache_list(svc)}
        good = [i for i in on_disk[2:-1] if i in listed]
        check(good and all(listed[i]["tier"] == "disk" for i in good),
              f"entries not found again after the restart: {sorted(listed)}")
        check(svc.metric("millipede_prefix_cache_disk_entries") >= len(good), "disk entries gauge")
        # The truncated file is noticed at start (its size) and the entry never indexed, or at
        # the read; the corrupted one at the read (its checksum). Either way: computed again.
        for entry in bad:
            r = run(prompts[entry] + [99])
            check(r["cached_tokens"] == 0, f"a damaged entry {entry} was served: {r}")
            check(r["ids"] == answers[entry], f"damaged entry {entry}: answered otherwise")
        check(all(e["id"] not in bad for e in cache_list(svc)), "a damaged entry is still listed")
        for entry in good:
            r = run(prompts[entry] + [99])
            check(r["cached_tokens"] >= 700, f"entry {entry} after the restart reused {r}")
            check(r["ids"] == answers[entry], f"entry {entry} after the restart answered otherwise")
            check(r["cache_entry"] > max(listed), f"a new job took an entry's id: {r}")
        soak(svc, run, documents=8)
        check(svc.metric("millipede_prefix_cache_disk_entries") == 0, "disk entries left")

        def files():
            return [f for d in ranks for f in os.listdir(os.path.join(cache_dir, d))]
        deadline = time.time() + 10  # a write under way when its entry was dropped
        while files() and time.time() < deadline:
            time.sleep(0.2)
        check(not files(), f"files left on disk: {files()}")
    finally:
        svc.stop()
        shutil.rmtree(cache_dir, ignore_errors=True)


def scenario_prefix_cache_promote(bin_dir, model):
    """A hit on the disk tier with a host tier above it: the entry moves up (the workers read it
    back in the background while the job waits, prefix_cache_promotions_total), is listed in
    the host tier and answers as an uncached run does; a second question finds it there. A file
    a worker cannot read (corrupted on one worker) is never served: the entry is dropped and its
    question computed again with the uncached answer. The soak then runs over all three tiers."""
    cache_dir = os.path.join(os.path.dirname(model), "kv-cache-promote")
    shutil.rmtree(cache_dir, ignore_errors=True)
    svc = Service(bin_dir, model, worker_args=["--kv-budget-mb", "2", "--kv-cache-host-mb", "1",
                                               "--kv-cache-dir", cache_dir,
                                               "--kv-cache-disk-mb", "64"])
    try:
        run = runner(svc)
        prompts = {}
        for k in range(10):
            prompt = doc_ids(700, 400 + k) + [5]
            prompts[run(prompt)["cache_entry"]] = prompt
        on_disk = [e["id"] for e in cache_list(svc) if e["tier"] == "disk"]
        check(len(on_disk) >= 3, f"fewer than three entries on disk: {cache_list(svc)}")
        answers = {e: run(prompts[e] + [99], "--no-cache")["ids"] for e in on_disk[:2]}

        # Wait until the files are complete (an entry still being written is read from memory).
        ranks = sorted(d for d in os.listdir(cache_dir) if d.startswith("rank-"))
        deadline = time.time() + 10
        while not all(os.path.exists(os.path.join(cache_dir, r, f"{e}.mkv"))
                      for r in ranks for e in on_disk[:2]):
            check(time.time() < deadline, "the entries' files were not written")
            time.sleep(0.1)

        entry = on_disk[0]
        follow = run(prompts[entry] + [99])
        check(follow["cached_tokens"] >= 700, f"the promoted follow-up reused {follow}")
        check(follow["ids"] == answers[entry], "a promoted entry answered otherwise")
        check(svc.metric("millipede_prefix_cache_promotions_total") >= 1, "no promotion counted")
        tiers = {e["id"]: e["tier"] for e in cache_list(svc)}
        check(tiers.get(entry) == "host", f"entry {entry} did not move up: {tiers}")
        again = run(prompts[entry] + [99])
        check(again["cached_tokens"] >= 700 and again["ids"] == answers[entry],
              f"a second question on the promoted entry: {again}")

        # One worker's file damaged: never served, dropped, the question computed again.
        damaged = on_disk[1]
        corrupt(os.path.join(cache_dir, ranks[0], f"{damaged}.mkv"), truncate=False)
        r = run(prompts[damaged] + [99])
        check(r["cached_tokens"] == 0, f"a damaged entry was served: {r}")
        check(r["ids"] == answers[damaged], "the damaged entry's question answered otherwise")
        check(all(e["id"] != damaged for e in cache_list(svc)), "the damaged entry is listed")
        check(f"entry {damaged} could not be read back" in svc.log(400),
              "the damaged entry was not found by its read back")
        soak(svc, run, documents=6)
    finally:
        svc.stop()
        shutil.rmtree(cache_dir, ignore_errors=True)


def sparse_chain(svc, run, work):
    """Sparse prefill reuses a prefix only where a prefill step ended: questions in turn about
    one document each take the previous one's entry over at the document's end, which every
    later entry keeps as a reuse length (a step of an earlier job ended there)."""
    policy = os.path.join(work, "vertical-slash.json")
    with open(policy, "w") as f:
        json.dump({"version": 1, "default": {"prefill": "vertical-slash"},
                   "vertical_slash": {"vertical": 16, "slash": 32}, "dense_below_tokens": 0}, f)
    doc = doc_ids(512, 11)  # prefill steps end at 128, 256, 384 and 512
    first = run(doc + [21, 22, 23, 24], "--policy", policy)
    check(first["cached_tokens"] == 0, f"the sparse document came from the cache: {first}")
    for k in range(3):
        q = doc + [30 + k, 40 + k]
        got = run(q, "--policy", policy)
        check(got["cached_tokens"] == 512, f"sparse question {k} reused {got['cached_tokens']}")
        check(got["ids"] == run(q, "--policy", policy, "--no-cache")["ids"],
              f"sparse question {k} answered otherwise")


def scenario_prefix_cache_omnikv(bin_dir, model):
    """OmniKV with its selected layers in the host tier (`--selected-kv host`, a 4-layer model:
    layer 0 filters, layers 2 and 3 keep their prompt in pinned host memory): a follow-up takes
    the document's entry over (the host-tier rows reused in place) and answers as an uncached run
    does; one whose new tokens need more generated rows than the entry has room for copies it
    instead (and the entry, whose prefix the copy's own entry holds, is dropped); a pinned entry is copied by two follow-ups in turn; a long prompt prefills in
    chunks after held host-tier rows; sparse-prefill questions in turn (sparse_chain). Dropping
    every entry frees every byte."""
    work = os.path.dirname(model)
    deep = os.path.join(work, "model-4-layers")
    if not os.path.exists(os.path.join(deep, "config.json")):
        r = subprocess.run([os.path.join(bin_dir, "millipede-mkmodel"), "--preset", "tiny",
                            "--out", deep, "--seed", "9", "--num-layers", "4"],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"mkmodel failed: {r.stderr}")
    policy = os.path.join(work, "omnikv-host.json")
    with open(policy, "w") as f:
        json.dump({"version": 1, "filter": {"top_k": 24}, "default": {"decode": "selected"},
                   "layers": [{"layer": 0, "decode": "filter"}]}, f)
    svc = Service(bin_dir, deep, worker_args=["--selected-kv", "host"],
                  coordinator_args=["--max-step-tokens", "128"])
    try:
        base = runner(svc)

        def run(ids, *extra):
            return base(ids, "--policy", policy, *extra)

        doc = doc_ids(500, 7)  # four chunks of 128: later ones after held host-tier rows
        # The document's job ends with more prompt than the follow-ups: room for them to take
        # its entry over.
        first = run(doc + list(range(11, 51)))
        check(first["cached_tokens"] == 0, f"a first prompt came from the cache: {first}")
        question = doc + [21, 22, 23, 24]
        follow = run(question)
        check(follow["cached_tokens"] >= 500, f"the OmniKV follow-up reused {follow}")
        uncached = run(question, "--no-cache")
        check(follow["ids"] == uncached["ids"],
              f"OmniKV host-tier answer {follow['ids']} != uncached {uncached['ids']}")
        check(cache_list(svc) and all(e["id"] != first["cache_entry"] for e in cache_list(svc)),
              "the first entry was not taken over")
        # More new tokens than the entry's generated rows allow: copied, the same answer.
        entry = follow["cache_entry"]
        def run_long(ids, *extra):
            r = svc.submit("--ids", "--prompt", ids_arg(ids), "--max-tokens", "30",
                           "--ignore-eos", "--json", "--policy", policy, *extra)
            check(r.rc == 0, f"submit failed: {r}")
            return r.json()

        longer = run_long(question + [31])
        check(longer["cached_tokens"] >= 500, f"the longer follow-up reused {longer}")
        # Copied, not taken over; then dropped, as its prefix lives on in the new job's entry.
        listed = [e["id"] for e in cache_list(svc)]
        check(entry not in listed and longer["cache_entry"] in listed,
              f"an entry too small to take over: {entry}, the copy's {longer['cache_entry']}, "
              f"listed {listed}")
        check(longer["ids"] == run_long(question + [31], "--no-cache")["ids"],
              "the copied follow-up answered otherwise")
        # A pinned entry is copied by each follow-up, and stays.
        pinned = run(doc + [41], "--pin")["cache_entry"]
        for k in range(2):
            q = doc + [41, 50 + k]
            got = run(q)
            check(got["cached_tokens"] >= 500, f"pinned follow-up {k} reused {got}")
            check(got["ids"] == run(q, "--no-cache")["ids"], f"pinned follow-up {k} differs")
        check(any(e["id"] == pinned and e["pinned"] for e in cache_list(svc)),
              "the pinned entry went")
        sparse_chain(svc, base, work)
        for e in cache_list(svc):
            if e["pinned"]:
                svc.client("cache", "unpin", str(e["id"]))
            check(svc.client("cache", "drop", str(e["id"])).rc == 0, f"drop {e['id']}")
        run(doc_ids(20, 3), "--no-cache")
        deadline = time.time() + 10
        while svc.metric("millipede_prefix_cache_bytes") > 0 and time.time() < deadline:
            time.sleep(0.2)
        check(svc.metric("millipede_prefix_cache_bytes") == 0, "cache bytes left on the workers")
    finally:
        svc.stop()
