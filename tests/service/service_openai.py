"""End-to-end scenarios of the sampling parameters and the OpenAI API features on the CPU
service (imported by service_test.py):
  sampling  the penalties, min-p, logit bias and log-probabilities over RPC equal millipede-run's
            on as many ranks; the client takes --server before or after the command; refusals
            are counted by reason;
  openai    the same over HTTP, plus n > 1, echo, /tokenize and /detokenize, chats with the
            model's chat template (service_chat.py), Content-Type,
            unsupported parameters, a too-large text prompt reported in bytes, every
            refusal counted in millipede_request_errors_total, null and 2.0 accepted as
            defaults and integers, and a chat without max_tokens capped by
            --default-max-tokens.
"""

import json
import os
import subprocess
import urllib.error
import urllib.request

from service_chat import check_chat_template, write_chat_template
from service_harness import Service, check, offline

PROMPT = "The quick brown fox jumps over the lazy dog"


def processed(seed=5):
    """Flags of millipede-run and the client for one sampled job with every logits processor
    on."""
    return ["--temperature", "0.8", "--top-p", "0.95", "--min-p", "0.02", "--seed", str(seed),
            "--repetition-penalty", "1.3", "--presence-penalty", "0.5",
            "--frequency-penalty", "0.4", "--logit-bias", "17:4", "--logit-bias", "33:-100"]


def expect_error(result, code, *fragments):
    check(result.rc != 0, f"expected {code}, got success: {result}")
    check(code in result.err, f"expected {code}: {result}")
    for f in fragments:
        check(f in result.err, f"expected {f!r} in the error: {result}")


def errors_by_reason(svc):
    return {labels: v for (name, labels), v in svc.metrics().items()
            if name == "millipede_request_errors_total"}


def error_delta(before, after):
    return {k.split('"')[1]: after[k] - before.get(k, 0) for k in after
            if after[k] != before.get(k, 0)}


def close_logprobs(a, b):
    """Two runs' per-token [id, logprob, [[id, logprob], ...]] lists agree."""
    if len(a) != len(b):
        return False
    for (ia, la, ta), (ib, lb, tb) in zip(a, b):
        if ia != ib or abs(la - lb) > 1e-4 or [t[0] for t in ta] != [t[0] for t in tb]:
            return False
    return True


def scenario_sampling(bin_dir, model):
    svc = Service(bin_dir, model)
    try:
        base = ["--prompt", PROMPT, "--max-tokens", "16", "--ignore-eos", "--json"]
        offline_base = ["--prompt", PROMPT, "--no-bos", "--max-new-tokens", "16", "--ignore-eos"]
        # Greedy with penalties: the service's tokens are millipede-run's on two ranks, and the
        # penalties changed them.
        penalties = ["--repetition-penalty", "1.5", "--frequency-penalty", "1.0",
                     "--logit-bias", "17:3"]
        plain = offline(bin_dir, model, offline_base, ranks=2)
        want = offline(bin_dir, model, offline_base + penalties, ranks=2)
        r = svc.submit(*base, *penalties)
        check(r.rc == 0, f"greedy with penalties failed: {r}")
        check(r.json()["ids"] == want["ids"], f"penalised greedy: {r.json()['ids']} vs {want}")
        check(want["ids"] != plain["ids"], "the penalties did not change the greedy answer")
        # Sampled with every processor and log-probabilities.
        want = offline(bin_dir, model, offline_base + processed() + ["--logprobs", "5"], ranks=2)
        r = svc.submit(*base, *processed(), "--logprobs", "5")
        check(r.rc == 0, f"sampled with processors failed: {r}")
        got = r.json()
        check(got["ids"] == want["ids"], f"sampled: {got['ids']} vs {want['ids']}")
        check(33 not in got["ids"], "a token biased by -100 was sampled")
        check(close_logprobs(got["logprobs"], want["logprobs"]),
              f"logprobs differ: {got['logprobs'][:2]} vs {want['logprobs'][:2]}")
        check(all(len(t[2]) == 5 and t[1] <= 0 for t in got["logprobs"]), "logprobs shape")
        # The same request again: the same tokens (seeded).
        again = svc.submit(*base, *processed(), "--logprobs", "5")
        check(again.rc == 0 and again.json()["ids"] == got["ids"], "not reproducible")

        # --server before the command.
        cmd = [os.path.join(bin_dir, "millipede"), "--server", svc.server, "models"]
        m = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        check(m.returncode == 0 and json.loads(m.stdout)["num_workers"] == 2,
              f"--server before the command: {m.stderr}")

        # Refusals over RPC, each counted by reason.
        before = errors_by_reason(svc)
        expect_error(svc.submit("--prompt", PROMPT, "--logit-bias", "99999:1"),
                     "INVALID_ARGUMENT", "logit_bias token id 99999")
        expect_error(svc.submit("--prompt", PROMPT, "--presence-penalty", "3"),
                     "INVALID_ARGUMENT", "presence_penalty")
        expect_error(svc.submit("-", "--ids", stdin=" ".join(["5"] * 2100)), "OUT_OF_RANGE",
                     "2100")
        delta = error_delta(before, errors_by_reason(svc))
        # The client refuses an out-of-range penalty itself; the other two reach the service.
        check(delta == {"invalid": 1, "too_long": 1}, f"RPC refusals counted as {delta}")
    finally:
        svc.stop()


def post(svc, path, body, content_type="application/json"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{svc.http}{path}", data=data,
                                 headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def scenario_openai(bin_dir, model):
    write_chat_template(model)
    svc = Service(bin_dir, model, http=True, coordinator_args=("--default-max-tokens", "5"))
    try:
        check_chat_template(svc, post)
        offline_base = ["--prompt", PROMPT, "--no-bos", "--max-new-tokens", "12", "--ignore-eos"]
        request = {"model": "model", "prompt": PROMPT, "max_tokens": 12, "ignore_eos": True,
                   "temperature": 0.8, "top_p": 0.95, "min_p": 0.02, "seed": 5,
                   "repetition_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.4,
                   "logit_bias": {"17": 4, "33": -100}}
        # Completions with every processor and logprobs equal millipede-run's tokens.
        want = offline(bin_dir, model, offline_base + processed() + ["--logprobs", "3"], ranks=2)
        status, answer = post(svc, "/v1/completions", dict(request, logprobs=3))
        check(status == 200, f"completion failed: {status} {answer}")
        choice = answer["choices"][0]
        check(choice["text"] == want["text"], f"text {choice['text']!r} vs {want['text']!r}")
        lp = choice["logprobs"]
        check(len(lp["token_logprobs"]) == len(want["ids"]), f"logprobs: {lp}")
        for mine, theirs in zip(lp["token_logprobs"], want["logprobs"]):
            check(abs(mine - theirs[1]) < 1e-4, f"token logprob {mine} vs {theirs}")
        check(all(1 <= len(t) <= 4 for t in lp["top_logprobs"]), "top_logprobs entries")

        # n = 2: two jobs with seeds 5 and 6; echo puts the prompt first.
        status, answer = post(svc, "/v1/completions", dict(request, n=2, echo=True))
        check(status == 200 and len(answer["choices"]) == 2, f"n=2: {status} {answer}")
        second = offline(bin_dir, model, offline_base + processed(seed=6), ranks=2)
        check(answer["choices"][0]["text"] == PROMPT + want["text"], f"echo: {answer}")
        check(answer["choices"][1]["text"] == PROMPT + second["text"], f"choice 1: {answer}")
        check(answer["usage"]["completion_tokens"] == len(want["ids"]) + len(second["ids"]),
              f"usage {answer['usage']}")

        # /tokenize and /detokenize.
        status, tokens = post(svc, "/tokenize", {"prompt": PROMPT, "add_special_tokens": False})
        check(status == 200 and tokens["count"] == len(tokens["tokens"]) > 0, f"{tokens}")
        check(tokens["max_model_len"] == 2048, f"max_model_len {tokens}")
        status, text = post(svc, "/detokenize", {"tokens": tokens["tokens"]})
        check(status == 200 and text["prompt"] == PROMPT, f"detokenize: {text}")

        # Refusals: each a clear error, each counted by reason.
        before = errors_by_reason(svc)
        status, error = post(svc, "/v1/completions", dict(request, use_beam_search=True))
        check(status == 400 and error["error"]["param"] == "use_beam_search", f"{error}")
        status, error = post(svc, "/v1/completions", dict(request), content_type="text/plain")
        check(status == 415, f"text/plain: {status} {error}")
        status, error = post(svc, "/v1/completions", dict(request, logit_bias={"99999": 1}))
        check(status == 400 and error["error"]["param"] == "logit_bias", f"{error}")
        big = {"prompt": "a" * ((32 << 20) + 10), "max_tokens": 1}
        status, error = post(svc, "/v1/completions", big)
        message = error["error"]["message"]
        check(status == 400 and "bytes" in message and "characters" in message and
              "ids" not in message, f"a too-large text prompt: {status} {message}")
        delta = error_delta(before, errors_by_reason(svc))
        check(delta == {"unsupported": 1, "unsupported_media_type": 1, "invalid": 2},
              f"HTTP refusals counted as {delta}")
        # And the service goes on.
        status, answer = post(svc, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
        check(status == 200, f"no answer after the refusals: {answer}")

        # Clients that send every field: null where they keep the default, 2.0 for an integer.
        nulls = {k: None for k in ("suffix", "min_tokens", "use_beam_search", "length_penalty",
                                   "include_stop_str_in_output", "skip_special_tokens", "n",
                                   "stop", "logprobs", "stream_options", "metadata")}
        status, answer = post(svc, "/v1/completions",
                              dict(nulls, prompt=PROMPT, max_tokens=2.0, ignore_eos=True))
        check(status == 200 and answer["usage"]["completion_tokens"] == 2,
              f"nulls and max_tokens 2.0: {status} {answer}")
        status, error = post(svc, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2.5})
        check(status == 400 and error["error"]["param"] == "max_tokens", f"2.5: {error}")
        # A chat without max_tokens stops at --default-max-tokens.
        status, answer = post(svc, "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": PROMPT}],
                               "ignore_eos": True, "store": False, "parallel_tool_calls": None})
        # (The template's end-of-turn token may still end it sooner.)
        check(status == 200 and (answer["usage"]["completion_tokens"] == 5) ==
              (answer["choices"][0]["finish_reason"] == "length") and
              1 <= answer["usage"]["completion_tokens"] <= 5,
              f"a chat without max_tokens: {status} {answer}")
    finally:
        svc.stop()
