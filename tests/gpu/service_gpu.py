#!/usr/bin/env python3
"""The service on a GPU machine: the coordinator as built without CUDA (from a bundle made by
cluster/bundle.sh, which brings the Cap'n Proto / prometheus-cpp libraries the machine lacks) and
CUDA workers, one per GPU. A prompt through the Cap'n Proto client and through the OpenAI HTTP
API must give the ids and text of `millipede-run --backend cuda` on as many ranks; the metrics
endpoint must count the jobs.

usage: service_gpu.py BIN_DIR GPUS
  BIN_DIR holds millipede-coordinator and millipede (bundle wrappers), millipede-worker,
  millipede-run and millipede-mkmodel (cuda build).
"""
import json
import os
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "service"))
from service_harness import Service, check, make_model, offline  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog"


def main():
    bin_dir, gpus = sys.argv[1], int(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        model = make_model(bin_dir, os.path.join(tmp, "model"))
        want = offline(bin_dir, model, ["--prompt", PROMPT, "--no-bos", "--max-new-tokens", "16",
                                        "--ignore-eos", "--backend", "cuda"], ranks=gpus)
        svc = Service(bin_dir, model, workers=gpus, worker_args=["--backend", "cuda"], http=True)
        try:
            r = svc.submit("--prompt", PROMPT, "--max-tokens", "16", "--ignore-eos", "--json")
            check(r.rc == 0, f"submit failed: {r}")
            got = r.json()
            print("service:", got["ids"], "ttft_s", got["ttft_s"])
            print("offline:", want["ids"])
            check(got["ids"] == want["ids"], "service ids differ from millipede-run")
            body = json.dumps({"model": "model", "prompt": PROMPT, "max_tokens": 16,
                               "temperature": 0, "ignore_eos": True}).encode()
            req = urllib.request.Request(f"http://{svc.http}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            answer = json.loads(urllib.request.urlopen(req, timeout=60).read())
            check(answer["choices"][0]["text"] == want["text"], f"HTTP answer {answer}")
            check(svc.metric("millipede_time_to_first_token_seconds_count") >= 2,
                  "the TTFT histogram did not count both jobs")
            print("workers:", svc.workers())
        finally:
            svc.stop()
    print("service on GPU workers: PASS")


if __name__ == "__main__":
    main()
