#!/usr/bin/env python3
"""SmolLM2-135M-Instruct, a trained model stored as GGUF (Q4_1), against Hugging Face transformers.

transformers loads the same file (its own GGUF reader, dequantisers and Q/K row order) in fp32 and
is the oracle, as in tests/worker/hf_oracle_test.py, whose tolerances and near-tie rule this test
uses. The prompts are real English text: the prose of the project's docs/*.md (paragraphs in name
order, code blocks and tables left out), tokenized by transformers' tokenizer of the file
(add_special_tokens=False); a prompt of n tokens is the first n of them. Checks:
  (a) the last position's logits at 16, 700, 3000 and 8000 tokens (the model's context is 8192):
      millipede-test-logits with fp32 weights and an fp32 KV cache against transformers in fp32
      (max |diff| / max |logit| within FP32_TOLERANCE). transformers runs the longest prompt once,
      in chunks over its KV cache, and the shorter prompts' logits are rows of that pass (the
      model is causal: row n-1 of a longer prompt is the last row of its first n tokens);
  (b) bf16: --weight-dtype bf16 with a bf16 KV cache against fp32 arithmetic on the same
      bf16-rounded weights, beside transformers' own bf16 run against that reference; ours must
      stay within BF16_RATIO times transformers' error (and within hf_oracle's BF16_TOLERANCE);
  (c) greedy generation of 32 tokens: millipede-run's ids against transformers' greedy ids (a
      plain argmax loop over its KV cache), equal up to a near-tie; and each step's log-
      probabilities (the chosen token and the top 20) against transformers' log-softmax;
  (d) context parallelism: the same run under mpirun -np 2, 3 and 4 gives the same ids as one
      process and log-probabilities within the fp32 tolerance of its;
  (e) fp8: an FP8 (E4M3) KV cache with fp32 weights against transformers in fp32 at some of the
      lengths of (a) (FP8_LENGTHS; any of them with --fp8-lengths), beside a bf16 cache's error against the same reference (both reported: the ratio
      is published in docs/quality.md); the fp8 error must stay below FP8_TOLERANCE with the same
      argmax (up to a near-tie), and greedy generation of FP8_NEW_TOKENS tokens with the fp8
      cache is compared with the bf16 cache's (the first difference is reported). At the longest
      of those lengths, also with calibrated per-layer scales (--kv-scales: transformers' largest
      post-RoPE |K| and |V| per layer over the first FP8_CALIBRATION_TOKENS tokens, / 448),
      within the same tolerance.

Usage: smollm2_oracle_test.py BIN_DIR --model FILE.gguf [--mpiexec MPIEXEC] [--part P ...]
BIN_DIR holds millipede-run and millipede-test-logits; --part (repeatable) runs only some of
logits, bf16, greedy, fp8 (greedy includes the multi-rank runs).
Exit status: 0 all passed; 1 a mismatch, an error or a missing model file (a missing model is a
failure, never a skip: cluster/install-deps.sh --test fetches it); 77 (skipped) only when the
oracle's own packages (torch, transformers, gguf) cannot be imported.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "worker"))
# The tolerances, the near-tie rule and the helpers of the random-weight oracle; its own imports
# are guarded (IMPORT_ERROR), so this import succeeds without torch.
import hf_oracle_test as hf_oracle  # noqa: E402
from hf_oracle_test import (BF16_TOLERANCE, FP32_TOLERANCE, NEAR_TIE, SKIP, Failure,  # noqa: E402
                            relative_diff)

IMPORT_ERROR = hf_oracle.IMPORT_ERROR
if IMPORT_ERROR is None:
    try:
        import gguf  # noqa: F401  (transformers reads GGUF files with it)
        import numpy as np
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.cache_utils import DynamicCache
    except Exception as e:  # ImportError, or a broken install failing inside an import
        IMPORT_ERROR = e

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

LOGIT_LENGTHS = [16, 700, 3000, 8000]
BF16_LENGTHS = [16, 300]
# Ours may be at most this many times transformers' own bf16 error. Both round the weights the
# same way; the engine then keeps fp32 activations (only its KV cache is bf16) where transformers
# rounds every activation, so ours is expected to be well below theirs.
BF16_RATIO = 2.0
GREEDY_LENGTH = 1000
NEW_TOKENS = 32
TOP_LOGPROBS = 20
RANKS = [2, 3, 4]
# transformers' prefill chunk: the attention then covers (about) the causal pairs only, not the
# whole square of the 8000-token prompt, and the mask stays small.
HF_CHUNK = 1024
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
PARTS = ("logits", "bf16", "greedy", "fp8")
# An FP8 cache's logits error against fp32 math (max |diff| / max |logit|). E4M3 keeps 3 mantissa
# bits (one element's rounding up to 1/16 of it): measured 1.6e-2 .. 6.8e-2 at 16 to 8000 tokens,
# 11 to 25 times the bf16 cache's (docs/quality.md); a broken cache is off by about 1.
FP8_TOLERANCE = 1.5e-1
FP8_LENGTHS = [700, 3000]
FP8_NEW_TOKENS = 32
FP8_CALIBRATION_TOKENS = 1024
E4M3_MAX = 448.0


def run(args: List[str], env: Optional[Dict[str, str]] = None) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True,
                              env=dict(os.environ, **(env or {})))
    except OSError as e:
        raise Failure(f"cannot run {args[0]}: {e}")
    if proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise Failure(f"{' '.join(os.path.basename(a) for a in args[:3])} exited "
                      f"{proc.returncode}: {detail[-1] if detail else '(no output)'}")
    return proc.stdout


def prompt_text() -> str:
    """Real English prose the repository ships: the paragraphs of docs/*.md in name order,
    without code blocks, tables, headings and images (a prompt ending inside a table has the
    model repeat the table's layout)."""
    docs = os.path.join(REPO, "docs")
    paragraphs = []
    for name in sorted(n for n in os.listdir(docs) if n.endswith(".md")):
        with open(os.path.join(docs, name), encoding="utf-8") as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
        for block in text.split("\n\n"):
            lines = [line.strip() for line in block.splitlines()
                     if line.strip() and not line.lstrip().startswith(("|", "#", "!["))]
            if len(lines) and len(" ".join(lines).split()) >= 12:
                paragraphs.append(" ".join(lines))
    return "\n\n".join(paragraphs)


class SmolOracle:
    def __init__(self, bin_dir: str, model: str, mpiexec: str, work_dir: str):
        self.bin_dir = bin_dir
        self.model_path = model
        self.mpiexec = mpiexec
        self.work_dir = work_dir
        self.rows = []  # (part, check, measured, limit, verdict, note)
        self.timings = []  # (what, seconds)
        self.hf = None
        self.ids: List[int] = []
        self.fp32_ref = None  # fp32_reference()

    def report(self, part, check, measured, limit, ok, note=""):
        self.rows.append((part, check, measured, limit, "PASS" if ok else "FAIL", note))

    def guarded(self, part, label, fn):
        try:
            fn()
        except Failure as e:
            self.report(part, label, "-", "-", False, str(e))
        except Exception as e:  # a tool's output or transformers failing: reported, not a crash
            self.report(part, label, "-", "-", False, repr(e))

    def timed(self, what, fn):
        start = time.monotonic()
        out = fn()
        self.timings.append((what, time.monotonic() - start))
        return out

    # ---- transformers ---------------------------------------------------------------------------

    def load(self, need_tokens: int):
        directory, name = os.path.split(os.path.abspath(self.model_path))
        tokenizer = self.timed("transformers: tokenizer from the GGUF file",
                               lambda: AutoTokenizer.from_pretrained(directory, gguf_file=name))
        self.ids = tokenizer(prompt_text(), add_special_tokens=False)["input_ids"]
        if len(self.ids) < need_tokens:
            raise Failure(f"docs/*.md give {len(self.ids)} tokens of prose, {need_tokens} needed")
        self.hf = self.timed("transformers: fp32 model from the GGUF file", lambda: (
            AutoModelForCausalLM.from_pretrained(directory, gguf_file=name,
                                                 torch_dtype=torch.float32,
                                                 attn_implementation="eager").eval()))

    def hf_prefill(self, ids: Sequence[int], rows: Sequence[int]):
        """transformers' logits (fp32 numpy) at positions `rows` of one pass over `ids`, and the
        KV cache after it. The pass goes in HF_CHUNK pieces over a DynamicCache; only the wanted
        rows go through the LM head."""
        cache = DynamicCache()
        out = {}
        with torch.no_grad():
            for start in range(0, len(ids), HF_CHUNK):
                piece = list(ids[start:start + HF_CHUNK])
                hidden = self.hf.model(input_ids=torch.tensor([piece]), past_key_values=cache,
                                       use_cache=True).last_hidden_state[0]
                wanted = [r for r in rows if start <= r < start + len(piece)]
                if wanted:
                    logits = self.hf.lm_head(hidden[[r - start for r in wanted]]).float()
                    for r, row in zip(wanted, logits):
                        out[r] = row.numpy().copy()
        return out, cache

    def hf_greedy(self, ids: Sequence[int]):
        """Greedy ids and each step's logits: an argmax loop over transformers' KV cache, EOS
        ignored (generate() does not run on this torch/accelerate pair)."""
        rows, cache = self.hf_prefill(ids, [len(ids) - 1])
        logits = rows[len(ids) - 1]
        new_ids, steps = [], []
        with torch.no_grad():
            for step in range(NEW_TOKENS):
                steps.append(logits)
                token = int(np.argmax(logits))
                new_ids.append(token)
                if step + 1 == NEW_TOKENS:
                    break
                hidden = self.hf.model(input_ids=torch.tensor([[token]]), past_key_values=cache,
                                       use_cache=True).last_hidden_state[0, -1]
                logits = self.hf.lm_head(hidden).float().numpy().copy()
        return new_ids, steps

    # ---- the engine -----------------------------------------------------------------------------

    def write_ids(self, ids: Sequence[int]) -> str:
        path = os.path.join(self.work_dir, f"prompt_{len(ids)}.txt")
        with open(path, "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        return path

    def engine_logits(self, ids: Sequence[int], dtype: str = "fp32", kv_dtype: str = "",
                      extra: Sequence[str] = ()):
        out = os.path.join(self.work_dir, "logits.f32")
        run([os.path.join(self.bin_dir, "millipede-test-logits"), "--model", self.model_path,
             "--prompt-ids", self.write_ids(ids), "--out", out,
             "--kv-dtype", kv_dtype or dtype, "--weight-dtype", dtype] + list(extra))
        return np.fromfile(out, dtype="<f4")

    def engine_generate(self, ids: Sequence[int], ranks: int = 1, kv_dtype: str = "fp32",
                        new_tokens: int = NEW_TOKENS):
        args = [os.path.join(self.bin_dir, "millipede-run"), "--model", self.model_path,
                "--prompt-ids", self.write_ids(ids), "--max-new-tokens", str(new_tokens),
                "--ignore-eos", "--json", "--kv-dtype", kv_dtype, "--weight-dtype", "fp32",
                "--logprobs", str(TOP_LOGPROBS)]
        if ranks > 1:
            args = [self.mpiexec, "-np", str(ranks)] + args
        result = json.loads(run(args, env=MPI_ENV))
        if len(result["ids"]) != new_tokens or len(result["logprobs"]) != new_tokens:
            raise Failure(f"{ranks} rank(s): {len(result['ids'])} ids and "
                          f"{len(result['logprobs'])} logprobs, {new_tokens} wanted")
        return result["ids"], result["logprobs"]

    def fp32_reference(self):
        """transformers' fp32 logits of every LOGIT_LENGTHS prompt's last position (one pass)."""
        if self.fp32_ref is None:
            longest = max(LOGIT_LENGTHS)
            self.fp32_ref, _ = self.timed(
                f"transformers: fp32 pass over {longest} tokens",
                lambda: self.hf_prefill(self.ids[:longest], [n - 1 for n in LOGIT_LENGTHS]))
        return self.fp32_ref

    # ---- (a) fp32 logits ------------------------------------------------------------------------

    def check_logits(self):
        ref = self.fp32_reference()
        for n in LOGIT_LENGTHS:
            def one(n=n):
                ours = self.timed(f"engine: fp32 logits n={n}",
                                  lambda: self.engine_logits(self.ids[:n]))
                if ours.shape != ref[n - 1].shape:
                    raise Failure(f"engine wrote {ours.size} logits, HF has {ref[n - 1].size}")
                err = relative_diff(ours, ref[n - 1])
                same = int(np.argmax(ours)) == int(np.argmax(ref[n - 1]))
                self.report("logits", f"n={n} fp32 vs HF fp32", f"{err:.2e}",
                            f"{FP32_TOLERANCE:.0e}", err < FP32_TOLERANCE,
                            "" if same else "argmax differs")
            self.guarded("logits", f"n={n}", one)

    # ---- (e) fp8 --------------------------------------------------------------------------------

    def kv_scales_file(self) -> str:
        """A --kv-scales file: per layer, transformers' largest post-RoPE |K| and |V| over the
        first FP8_CALIBRATION_TOKENS tokens, divided by E4M3's largest value."""
        _, cache = self.hf_prefill(self.ids[:FP8_CALIBRATION_TOKENS], [])
        if hasattr(cache, "layers"):
            kv = [(layer.keys, layer.values) for layer in cache.layers]
        else:
            kv = list(zip(cache.key_cache, cache.value_cache))
        scales = {"k_scale": [float(k.abs().max()) / E4M3_MAX for k, _ in kv],
                  "v_scale": [float(v.abs().max()) / E4M3_MAX for _, v in kv]}
        path = os.path.join(self.work_dir, "kv_scales.json")
        with open(path, "w") as f:
            json.dump(scales, f)
        return path

    def check_fp8(self):
        ref = self.fp32_reference()
        unscaled = {}  # the fp8 logits by length
        for n in FP8_LENGTHS:
            def one(n=n):
                fp8 = self.timed(f"engine: fp8 KV logits n={n}",
                                 lambda: self.engine_logits(self.ids[:n], "fp32", "fp8"))
                unscaled[n] = fp8
                bf16 = self.timed(f"engine: bf16 KV logits n={n}",
                                  lambda: self.engine_logits(self.ids[:n], "fp32", "bf16"))
                err8, err16 = relative_diff(fp8, ref[n - 1]), relative_diff(bf16, ref[n - 1])
                top = int(np.argmax(ref[n - 1]))
                gap = float(ref[n - 1][top] - ref[n - 1][int(np.argmax(fp8))])
                # A flipped argmax counts only where the reference's top two are closer than the
                # fp8 error could move them.
                same = gap <= max(NEAR_TIE, 2 * err8) * float(np.max(np.abs(ref[n - 1])))
                self.report("fp8", f"n={n} fp8 KV vs HF fp32", f"{err8:.2e}",
                            f"{FP8_TOLERANCE:.0e}", err8 < FP8_TOLERANCE and same,
                            f"bf16 KV: {err16:.2e} (ratio {err8 / max(err16, 1e-12):.1f})"
                            + ("" if same else "; argmax differs beyond a near-tie"))
            self.guarded("fp8", f"n={n}", one)

        def scaled(n=max(FP8_LENGTHS)):
            scales = self.kv_scales_file()
            fp8 = self.timed(f"engine: fp8 KV logits with calibrated scales n={n}",
                             lambda: self.engine_logits(self.ids[:n], "fp32", "fp8",
                                                        ["--kv-scales", scales]))
            plain = unscaled[n] if n in unscaled else self.engine_logits(self.ids[:n], "fp32", "fp8")
            err, err_plain = relative_diff(fp8, ref[n - 1]), relative_diff(plain, ref[n - 1])
            self.report("fp8", f"n={n} fp8 KV, calibrated scales, vs HF fp32", f"{err:.2e}",
                        f"{FP8_TOLERANCE:.0e}", err < FP8_TOLERANCE,
                        f"unscaled: {err_plain:.2e}; "
                        + ("identical logits" if np.array_equal(fp8, plain) else "logits differ"))
        self.guarded("fp8", "calibrated scales", scaled)
        prompt = self.ids[:GREEDY_LENGTH]
        ids8, _ = self.engine_generate(prompt, kv_dtype="fp8", new_tokens=FP8_NEW_TOKENS)
        ids16, _ = self.engine_generate(prompt, kv_dtype="bf16", new_tokens=FP8_NEW_TOKENS)
        first = next((i for i, (a, b) in enumerate(zip(ids8, ids16)) if a != b), None)
        self.report("fp8", f"greedy {FP8_NEW_TOKENS} tokens after {GREEDY_LENGTH}, fp8 vs bf16 KV",
                    f"{FP8_NEW_TOKENS if first is None else first} equal", "-", True,
                    "identical" if first is None else f"first difference at token {first}")

    # ---- (b) bf16 -------------------------------------------------------------------------------

    def check_bf16(self):
        longest = max(BF16_LENGTHS)
        rows = [n - 1 for n in BF16_LENGTHS]
        ours = {n: self.timed(f"engine: bf16 logits n={n}",
                              lambda n=n: self.engine_logits(self.ids[:n], "bf16"))
                for n in BF16_LENGTHS}
        # transformers in bf16, then the same model widened back: fp32 arithmetic on exactly the
        # bf16-rounded weights (round to nearest even, as the engine's dequantiser rounds).
        self.hf.to(torch.bfloat16)
        theirs, _ = self.timed(f"transformers: bf16 pass over {longest} tokens",
                               lambda: self.hf_prefill(self.ids[:longest], rows))
        self.hf.to(torch.float32)
        ref, _ = self.timed(f"transformers: fp32 pass over {longest} tokens, bf16 weights",
                            lambda: self.hf_prefill(self.ids[:longest], rows))
        self.hf = None  # its weights are rounded now: no later check may use it
        for n in BF16_LENGTHS:
            err_ours = relative_diff(ours[n], ref[n - 1])
            err_hf = relative_diff(theirs[n - 1], ref[n - 1])
            limit = min(BF16_RATIO * err_hf, BF16_TOLERANCE)
            self.report("bf16", f"n={n} ours (bf16 weights+KV) vs fp32 math, bf16 weights",
                        f"{err_ours:.2e}", f"{limit:.1e}", err_ours < limit,
                        f"transformers bf16 vs the same reference: {err_hf:.2e}")

    # ---- (c) greedy and (d) context parallelism -------------------------------------------------

    def first_difference(self, ours, ref, ref_steps, label):
        """None when `ours` equals `ref`; else the step of the first difference, reported as a
        near-tie (accepted) or a failure by hf_oracle's rule on transformers' logits there."""
        if ours == ref:
            return None
        step = next(i for i in range(NEW_TOKENS) if ours[i] != ref[i])
        logits = ref_steps[step]
        gap = float((logits[ref[step]] - logits[ours[step]]) / np.abs(logits).max())
        near_tie = gap < NEAR_TIE
        self.report("greedy", label, f"{step}/{NEW_TOKENS} equal", "all", near_tie,
                    f"first difference at step {step}: {ours[step]} vs {ref[step]}; relative "
                    f"margin in transformers' logits {gap:.1e}"
                    + (": a near-tie, accepted" if near_tie else ""))
        return step

    @staticmethod
    def logprob_error(logprobs, steps, upto):
        """max over the first `upto` steps of |engine logprob - transformers' log-softmax| (the
        chosen token and the top ones) / max |logit| of the step."""
        worst = 0.0
        for (token, lp, top), logits in zip(logprobs[:upto], steps[:upto]):
            t = torch.from_numpy(logits)
            ref = torch.log_softmax(t.double(), dim=-1).numpy()
            scale = float(np.abs(logits).max())
            for i, v in [(token, lp)] + [tuple(x) for x in top]:
                worst = max(worst, abs(v - float(ref[i])) / scale)
        return worst

    @staticmethod
    def logprob_diff(a, b, scales, upto):
        """max |a - b| over the first `upto` steps (tokens both runs list) / max |logit|."""
        worst = 0.0
        for (ta, la, topa), (tb, lb, topb), scale in zip(a[:upto], b[:upto], scales[:upto]):
            va = dict([(ta, la)] + [tuple(x) for x in topa])
            vb = dict([(tb, lb)] + [tuple(x) for x in topb])
            for i in va.keys() & vb.keys():
                worst = max(worst, abs(va[i] - vb[i]) / scale)
        return worst

    def check_greedy(self):
        prompt = self.ids[:GREEDY_LENGTH]
        ref, ref_steps = self.timed(f"transformers: greedy {NEW_TOKENS} after {GREEDY_LENGTH}",
                                    lambda: self.hf_greedy(prompt))
        scales = [float(np.abs(s).max()) for s in ref_steps]
        one_ids, one_lp = self.timed(f"engine: greedy, 1 process",
                                     lambda: self.engine_generate(prompt))
        label = f"n={GREEDY_LENGTH} greedy {NEW_TOKENS} ids, 1 process vs HF"
        step = self.first_difference(one_ids, ref, ref_steps, label)
        if step is None:
            self.report("greedy", label, f"{NEW_TOKENS}/{NEW_TOKENS} equal", "all", True)
        upto = NEW_TOKENS if step is None else step + 1
        err = self.logprob_error(one_lp, ref_steps, upto)
        self.report("greedy", f"logprobs of {upto} steps, 1 process vs HF", f"{err:.2e}",
                    f"{FP32_TOLERANCE:.0e}", err < FP32_TOLERANCE)

        for ranks in RANKS:
            def cp(ranks=ranks):
                ids, lp = self.timed(f"engine: greedy, {ranks} ranks",
                                     lambda: self.engine_generate(prompt, ranks))
                label = f"greedy ids, {ranks} ranks vs 1 process"
                # A near-tie between the ranks' runs is judged on transformers' logits where
                # the one-process run still follows them, else on the one-process logprobs.
                cp_step = next((i for i in range(NEW_TOKENS) if ids[i] != one_ids[i]), None)
                if cp_step is None:
                    self.report("greedy", label, f"{NEW_TOKENS}/{NEW_TOKENS} equal", "all", True)
                    upto_cp = NEW_TOKENS
                else:
                    top = dict([(one_lp[cp_step][0], one_lp[cp_step][1])]
                               + [tuple(x) for x in one_lp[cp_step][2]])
                    gap = ((top[one_ids[cp_step]] - top[ids[cp_step]]) / scales[cp_step]
                           if ids[cp_step] in top else float("inf"))
                    ok = gap < NEAR_TIE
                    self.report("greedy", label, f"{cp_step}/{NEW_TOKENS} equal", "all", ok,
                                f"first difference at step {cp_step}: {ids[cp_step]} vs "
                                f"{one_ids[cp_step]}; relative margin {gap:.1e}"
                                + (": a near-tie, accepted" if ok else ""))
                    upto_cp = cp_step + 1
                diff = self.logprob_diff(lp, one_lp, scales, upto_cp)
                self.report("greedy", f"logprobs, {ranks} ranks vs 1 process", f"{diff:.2e}",
                            f"{FP32_TOLERANCE:.0e}", diff < FP32_TOLERANCE)
                n = min(upto, upto_cp)
                err = self.logprob_error(lp, ref_steps, n)
                self.report("greedy", f"logprobs of {n} steps, {ranks} ranks vs HF", f"{err:.2e}",
                            f"{FP32_TOLERANCE:.0e}", err < FP32_TOLERANCE)
            self.guarded("greedy", f"{ranks} ranks", cp)

    def print_table(self):
        header = ("part", "check", "measured", "limit", "result")
        widths = [max(len(str(r[i])) for r in self.rows + [header]) for i in range(5)]
        line = "  ".join(f"{{:<{w}}}" for w in widths)
        print(line.format(*header))
        print("  ".join("-" * w for w in widths))
        for row in self.rows:
            print(line.format(*row[:5]) + (f"  {row[5]}" if row[5] else ""))
        print("\ntimings:")
        for what, seconds in self.timings:
            print(f"  {seconds:7.1f} s  {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bin_dir", nargs="?", default=os.environ.get("MILLIPEDE_BIN_DIR"),
                        help="folder with millipede-run and millipede-test-logits")
    parser.add_argument("--model", required=True, help="SmolLM2-135M-Instruct's GGUF file")
    parser.add_argument("--mpiexec", default="mpirun", help="MPI launcher for the rank counts")
    parser.add_argument("--part", action="append", choices=PARTS,
                        help="run only this part (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary files")
    parser.add_argument("--fp8-lengths", help="comma-separated prompt lengths of the fp8 part, "
                        "each one of " + ",".join(map(str, LOGIT_LENGTHS)))
    args = parser.parse_args()
    if not args.bin_dir:
        parser.error("give BIN_DIR or set MILLIPEDE_BIN_DIR")

    # The model is part of the test set-up: without it the test fails.
    if not os.path.isfile(args.model):
        print(f"FAIL: {args.model} not found; cluster/install-deps.sh --test fetches it "
              f"(cluster/fetch-smollm2.sh)")
        return 1
    if IMPORT_ERROR is not None:
        print(f"SKIP: the oracle needs numpy, torch, transformers and gguf ({IMPORT_ERROR}); "
              f"cluster/install-deps.sh --test installs them into build/pyenv")
        return SKIP
    transformers.logging.set_verbosity_error()
    # torch may start with one thread; the engine uses every CPU it is given, so does the oracle.
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    for tool in ("millipede-run", "millipede-test-logits"):
        if not os.access(os.path.join(args.bin_dir, tool), os.X_OK):
            print(f"FAIL: {tool} not found in {args.bin_dir}")
            return 1
    parts = args.part or list(PARTS)
    if args.fp8_lengths:
        lengths = [int(x) for x in args.fp8_lengths.split(",")]
        if any(n not in LOGIT_LENGTHS for n in lengths):
            parser.error(f"--fp8-lengths: each length must be one of {LOGIT_LENGTHS}")
        FP8_LENGTHS[:] = lengths

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"numpy {np.__version__}; parts {', '.join(parts)}")
    start = time.monotonic()
    work_dir = tempfile.mkdtemp(prefix="smollm2_oracle_")
    oracle = SmolOracle(args.bin_dir, args.model, args.mpiexec, work_dir)
    try:
        try:
            oracle.load(max(LOGIT_LENGTHS + BF16_LENGTHS + [GREEDY_LENGTH]))
        except Failure as e:
            oracle.report("load", "transformers", "-", "-", False, str(e))
        else:
            print(f"{len(oracle.ids)} tokens of prose from docs/*.md")
            # bf16 rounds transformers' weights in place, so it runs last.
            for part in [p for p in ("logits", "greedy", "fp8", "bf16") if p in parts]:
                oracle.guarded(part, part, getattr(oracle, f"check_{part}"))
        oracle.print_table()
    finally:
        if args.keep:
            print(f"files kept in {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    failed = sum(1 for r in oracle.rows if r[4] != "PASS")
    print(f"{len(oracle.rows) - failed}/{len(oracle.rows)} checks passed in "
          f"{time.monotonic() - start:.1f} s")
    return 1 if failed or not oracle.rows else 0


if __name__ == "__main__":
    sys.exit(main())
