#!/usr/bin/env python3
"""Hugging Face transformers as an independent oracle for the engine.

For a set of model variants written by millipede-mkmodel (random weights, HF format), this test
compares
  (a) the last position's logits of random prompts: millipede-test-logits against the HF model's
      forward pass (fp32: max |diff| / max |logit| within FP32_TOLERANCE);
  (b) greedy generation of 16 tokens: millipede-run --json ids against HF generate();
  (c) for a bf16 model, the logits against HF computing in bf16 (BF16_TOLERANCE), and against HF
      computing in fp32 with the same bf16 weights (FP32_TOLERANCE: the engine keeps fp32
      activations, so only the weights are rounded).
Each variant also has a control where it makes sense: the HF logits with the variant's feature
switched off (no rope scaling, another eps, no biases) must differ from the real ones by far more
than the tolerance, so that a pass shows the engine implements the feature, not that the feature
does not matter for this model.

Usage: hf_oracle_test.py BIN_DIR   (or $MILLIPEDE_BIN_DIR), BIN_DIR holding millipede-mkmodel,
millipede-run and millipede-test-logits. Options: --keep (keep the temporary models),
--case NAME (run only that case; repeatable).
Exit status: 0 all passed, 1 a mismatch or error, 77 (skipped) when torch or transformers
cannot be imported.
"""

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Callable, Dict, List, Optional

# The oracle's own dependencies; without them the test is skipped (see main).
try:
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModelForCausalLM
    IMPORT_ERROR = None
except Exception as e:  # ImportError, or a broken install failing inside an import
    IMPORT_ERROR = e

SKIP = 77

# fp32 weights and an fp32 KV cache: both sides compute in fp32 and differ only in summation
# order (observed: a few 1e-7 relative), so this leaves a wide margin and still sits orders of
# magnitude below what any of the controls moves the logits by.
FP32_TOLERANCE = 1e-5
# HF computing in bf16 rounds every activation to 8 mantissa bits (observed ~1e-2 relative).
BF16_TOLERANCE = 3e-2
# A control must move the HF logits by at least this many tolerances to count as sensitive.
CONTROL_MARGIN = 100
# Greedy ids may part ways where the two best logits are closer than this (relative to the
# largest logit): then the argmax is decided by rounding, and either choice is right.
NEAR_TIE = 1e-4
NEW_TOKENS = 16
# mkmodel draws projections with std 0.02, which makes attention scores ~0.03 and softmax almost
# uniform: rotary positions then barely change the logits (a wrong rope_theta moved them by
# ~2e-3 relative). Scaling q_proj and k_proj by 8 (a power of two, so exact in bf16 too) gives
# scores of order one, and the same wrong theta moves them by ~0.5.
ATTENTION_SHARPEN = 8.0


@dataclasses.dataclass
class Case:
    name: str
    mkmodel_args: List[str]
    prompt_lengths: List[int] = dataclasses.field(default_factory=lambda: [1, 7, 300])
    gen_prompt_length: int = 7
    dtype: str = "fp32"
    # The variant's feature switched off on the HF side, for the control: config overrides
    # and/or an in-place change of the loaded model.
    control_config: Optional[Dict] = None
    control_model: Optional[Callable] = None
    control_what: str = ""


def zero_qkv_biases(model):
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.zero_()


NO_SCALING = {"rope_scaling": None}

CASES = [
    # The tiny preset: 4 query heads sharing 2 KV heads.
    Case("llama-gqa", []),
    Case("qwen2-bias", ["--model-type", "qwen2"],
         control_model=zero_qkv_biases, control_what="q/k/v biases zeroed"),
    # Multi-query attention on top of the family change.
    Case("mistral-mqa", ["--model-type", "mistral", "--num-kv-heads", "1"]),
    Case("tied-embeddings", ["--tie-word-embeddings"]),
    # original_max 64 puts the 8 rotary frequencies of head_dim 16 in all three llama3 bands
    # (kept, smoothed, divided by factor).
    Case("rope-llama3", ["--rope-scaling", "llama3", "--rope-factor", "8",
                         "--rope-original-max", "64"],
         gen_prompt_length=100, control_config=NO_SCALING, control_what="no rope scaling"),
    Case("rope-linear", ["--rope-scaling", "linear", "--rope-factor", "4"],
         gen_prompt_length=100, control_config=NO_SCALING, control_what="no rope scaling"),
    # Dynamic NTK changes the rotary base only when a forward pass reaches past
    # max_position_embeddings: HF recomputes inv_freq from seq_len = max(position_ids) + 1 of each
    # forward (prefill: the prompt length, then one more per decode step, with cached keys keeping
    # the rotation they got), which is what the engine does per pass. The HF rotary module keeps
    # the longest seq_len seen as state, so every HF run below starts from a freshly loaded model.
    Case("rope-dynamic-long", ["--rope-scaling", "dynamic", "--rope-factor", "2",
                               "--max-position-embeddings", "256"],
         prompt_lengths=[300], gen_prompt_length=300,
         control_config=NO_SCALING, control_what="no rope scaling"),
    # Within max_position_embeddings dynamic scaling must leave the rotary base alone.
    Case("rope-dynamic-short", ["--rope-scaling", "dynamic", "--rope-factor", "2",
                                "--max-position-embeddings", "256"],
         prompt_lengths=[1, 7, 200], gen_prompt_length=200),
    Case("eps-1e-6", ["--rms-norm-eps", "1e-6"],
         control_config={"rms_norm_eps": 1e-5}, control_what="rms_norm_eps 1e-5"),
    Case("eps-1e-2", ["--model-type", "mistral", "--rms-norm-eps", "1e-2"],
         control_config={"rms_norm_eps": 1e-5}, control_what="rms_norm_eps 1e-5"),
    # head_dim other than hidden / heads (64 / 4 = 16): the attention is 128 or 32 wide, not 64.
    # (Qwen2 in this transformers release always uses hidden / heads, so llama and mistral.)
    Case("head-dim-32", ["--head-dim", "32"]),
    Case("mistral-head-dim-8", ["--model-type", "mistral", "--head-dim", "8"]),
    Case("llama-bf16", [], prompt_lengths=[7, 300], dtype="bf16"),
]

# DuoAttention's heads (case "duo-heads"): KV head 0 full, every other KV head a streaming head
# (its sink tokens and a recent window, in prefill as A-shape and in decode), written as a policy
# file. HF computes the same attention with a per-head mask; the engine runs it with its
# streaming stores, one store per layer and one per group of heads (--split-kv-heads). The
# prompt is short and the generation long, so the streaming heads' store drops rows in decode
# and the per-group stores are used (capacity over twice a streaming store's rows).
DUO_CASE = "duo-heads"
DUO_SINK, DUO_WINDOW = 4, 24
DUO_PROMPT, DUO_NEW = 40, 200
# Log-probabilities (about -6 for this vocabulary) in fp32 on both sides.
LOGPROB_TOLERANCE = 1e-4


class Failure(Exception):
    pass


def run_tool(args: List[str]) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True)
    except OSError as e:  # not executable, vanished, ...
        raise Failure(f"cannot run {args[0]}: {e}")
    if proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise Failure(f"{os.path.basename(args[0])} exited {proc.returncode}: "
                      f"{detail[-1] if detail else '(no output)'}")
    return proc.stdout


def relative_diff(a, b) -> float:
    """max |a - b| / max |b|: the error on the scale of the logits themselves."""
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


class Oracle:
    def __init__(self, bin_dir: str, work_dir: str):
        self.bin_dir = bin_dir
        self.work_dir = work_dir
        self.rows = []  # (case, check, measured, limit, verdict, note)

    def tool(self, name: str) -> str:
        return os.path.join(self.bin_dir, name)

    def report(self, case, check, measured, limit, ok, note=""):
        self.rows.append((case, check, measured, limit, "PASS" if ok else "FAIL", note))

    # ---- model files ----------------------------------------------------------------------------

    def make_model(self, case: Case) -> str:
        out = os.path.join(self.work_dir, case.name)
        run_tool([self.tool("millipede-mkmodel"), "--preset", "tiny", "--out", out,
                  "--dtype", case.dtype] + case.mkmodel_args)
        sharpen_attention(out, ATTENTION_SHARPEN)
        return out

    def write_ids(self, ids: List[int]) -> str:
        path = os.path.join(self.work_dir, "prompt_ids.txt")
        with open(path, "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        return path

    # ---- the engine -----------------------------------------------------------------------------

    def engine_logits(self, model_dir: str, ids: List[int], chunk: Optional[int] = None):
        out = os.path.join(self.work_dir, "logits.f32")
        args = [self.tool("millipede-test-logits"), "--model", model_dir,
                "--prompt-ids", self.write_ids(ids), "--kv-dtype", "fp32", "--out", out]
        if chunk is not None:
            args += ["--prefill-chunk", str(chunk)]
        run_tool(args)
        return np.fromfile(out, dtype="<f4")

    def engine_generate(self, model_dir: str, ids: List[int]) -> List[int]:
        stdout = run_tool([self.tool("millipede-run"), "--model", model_dir,
                           "--prompt-ids", self.write_ids(ids), "--max-new-tokens",
                           str(NEW_TOKENS), "--ignore-eos", "--kv-dtype", "fp32", "--json"])
        return json.loads(stdout)["ids"]

    # ---- Hugging Face ---------------------------------------------------------------------------

    def hf_model(self, model_dir: str, dtype: str = "fp32", config_overrides=None,
                 modify=None):
        """A freshly loaded model (see rope-dynamic-long for why never a reused one)."""
        config = AutoConfig.from_pretrained(model_dir, **(config_overrides or {}))
        model, info = AutoModelForCausalLM.from_pretrained(
            model_dir, config=config, attn_implementation="eager", output_loading_info=True,
            torch_dtype=torch.float32 if dtype == "fp32" else torch.bfloat16)
        # A weight HF does not find in the file would be silently random-initialized.
        problems = {kind: names for kind, names in info.items() if names}
        if problems:
            raise Failure(f"transformers did not load {model_dir} cleanly: {problems}")
        if modify:
            modify(model)
        return model.eval()

    def hf_logits(self, model_dir: str, ids: List[int], **kwargs):
        model = self.hf_model(model_dir, **kwargs)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1]
        return logits.float().numpy()

    def hf_generate(self, model_dir: str, ids: List[int]):
        """Greedy ids and each step's logits. Like --ignore-eos: no EOS stops generation (HF's
        min_new_tokens would instead forbid EOS, which changes the argmax when EOS wins)."""
        model = self.hf_model(model_dir)
        model.generation_config.eos_token_id = None
        prompt = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(
                prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                max_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=0,
                output_logits=True, return_dict_in_generate=True,
                # Without this, generate() imports torch.distributed.fsdp to check for FSDP,
                # which fails on Debian's torch 1.13 under Python 3.11 (a dataclass with a
                # mutable default in torch.distributed._shard).
                synced_gpus=False)
        new_ids = out.sequences[0, len(ids):].tolist()
        return new_ids, [step[0].float().numpy() for step in out.logits]

    # ---- the checks -----------------------------------------------------------------------------

    def made_model(self, case: Case):
        """The case's model directory and its config, or None (reported) when mkmodel failed."""
        try:
            model_dir = self.make_model(case)
        except Failure as e:
            self.report(case.name, "mkmodel", "-", "-", False, str(e))
            return None
        with open(os.path.join(model_dir, "config.json")) as f:
            return model_dir, json.load(f)

    def check_case(self, case: Case):
        made = self.made_model(case)
        if made is None:
            return
        model_dir, vocab = made[0], made[1]["vocab_size"]
        # Seeded by the case's name: the same prompts whichever cases run.
        rng = np.random.default_rng(zlib.crc32(case.name.encode()))
        prompts = {n: rng.integers(0, vocab, n).tolist() for n in
                   sorted(set(case.prompt_lengths + [case.gen_prompt_length]))}

        for n in case.prompt_lengths:
            chunks = [None] + ([64] if n > 64 else [])  # 64: several prefill chunks
            for chunk in chunks:
                label = f"logits n={n}" + (f" chunk={chunk}" if chunk else "")
                self.guarded(case, label, lambda: self.check_logits(
                    case, label, model_dir, prompts[n], chunk))

        if case.control_config or case.control_model:
            n = max(case.prompt_lengths)
            self.guarded(case, "control", lambda: self.check_control(case, model_dir, prompts[n]))

        self.guarded(case, f"greedy n={case.gen_prompt_length}", lambda: self.check_generation(
            case, model_dir, prompts[case.gen_prompt_length]))

    def guarded(self, case, label, fn):
        try:
            fn()
        except Failure as e:
            self.report(case.name, label, "-", "-", False, str(e))

    def check_logits(self, case, label, model_dir, ids, chunk):
        ours = self.engine_logits(model_dir, ids, chunk)
        # HF in fp32: for a bf16 file the weights are widened exactly, as the engine does.
        ref = self.hf_logits(model_dir, ids)
        if ours.shape != ref.shape:
            raise Failure(f"engine wrote {ours.size} logits, HF has {ref.size}")
        err = relative_diff(ours, ref)
        self.report(case.name, label + " vs HF fp32", f"{err:.2e}", f"{FP32_TOLERANCE:.0e}",
                    err < FP32_TOLERANCE)
        if case.dtype == "bf16" and chunk is None:
            ref16 = self.hf_logits(model_dir, ids, dtype="bf16")
            err = relative_diff(ours, ref16)
            self.report(case.name, label + " vs HF bf16", f"{err:.2e}", f"{BF16_TOLERANCE:.0e}",
                        err < BF16_TOLERANCE)

    def check_control(self, case, model_dir, ids):
        real = self.hf_logits(model_dir, ids)
        off = self.hf_logits(model_dir, ids, config_overrides=case.control_config,
                             modify=case.control_model)
        change = relative_diff(off, real)
        need = CONTROL_MARGIN * FP32_TOLERANCE
        self.report(case.name, f"control: {case.control_what}", f"{change:.2e}",
                    f">{need:.0e}", change > need,
                    "" if change > need else "the feature barely changes this model's logits")

    def check_generation(self, case, model_dir, ids):
        ours = self.engine_generate(model_dir, ids)
        ref, ref_logits = self.hf_generate(model_dir, ids)
        label = f"greedy n={case.gen_prompt_length}"
        if len(ref) != NEW_TOKENS or len(ours) != NEW_TOKENS:
            self.report(case.name, label, f"{len(ours)}/{len(ref)} tokens", f"{NEW_TOKENS}",
                        False, f"engine {ours}, HF {ref}")
            return
        if ours == ref:
            self.report(case.name, label, f"{NEW_TOKENS}/{NEW_TOKENS} equal", "all", True)
            return
        step = next(i for i in range(NEW_TOKENS) if ours[i] != ref[i])
        hf_step = ref_logits[step]
        gap = float((hf_step[ref[step]] - hf_step[ours[step]]) / abs(hf_step).max())
        # The engine's own view of the same step, to tell a near-tie from a real difference.
        eng_step = self.engine_logits(model_dir, ids + ref[:step])
        eng_gap = float((eng_step[ours[step]] - eng_step[ref[step]]) / abs(eng_step).max())
        note = (f"first difference at step {step}: engine {ours[step]}, HF {ref[step]}; "
                f"relative margin of HF's token over the engine's in HF's logits {gap:.1e}, "
                f"of the engine's token over HF's in the engine's logits {eng_gap:.1e}")
        near_tie = gap < NEAR_TIE
        if near_tie:
            note += ": a near-tie, accepted"
        self.report(case.name, label, f"{step}/{NEW_TOKENS} equal", "all", near_tie, note)

    # ---- DuoAttention's heads against HF with a per-head mask ------------------------------------

    def hf_written_model(self, src_dir: str, name: str) -> str:
        """A random-weight bf16 checkpoint of src_dir's shape written by transformers itself
        (its own initialisation, q_proj and k_proj sharpened as make_model does)."""
        out = os.path.join(self.work_dir, name)
        torch.manual_seed(zlib.crc32(name.encode()))
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src_dir),
                                                 torch_dtype=torch.float32)
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.mul_(ATTENTION_SHARPEN)
                layer.self_attn.k_proj.weight.mul_(ATTENTION_SHARPEN)
        model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
        shutil.copy(os.path.join(src_dir, "tokenizer.json"), out)
        return out

    def check_duo(self):
        """DuoAttention's heads on our fp32 and bf16 checkpoints and on one transformers wrote;
        HF always computes in fp32 (a bf16 file's weights widened exactly, as the engine does)."""
        for case in (Case(DUO_CASE, []), Case(DUO_CASE + "-bf16", [], dtype="bf16")):
            made = self.made_model(case)
            if made is not None:
                self.check_duo_model(case, *made)
        if made is not None:
            case = Case(DUO_CASE + "-hf-written-bf16", [], dtype="bf16")
            try:
                model_dir = self.hf_written_model(made[0], case.name)
            except Exception as e:  # transformers failing to write is a failed check, not a crash
                self.report(case.name, "save_pretrained", "-", "-", False, str(e))
                return
            with open(os.path.join(model_dir, "config.json")) as f:
                self.check_duo_model(case, model_dir, json.load(f))

    def check_duo_model(self, case, model_dir, config):
        heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        policy = os.path.join(self.work_dir, "duo_policy.json")
        with open(policy, "w") as f:
            json.dump({"version": 1,
                       "default": {"prefill": ["dense"] + ["a-shape"] * (kv_heads - 1),
                                   "decode": ["full"] + ["streaming-head"] * (kv_heads - 1)},
                       "a_shape": {"sink_tokens": DUO_SINK, "window_tokens": DUO_WINDOW},
                       "streaming_head": {"sink_tokens": DUO_SINK, "window_tokens": DUO_WINDOW}},
                      f)
        rng = np.random.default_rng(zlib.crc32(case.name.encode()))
        prompt = rng.integers(0, config["vocab_size"], DUO_PROMPT).tolist()
        for split in ("on", "off"):
            self.guarded(case, f"split-kv-heads {split}",
                         lambda: self.check_duo_run(case, model_dir, policy, prompt, split,
                                                    heads, kv_heads))

    def duo_logprobs(self, model_dir, ids, heads, kv_heads, streaming):
        """HF's log-probabilities of the next token at every position of `ids`, teacher-forced,
        with the streaming heads' mask (or plain causal attention for the control)."""
        n = len(ids)
        p = torch.arange(n)[:, None]
        k = torch.arange(n)[None, :]
        causal = k <= p
        window = causal & ((k < DUO_SINK) | (p - k < DUO_WINDOW))
        group = heads // kv_heads  # HF's repeat_kv: query head h reads KV head h // group
        allowed = torch.stack([causal if h // group == 0 or not streaming else window
                               for h in range(heads)])
        mask = torch.zeros(1, heads, n, n)
        mask[0][~allowed] = torch.finfo(torch.float32).min
        model = self.hf_model(model_dir)
        with torch.no_grad():
            logits = model(torch.tensor([ids]), attention_mask=mask).logits[0]
        return torch.log_softmax(logits.float(), dim=-1).numpy()

    def check_duo_run(self, case, model_dir, policy, prompt, split, heads, kv_heads):
        stdout = run_tool([self.tool("millipede-run"), "--model", model_dir,
                           "--prompt-ids", self.write_ids(prompt), "--max-new-tokens",
                           str(DUO_NEW), "--ignore-eos", "--kv-dtype", "fp32", "--json",
                           "--logprobs", "5", "--policy", policy, "--split-kv-heads", split])
        result = json.loads(stdout)
        ids, logprobs = result["ids"], result["logprobs"]
        if len(ids) != DUO_NEW or len(logprobs) != DUO_NEW:
            raise Failure(f"engine gave {len(ids)} ids and {len(logprobs)} logprobs")
        seq = prompt + ids[:-1]
        ref = self.duo_logprobs(model_dir, seq, heads, kv_heads, streaming=True)
        control = self.duo_logprobs(model_dir, seq, heads, kv_heads, streaming=False)
        worst = moved = 0.0
        ties = []
        for i, (token, lp, alternatives) in enumerate(logprobs):
            step = ref[DUO_PROMPT - 1 + i]
            for t, v in [(token, lp)] + [tuple(a) for a in alternatives]:
                worst = max(worst, abs(v - float(step[t])))
                moved = max(moved, abs(v - float(control[DUO_PROMPT - 1 + i][t])))
            best = int(step.argmax())
            if best != token and float(step[best] - step[token]) >= NEAR_TIE * abs(step).max():
                ties.append(i)
        label = f"logprobs of {DUO_NEW} tokens, split-kv-heads {split}"
        self.report(case.name, label + " vs HF fp32 masked", f"{worst:.2e}",
                    f"{LOGPROB_TOLERANCE:.0e}", worst < LOGPROB_TOLERANCE)
        self.report(case.name, f"greedy, split-kv-heads {split}",
                    f"{DUO_NEW - len(ties)}/{DUO_NEW} HF's argmax", "all", not ties,
                    f"steps {ties[:5]} differ beyond a near-tie" if ties else "")
        need = CONTROL_MARGIN * LOGPROB_TOLERANCE
        self.report(case.name, f"control: every head full, split-kv-heads {split}",
                    f"{moved:.2e}", f">{need:.0e}", moved > need,
                    "" if moved > need else "the streaming heads barely change this model")

    def print_table(self):
        header = ("case", "check", "measured", "limit", "result")
        widths = [max(len(str(r[i])) for r in self.rows + [header]) for i in range(5)]
        line = "  ".join(f"{{:<{w}}}" for w in widths)
        print(line.format(*header))
        print("  ".join("-" * w for w in widths))
        for row in self.rows:
            print(line.format(*row[:5]) + (f"  {row[5]}" if row[5] else ""))


def sharpen_attention(model_dir: str, factor: float):
    """Scales q_proj and k_proj in place (see ATTENTION_SHARPEN)."""
    path = os.path.join(model_dir, "model.safetensors")
    tensors = load_file(path)
    for name in tensors:
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            tensors[name] = tensors[name] * factor
    save_file(tensors, path, metadata={"format": "pt"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bin_dir", nargs="?", default=os.environ.get("MILLIPEDE_BIN_DIR"),
                        help="folder with millipede-mkmodel, millipede-run, millipede-test-logits")
    parser.add_argument("--keep", action="store_true", help="keep the temporary models")
    parser.add_argument("--case", action="append", help="run only this case (repeatable)")
    args = parser.parse_args()
    if not args.bin_dir:
        parser.error("give BIN_DIR or set MILLIPEDE_BIN_DIR")

    if IMPORT_ERROR is not None:
        print(f"SKIP: the HF oracle needs numpy, torch, transformers and safetensors "
              f"({IMPORT_ERROR}); cluster/install-deps.sh --test installs them into build/pyenv")
        return SKIP
    transformers.logging.set_verbosity_error()

    for tool in ("millipede-mkmodel", "millipede-run", "millipede-test-logits"):
        if not os.access(os.path.join(args.bin_dir, tool), os.X_OK):
            print(f"FAIL: {tool} not found in {args.bin_dir}")
            return 1
    cases = CASES
    run_duo = True
    if args.case:
        known = {c.name for c in CASES} | {DUO_CASE}
        unknown = set(args.case) - known
        if unknown:
            parser.error(f"unknown case(s) {sorted(unknown)}; known: {sorted(known)}")
        cases = [c for c in CASES if c.name in args.case]
        run_duo = DUO_CASE in args.case

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"numpy {np.__version__}; {len(cases) + run_duo} cases")
    start = time.monotonic()
    work_dir = tempfile.mkdtemp(prefix="hf_oracle_")
    try:
        oracle = Oracle(args.bin_dir, work_dir)
        for case in cases:
            oracle.check_case(case)
        if run_duo:
            oracle.check_duo()
        oracle.print_table()
    finally:
        if args.keep:
            print(f"models kept in {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    failed = sum(1 for r in oracle.rows if r[4] != "PASS")
    print(f"{len(oracle.rows) - failed}/{len(oracle.rows)} checks passed in "
          f"{time.monotonic() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
