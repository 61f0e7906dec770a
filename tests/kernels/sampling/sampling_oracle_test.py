#!/usr/bin/env python3
"""Hugging Face transformers' logits processors as an independent oracle for the sampling
references (kernels/sampling_penalties, kernels/sampling, kernels/sampling_logprobs).

Random cases (vocabularies of 1 to 3000 ids, -inf entries, random prompts and outputs, every
parameter on or off) go through millipede-test-sampling; the same inputs go through
  - SequenceBiasLogitsProcessor (the logit bias), then RepetitionPenaltyLogitsProcessor over the
    prompt and the output, then the frequency and presence penalties written from vLLM's
    definition (transformers has no processor for them: counts over the output only);
  - TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper and MinPLogitsWarper, in the
    order transformers' generate() applies them, on our penalised logits, then softmax: the
    kept tokens and their probabilities must equal the distribution SampleRef draws from;
  - torch.log_softmax and torch.topk for the log-probabilities.
transformers computes in float32 and we in double, so a case whose top-p or min-p boundary lies
within BOUNDARY of a token's cumulative mass or probability ratio may keep one token more or less;
such cases are counted and must stay rare.

Usage: sampling_oracle_test.py BIN_DIR (holding millipede-test-sampling).
Exit status: 0 all passed, 1 a mismatch, 77 (skipped) when torch or transformers cannot be
imported.
"""

import json
import math
import os
import random
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from transformers import (MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                              SequenceBiasLogitsProcessor, TemperatureLogitsWarper,
                              TopKLogitsWarper, TopPLogitsWarper)
    IMPORT_ERROR = None
except Exception as e:  # ImportError, or a broken install failing inside an import
    IMPORT_ERROR = e

SKIP = 77
CASES = 400
# Penalised logits: float32 (transformers, a few roundings of the intermediate values) against
# double rounded once (ours), relative to the largest intermediate value.
LOGIT_TOLERANCE = 2e-6
# Probabilities of the kept tokens, and log-probabilities.
PROB_TOLERANCE = 2e-6
LOGPROB_TOLERANCE = 2e-5
# A top-p or min-p cut this close to a boundary may fall either way in float32.
BOUNDARY = 1e-5


def random_case(rng):
    vocab = rng.choice([1, 2, 7, 50, 257, 1000, 3000])
    logits = [rng.uniform(-6, 6) for _ in range(vocab)]
    if vocab > 2:
        for i in rng.sample(range(vocab), vocab // 10):
            logits[i] = None  # -inf
    if all(x is None for x in logits):
        logits[0] = 0.0
    finite = [i for i, x in enumerate(logits) if x is not None]
    params = {"temperature": rng.choice([0.0, 0.3, 0.7, 1.0, 1.6])}
    if rng.random() < 0.5:
        params["top_k"] = rng.choice([1, 3, 40, 100000])
    if rng.random() < 0.5:
        params["top_p"] = rng.choice([0.05, 0.5, 0.9, 0.99])
    if rng.random() < 0.5:
        params["min_p"] = rng.choice([0.01, 0.1, 0.5, 1.0])
    if rng.random() < 0.6:
        params["repetition_penalty"] = rng.choice([0.5, 0.9, 1.3, 2.0])
    if rng.random() < 0.6:
        params["presence_penalty"] = rng.uniform(-2, 2)
    if rng.random() < 0.6:
        params["frequency_penalty"] = rng.uniform(-2, 2)
    if rng.random() < 0.5:
        ids = rng.sample(range(vocab), min(vocab, rng.randint(1, 8)))
        params["logit_bias"] = [[i, rng.uniform(-100, 100)] for i in ids]
    prompt = [rng.randrange(vocab) for _ in range(rng.randint(0, 40))]
    output = [rng.randrange(vocab) for _ in range(rng.randint(0, 20))]
    return {"logits": logits, "prompt": prompt, "output": output, "params": params,
            "token": rng.choice(finite), "k": rng.choice([0, 1, 5, 20])}


def as_tensor(values):
    return torch.tensor([[-math.inf if v is None else v for v in values]], dtype=torch.float32)


def oracle_penalised(case):
    p = case["params"]
    scores = as_tensor(case["logits"])
    history = torch.tensor([case["prompt"] + case["output"]], dtype=torch.long)
    empty = torch.zeros((1, 0), dtype=torch.long)
    if p.get("logit_bias"):
        bias = SequenceBiasLogitsProcessor(
            sequence_bias={(i,): float(b) for i, b in p["logit_bias"]})
        scores = bias(empty, scores)
    if p.get("repetition_penalty", 1.0) != 1.0 and history.shape[1] > 0:
        scores = RepetitionPenaltyLogitsProcessor(p["repetition_penalty"])(history, scores)
    counts = torch.zeros_like(scores)
    for i in case["output"]:
        counts[0, i] += 1
    scores = scores - p.get("frequency_penalty", 0.0) * counts
    scores = scores - p.get("presence_penalty", 0.0) * (counts > 0).float()
    return scores


def oracle_distribution(penalised, p):
    """transformers' warpers on our penalised logits: {id: probability}, and whether a cut
    lies near a boundary."""
    scores = penalised.clone()
    if p["temperature"] == 0.0:
        return {int(torch.argmax(scores[0])): 1.0}, False
    scores = TemperatureLogitsWarper(p["temperature"])(None, scores)
    if p.get("top_k", 0) > 0:
        scores = TopKLogitsWarper(p["top_k"])(None, scores)
    near = False
    if p.get("top_p", 1.0) < 1.0:
        probs = torch.softmax(scores[0].double(), dim=-1).numpy()
        order = np.argsort(-probs, kind="stable")
        before = np.concatenate([[0.0], np.cumsum(probs[order])[:-1]])
        near |= bool(np.any(np.abs(before[probs[order] > 0] - p["top_p"]) < BOUNDARY))
        scores = TopPLogitsWarper(p["top_p"])(None, scores)
    if p.get("min_p", 0.0) > 0.0:
        probs = torch.softmax(scores[0].double(), dim=-1).numpy()
        ratio = probs / probs.max()
        near |= bool(np.any(np.abs(ratio[probs > 0] - p["min_p"]) < BOUNDARY))
        scores = MinPLogitsWarper(p["min_p"])(None, scores)
    probs = torch.softmax(scores[0].double(), dim=-1).numpy()
    return {int(i): float(probs[i]) for i in np.nonzero(probs)[0]}, near


def check_case(index, case, ours):
    errors = []
    p = case["params"]
    expected = oracle_penalised(case)[0].numpy().astype(np.float64)
    got = np.array([-math.inf if v is None else v for v in ours["penalised"]])
    finite = np.isfinite(expected)
    raw = np.array([0.0 if v is None else abs(v) for v in case["logits"]])
    bias = np.zeros_like(raw)
    for i, b in p.get("logit_bias", []):
        bias[i] = abs(b)
    counts = np.bincount(np.array(case["output"], dtype=np.int64), minlength=raw.shape[0])
    scale = (1.0 + (raw + bias) * max(1.0, p.get("repetition_penalty", 1.0)) +
             abs(p.get("frequency_penalty", 0.0)) * counts + abs(p.get("presence_penalty", 0.0)))
    if not np.array_equal(finite, np.isfinite(got)):
        errors.append("penalised logits: -inf entries differ")
    elif np.any(np.abs(got[finite] - expected[finite]) > LOGIT_TOLERANCE * scale[finite]):
        worst = int(np.argmax(np.abs(got - expected) * finite))
        errors.append("penalised logit %d: %r, transformers %r" %
                      (worst, got[worst], expected[worst]))
        return errors, False

    penalised = torch.from_numpy(got.astype(np.float32)).unsqueeze(0)
    want, near = oracle_distribution(penalised, p)
    total = sum(w for _, w in ours["candidates"])
    have = {int(i): w / total for i, w in ours["candidates"]}
    if set(have) != set(want):
        if not near:
            errors.append("kept tokens %s, transformers keeps %s" %
                          (sorted(have)[:10], sorted(want)[:10]))
    else:
        for i, prob in want.items():
            if abs(have[i] - prob) > PROB_TOLERANCE:
                errors.append("token %d: probability %r, transformers %r" % (i, have[i], prob))
                break

    raw = as_tensor(case["logits"])[0].double()
    log_probs = torch.log_softmax(raw, dim=-1)
    token = case["token"]
    if abs(ours["token_logprob"] - float(log_probs[token])) > LOGPROB_TOLERANCE:
        errors.append("token logprob %r, torch %r" % (ours["token_logprob"],
                                                       float(log_probs[token])))
    k = min(case["k"], raw.shape[0])
    values, ids = torch.topk(raw, k)
    ours_ids = ours["top_ids"][:k]
    if [int(i) for i in ids] != ours_ids and sorted(values.tolist()) == sorted(set(values.tolist())):
        errors.append("top ids %s, torch %s" % (ours_ids, [int(i) for i in ids]))
    for j in range(k):
        want_lp = float(log_probs[ours_ids[j]])
        have_lp = ours["top_logprobs"][j]
        have_lp = -math.inf if have_lp is None else have_lp
        if not (want_lp == have_lp or abs(want_lp - have_lp) <= LOGPROB_TOLERANCE):
            errors.append("top logprob %d: %r, torch %r" % (j, have_lp, want_lp))
            break
    if any(i != -1 for i in ours["top_ids"][k:]):
        errors.append("the tail past the vocabulary is not -1")
    return ["case %d: %s" % (index, e) for e in errors], near and set(have) != set(want)


def main():
    if IMPORT_ERROR is not None:
        print("skipped: torch / transformers unavailable (%s)" % IMPORT_ERROR)
        return SKIP
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MILLIPEDE_BIN_DIR", "")
    tool = os.path.join(bin_dir, "millipede-test-sampling")
    rng = random.Random(20240517)
    cases = [random_case(rng) for _ in range(CASES)]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cases, f)
        path = f.name
    try:
        out = subprocess.run([tool, path], capture_output=True, text=True, check=False)
    finally:
        os.unlink(path)
    if out.returncode != 0:
        print("millipede-test-sampling failed:\n" + out.stderr)
        return 1
    results = json.loads(out.stdout)
    failures, boundary = [], 0
    for i, (case, ours) in enumerate(zip(cases, results)):
        errors, at_boundary = check_case(i, case, ours)
        failures += errors
        boundary += at_boundary
    for e in failures[:20]:
        print(e)
    print("%d cases, %d failures, %d decided at a float32 boundary" %
          (len(cases), len(failures), boundary))
    if boundary > len(cases) // 50:
        print("too many boundary cases")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
