#!/usr/bin/env python3
"""The GGUF model mapping (checkpoint/gguf_model.cc) against Hugging Face transformers, on small
random models this test writes in both formats.

For each variant a random transformers model (LlamaForCausalLM with an untied LM head and a
head_dim of its own, Llama with tied embeddings, Mistral with one KV head, Qwen2 with q/k/v
biases) is saved with save_pretrained, and the same weights are written as a GGUF file with
gguf.GGUFWriter the way llama.cpp's convert_hf_to_gguf.py writes such a model: its metadata keys
({arch}.block_count, .context_length, .embedding_length, .feed_forward_length,
.attention.head_count, .attention.head_count_kv, .attention.key_length/.value_length,
.attention.layer_norm_rms_epsilon, .rope.freq_base, .rope.dimension_count, .vocab_size),
its tensor names (token_embd, blk.N.attn_q, ..., output_norm, output), Mistral written as
architecture "llama" (the converter registers MistralForCausalLM with its Llama model), and the
rows of each llama/mistral Q and K head interleaved (HF row h*d + t*d/2 + j stored as row
h*d + 2j + t; Qwen2 is stored as it is). The tensors are stored in several types (F32, F16, BF16
and Q8_0, rotating over the matrices; norms and biases F32 as the converter keeps them) and the
HF model holds exactly the values the file dequantises to, so quantisation error is not part of
what is measured. A minimal GPT-2-style vocabulary (the 256 byte symbols, some merges, one
control token) makes the file complete.

Checks per variant:
  - millipede-test-logits (fp32 weights and KV cache) on the GGUF file against transformers on
    the saved directory: max |diff| / max |logit| within hf_oracle_test's FP32_TOLERANCE;
  - the engine on the GGUF file against the engine on the saved directory (same weights);
  - a control: a second GGUF file with the other Q/K row order (not interleaved for
    llama/mistral, interleaved for qwen2) must move the engine's logits away from transformers'
    by more than CONTROL_MARGIN tolerances, so a pass shows the row order is handled, not that it
    does not matter; for qwen2 also transformers with its biases zeroed (the biases matter).
Malformed files (through millipede-run, which must exit 1 with a message naming the key or
tensor, never crash): an unknown architecture (gpt2), a missing metadata key, a missing tensor,
a tensor of the wrong shape, an extra tensor, and rope_freqs.weight (Llama 3.1's per-dimension
RoPE factors) present; the intact file runs.

Usage: gguf_models_oracle_test.py BIN_DIR (or $MILLIPEDE_BIN_DIR) [--keep] [--case NAME ...]
Exit status: 0 all passed, 1 a mismatch or error, 77 (skipped) when torch, transformers or gguf
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
from typing import Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "worker"))
# The tolerances and helpers of the random-weight oracle (its own imports are guarded).
import hf_oracle_test as hf_oracle  # noqa: E402
from hf_oracle_test import (ATTENTION_SHARPEN, CONTROL_MARGIN, FP32_TOLERANCE, SKIP,  # noqa: E402
                            Failure, relative_diff, run_tool)

IMPORT_ERROR = hf_oracle.IMPORT_ERROR
if IMPORT_ERROR is None:
    try:
        import gguf
        import numpy as np
        import torch
        import transformers
        from gguf import GGMLQuantizationType as Q
        from transformers import (AutoModelForCausalLM, LlamaConfig, MistralConfig,
                                  Qwen2Config)
    except Exception as e:  # ImportError, or a broken install failing inside an import
        IMPORT_ERROR = e

PROMPT_LENGTHS = [1, 7, 300]
CONTROL_LENGTH = 300

# The vocabulary: 256 byte symbols, these merges, one control token (BOS and EOS).
MERGES = ["Ġ t", "Ġ a", "Ġ s", "Ġ w", "Ġ c", "Ġ o", "Ġ b", "Ġ m", "Ġ f", "Ġ p", "Ġ i", "Ġ h",
          "t h", "h e", "i n", "e r", "a n", "r e", "o n", "a t", "e n", "n d", "o r", "e s",
          "Ġt h", "Ġth e", "Ġa n", "Ġan d", "n g", "i ng", "Ġ d", "Ġ l"]
SPECIAL = "<|endoftext|>"
SMALL = dict(vocab_size=256 + len(MERGES) + 1, hidden_size=64, intermediate_size=128,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=512, bos_token_id=256 + len(MERGES),
             eos_token_id=256 + len(MERGES))


@dataclasses.dataclass
class Variant:
    name: str
    make_config: Callable
    arch: str                 # general.architecture as the converter writes it
    interleaved: bool         # Q/K rows interleaved in the file (llama, mistral)
    first_type: int = 0       # where the rotation over TYPES starts
    bias_control: bool = False


def variants():
    return [
        # Its own head_dim (32, not 64 / 4): the file carries attention.key_length.
        Variant("llama-untied", lambda: LlamaConfig(**SMALL, head_dim=32, rope_theta=50000.0,
                                                    rms_norm_eps=1e-6, tie_word_embeddings=False),
                "llama", True, 0),
        Variant("llama-tied", lambda: LlamaConfig(**SMALL, tie_word_embeddings=True), "llama",
                True, 1),
        Variant("mistral-mqa", lambda: MistralConfig(**dict(SMALL, num_key_value_heads=1),
                                                     tie_word_embeddings=False,
                                                     sliding_window=4096),
                "llama", True, 2),
        Variant("qwen2-bias", lambda: Qwen2Config(**SMALL, tie_word_embeddings=False,
                                                  rope_theta=1000000.0),
                "qwen2", False, 3, bias_control=True),
    ]


TYPES = None  # set in main: [Q.F32, Q.F16, Q.BF16, Q.Q8_0]


# ---- the vocabulary ------------------------------------------------------------------------------

def byte_symbols() -> List[str]:
    """GPT-2's byte-level alphabet: byte b's printable stand-in, in byte order."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    symbols, extra = {}, 0
    for b in range(256):
        if b in keep:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def vocabulary():
    tokens = byte_symbols()
    for merge in MERGES:
        left, right = merge.split(" ")
        assert left in tokens and right in tokens, merge
        tokens.append(left + right)
    tokens.append(SPECIAL)
    assert len(tokens) == len(set(tokens)) == SMALL["vocab_size"]
    types = [int(gguf.TokenType.NORMAL)] * (len(tokens) - 1) + [int(gguf.TokenType.CONTROL)]
    return tokens, types


# ---- weights -------------------------------------------------------------------------------------

def gguf_name(hf_name: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
           "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf_name in top:
        return top[hf_name]
    layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    parts = hf_name.split(".")  # model.layers.N.<part...>.weight|bias
    assert parts[:2] == ["model", "layers"], hf_name
    return f"blk.{parts[2]}.{layer['.'.join(parts[3:-1])]}.{parts[-1]}"


def interleave_rows(rows, heads: int):
    """The converter's per-head row order: HF row h*d + t*d/2 + j becomes row h*d + 2j + t."""
    d = rows.shape[0] // heads
    return rows.reshape(heads, 2, d // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


@dataclasses.dataclass
class Stored:
    qtype: object   # GGMLQuantizationType
    data: object    # what GGUFWriter.add_tensor takes (quantised bytes or floats)
    values: object  # the float32 values the data dequantises to (HF row order)


def store(values, qtype) -> Stored:
    """`values` quantised to `qtype`, and the float32 values the stored data stands for."""
    q = gguf.quants.quantize(values.astype(np.float32), qtype)
    back = gguf.quants.dequantize(q, qtype).astype(np.float32).reshape(values.shape)
    return Stored(qtype, q, back)


def random_model(variant: Variant):
    """A random HF model whose weights are what the GGUF file will hold, and those tensors
    (HF name -> Stored, HF row order)."""
    config = variant.make_config()
    torch.manual_seed(zlib.crc32(variant.name.encode()))
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32,
                                             attn_implementation="eager")
    stored: Dict[str, Stored] = {}
    matrices = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(ATTENTION_SHARPEN)  # as hf_oracle_test does: RoPE then matters
            if p.dim() == 1:
                # HF starts norms at 1 and biases at 0; random ones show a swapped or dropped
                # tensor.
                p.copy_((1.0 if "norm" in name else 0.0) + 0.2 * torch.randn_like(p))
                stored[name] = store(p.numpy(), Q.F32)
            else:
                stored[name] = store(p.numpy(), TYPES[(variant.first_type + matrices) %
                                                      len(TYPES)])
                matrices += 1
            p.copy_(torch.from_numpy(stored[name].values))
    if config.tie_word_embeddings:
        stored.pop("lm_head.weight", None)
    return config, model, stored


def write_gguf(path: str, variant: Variant, config, stored: Dict[str, Stored],
               interleaved: bool, arch: Optional[str] = None, drop_key: str = "",
               string_key: str = "", drop: str = "", reshape: str = "",
               extra: Optional[Dict[str, object]] = None):
    """The GGUF file of `stored` as llama.cpp's converter lays it out; the keyword arguments
    make it malformed (another architecture, a key left out or written as a string, a tensor left
    out or cut short, extra tensors)."""
    arch = arch or variant.arch
    w = gguf.GGUFWriter(path, arch)
    keys = [
        (f"{arch}.context_length", w.add_context_length, config.max_position_embeddings),
        (f"{arch}.embedding_length", w.add_embedding_length, config.hidden_size),
        (f"{arch}.feed_forward_length", w.add_feed_forward_length, config.intermediate_size),
        (f"{arch}.block_count", w.add_block_count, config.num_hidden_layers),
        (f"{arch}.attention.head_count", w.add_head_count, config.num_attention_heads),
        (f"{arch}.attention.head_count_kv", w.add_head_count_kv, config.num_key_value_heads),
        (f"{arch}.rope.freq_base", w.add_rope_freq_base, config.rope_theta),
        (f"{arch}.attention.layer_norm_rms_epsilon", w.add_layer_norm_rms_eps,
         config.rms_norm_eps),
        (f"{arch}.vocab_size", w.add_vocab_size, config.vocab_size),
    ]
    head_dim = getattr(config, "head_dim", None)
    if head_dim is not None:  # the converter writes them when config.json has head_dim
        keys += [(f"{arch}.attention.key_length", w.add_key_length, head_dim),
                 (f"{arch}.attention.value_length", w.add_value_length, head_dim)]
    if arch != "qwen2":
        keys.append((f"{arch}.rope.dimension_count", w.add_rope_dimension_count,
                     head_dim or config.hidden_size // config.num_attention_heads))
    tokens, types = vocabulary()
    keys += [("tokenizer.ggml.model", w.add_tokenizer_model, "gpt2"),
             ("tokenizer.ggml.pre", w.add_tokenizer_pre, "gpt-2"),
             ("tokenizer.ggml.tokens", w.add_token_list, tokens),
             ("tokenizer.ggml.token_type", w.add_token_types, types),
             ("tokenizer.ggml.merges", w.add_token_merges, MERGES),
             ("tokenizer.ggml.bos_token_id", w.add_bos_token_id, config.bos_token_id),
             ("tokenizer.ggml.eos_token_id", w.add_eos_token_id, config.eos_token_id)]
    w.add_name(variant.name)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for key, add, value in keys:
        if key == string_key:
            w.add_string(key, str(value))
        elif key != drop_key:
            add(value)

    kv_heads = config.num_key_value_heads
    for hf_name, s in stored.items():
        name = gguf_name(hf_name)
        if name == drop:
            continue
        data = s.data
        if interleaved and (".attn_q." in name or ".attn_k." in name):
            # Whole rows move, so interleaving the quantised rows is exact.
            data = interleave_rows(data, config.num_attention_heads if ".attn_q." in name
                                   else kv_heads)
        if name == reshape:
            data = data[:-16]  # sixteen rows short
        raw = None if s.qtype in (Q.F32, Q.F16) else s.qtype
        w.add_tensor(name, np.ascontiguousarray(data), raw_dtype=raw)
    for name, values in (extra or {}).items():
        w.add_tensor(name, values)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ---- the checks ----------------------------------------------------------------------------------

class GgufOracle:
    def __init__(self, bin_dir: str, work_dir: str):
        self.bin_dir = bin_dir
        self.work_dir = work_dir
        self.rows = []

    def tool(self, name):
        return os.path.join(self.bin_dir, name)

    def report(self, case, check, measured, limit, ok, note=""):
        self.rows.append((case, check, measured, limit, "PASS" if ok else "FAIL", note))

    def guarded(self, case, label, fn):
        try:
            fn()
        except Failure as e:
            self.report(case, label, "-", "-", False, str(e))
        except Exception as e:  # a tool's output or transformers failing: reported, not a crash
            self.report(case, label, "-", "-", False, repr(e))

    def write_ids(self, ids):
        path = os.path.join(self.work_dir, "prompt_ids.txt")
        with open(path, "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        return path

    def engine_logits(self, model: str, ids):
        out = os.path.join(self.work_dir, "logits.f32")
        run_tool([self.tool("millipede-test-logits"), "--model", model, "--prompt-ids",
                  self.write_ids(ids), "--kv-dtype", "fp32", "--weight-dtype", "fp32",
                  "--out", out])
        return np.fromfile(out, dtype="<f4")

    def hf_logits(self, model_dir: str, ids, modify=None):
        model, info = AutoModelForCausalLM.from_pretrained(
            model_dir, torch_dtype=torch.float32, attn_implementation="eager",
            output_loading_info=True)
        problems = {kind: names for kind, names in info.items() if names}
        if problems:
            raise Failure(f"transformers did not load {model_dir} cleanly: {problems}")
        if modify:
            modify(model)
        with torch.no_grad():
            return model.eval()(torch.tensor([ids])).logits[0, -1].float().numpy()

    def check_variant(self, variant: Variant):
        try:
            config, model, stored = random_model(variant)
            hf_dir = os.path.join(self.work_dir, variant.name)
            model.save_pretrained(hf_dir, safe_serialization=True)
            path = write_gguf(os.path.join(self.work_dir, variant.name + ".gguf"), variant,
                              config, stored, variant.interleaved)
            wrong = write_gguf(os.path.join(self.work_dir, variant.name + "-other-rows.gguf"),
                               variant, config, stored, not variant.interleaved)
        except Exception as e:  # writing the files is part of the test
            self.report(variant.name, "write the model", "-", "-", False, repr(e))
            return
        types = sorted({s.qtype.name for s in stored.values()})
        rng = np.random.default_rng(zlib.crc32(variant.name.encode()))
        prompts = {n: rng.integers(0, config.vocab_size, n).tolist() for n in PROMPT_LENGTHS}
        for n in PROMPT_LENGTHS:
            def logits(n=n):
                ours = self.engine_logits(path, prompts[n])
                ref = self.hf_logits(hf_dir, prompts[n])
                if ours.shape != ref.shape:
                    raise Failure(f"engine wrote {ours.size} logits, HF has {ref.size}")
                err = relative_diff(ours, ref)
                self.report(variant.name, f"logits n={n}, GGUF vs HF fp32", f"{err:.2e}",
                            f"{FP32_TOLERANCE:.0e}", err < FP32_TOLERANCE,
                            f"tensor types {', '.join(types)}" if n == PROMPT_LENGTHS[0] else "")
            self.guarded(variant.name, f"logits n={n}", logits)

        ids = prompts[CONTROL_LENGTH]

        def same_weights():
            a = self.engine_logits(path, ids)
            b = self.engine_logits(hf_dir, ids)
            err = relative_diff(a, b)
            self.report(variant.name, f"engine: GGUF vs safetensors n={CONTROL_LENGTH}",
                        f"{err:.2e}", f"{FP32_TOLERANCE:.0e}", err < FP32_TOLERANCE,
                        "bit-identical" if np.array_equal(a, b) else "")
        self.guarded(variant.name, "GGUF vs safetensors", same_weights)

        def writer():
            # The file's layout as transformers' own GGUF reader understands llama.cpp's files:
            # it must read back the model (config and weights) exactly.
            directory, name = os.path.split(path)
            back = AutoModelForCausalLM.from_pretrained(
                directory, gguf_file=name, torch_dtype=torch.float32,
                attn_implementation="eager").eval()
            with torch.no_grad():
                got = back(torch.tensor([ids])).logits[0, -1].float().numpy()
            err = relative_diff(got, self.hf_logits(hf_dir, ids))
            self.report(variant.name, "transformers reads the GGUF file back", f"{err:.2e}",
                        "0", err == 0, f"as {type(back).__name__}")
        self.guarded(variant.name, "transformers reads the file", writer)

        def control():
            ref = self.hf_logits(hf_dir, ids)
            moved = relative_diff(self.engine_logits(wrong, ids), ref)
            need = CONTROL_MARGIN * FP32_TOLERANCE
            what = ("Q/K rows not interleaved in the file" if variant.interleaved
                    else "Q/K rows interleaved in the file")
            self.report(variant.name, f"control: {what}", f"{moved:.2e}", f">{need:.0e}",
                        moved > need, "" if moved > need else "the row order barely matters")
        self.guarded(variant.name, "control", control)

        if variant.bias_control:
            def bias_control():
                ref = self.hf_logits(hf_dir, ids)
                off = self.hf_logits(hf_dir, ids, modify=hf_oracle.zero_qkv_biases)
                moved = relative_diff(off, ref)
                need = CONTROL_MARGIN * FP32_TOLERANCE
                self.report(variant.name, "control: q/k/v biases zeroed (HF)", f"{moved:.2e}",
                            f">{need:.0e}", moved > need,
                            "" if moved > need else "the biases barely matter")
            self.guarded(variant.name, "bias control", bias_control)

    # ---- malformed files ------------------------------------------------------------------------

    def run_engine(self, model: str, prompt: List[str]):
        """millipede-run on `model`: (exit status, stderr)."""
        proc = subprocess.run([self.tool("millipede-run"), "--model", model, *prompt,
                               "--max-new-tokens", "2", "--json", "--kv-dtype", "fp32"],
                              capture_output=True, text=True, timeout=120)
        return proc.returncode, proc.stderr.strip() or proc.stdout.strip()

    def check_malformed(self):
        case = "malformed"
        variant = next(v for v in variants() if v.name == "llama-tied")
        config, _, stored = random_model(variant)
        head_dim = config.hidden_size // config.num_attention_heads
        # (label, write_gguf keyword arguments, what the message must name)
        bad = [
            ("unknown architecture", dict(arch="gpt2"), ["general.architecture", "gpt2"]),
            ("missing key", dict(drop_key="llama.embedding_length"), ["llama.embedding_length"]),
            ("key of the wrong type", dict(string_key="llama.attention.head_count"),
             ["llama.attention.head_count"]),
            # The run is given ids, so only a broken vocabulary can stop it there.
            ("vocabulary without tokens", dict(drop_key="tokenizer.ggml.tokens"),
             ["tokenizer.ggml.tokens"]),
            ("missing tensor", dict(drop="blk.1.ffn_down.weight"), ["blk.1.ffn_down.weight"]),
            ("wrong shape", dict(reshape="blk.0.attn_k.weight"), ["blk.0.attn_k.weight"]),
            ("extra tensor", dict(extra={"blk.0.attn_q_norm.weight":
                                         np.ones(head_dim, dtype=np.float32)}),
             ["blk.0.attn_q_norm.weight"]),
            ("rope_freqs present", dict(extra={"rope_freqs.weight":
                                               np.ones(head_dim // 2, dtype=np.float32)}),
             ["rope_freqs.weight"]),
        ]
        good = write_gguf(os.path.join(self.work_dir, "intact.gguf"), variant, config, stored,
                          True)
        for prompt in (["--prompt", "the cat and the hat"],
                       ["--prompt-ids", self.write_ids([1, 2])]):
            rc, out = self.run_engine(good, prompt)
            self.report(case, f"intact file runs (millipede-run {prompt[0]})", f"exit {rc}",
                        "exit 0", rc == 0, "" if rc == 0 else out.splitlines()[-1] if out else "")
        for label, kwargs, names in bad:
            name = label.replace(" ", "_") + ".gguf"
            path = os.path.join(self.work_dir, name)
            try:
                write_gguf(path, variant, config, stored, True, **kwargs)
            except Exception as e:
                self.report(case, label, "-", "-", False, f"writing the file: {e!r}")
                continue
            rc, out = self.run_engine(path, ["--prompt-ids", self.write_ids([1, 2])])
            last = out.splitlines()[-1] if out else "(no output)"
            # Named, and the file named once (not the path in front of a message already
            # naming it).
            ok = rc == 1 and all(n in out for n in names) and out.count(name) == 1
            self.report(case, label, f"exit {rc}", "exit 1, names " + " & ".join(names), ok,
                        last.replace(self.work_dir + "/", ""))

    def print_table(self):
        header = ("case", "check", "measured", "limit", "result")
        widths = [max(len(str(r[i])) for r in self.rows + [header]) for i in range(5)]
        line = "  ".join(f"{{:<{w}}}" for w in widths)
        print(line.format(*header))
        print("  ".join("-" * w for w in widths))
        for row in self.rows:
            print(line.format(*row[:5]) + (f"  {row[5]}" if row[5] else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bin_dir", nargs="?", default=os.environ.get("MILLIPEDE_BIN_DIR"),
                        help="folder with millipede-run and millipede-test-logits")
    parser.add_argument("--keep", action="store_true", help="keep the temporary models")
    parser.add_argument("--case", action="append",
                        help="run only this variant, or 'malformed' (repeatable)")
    args = parser.parse_args()
    if not args.bin_dir:
        parser.error("give BIN_DIR or set MILLIPEDE_BIN_DIR")
    if IMPORT_ERROR is not None:
        print(f"SKIP: the oracle needs numpy, torch, transformers, safetensors and gguf "
              f"({IMPORT_ERROR}); cluster/install-deps.sh --test installs them into build/pyenv")
        return SKIP
    transformers.logging.set_verbosity_error()
    global TYPES
    TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0]
    for tool in ("millipede-run", "millipede-test-logits"):
        if not os.access(os.path.join(args.bin_dir, tool), os.X_OK):
            print(f"FAIL: {tool} not found in {args.bin_dir}")
            return 1
    cases = variants()
    run_malformed = True
    if args.case:
        known = {v.name for v in cases} | {"malformed"}
        if set(args.case) - known:
            parser.error(f"unknown case(s) {sorted(set(args.case) - known)}; "
                         f"known: {sorted(known)}")
        cases = [v for v in cases if v.name in args.case]
        run_malformed = "malformed" in args.case

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"numpy {np.__version__}; {len(cases) + run_malformed} cases")
    start = time.monotonic()
    work_dir = tempfile.mkdtemp(prefix="gguf_models_oracle_")
    try:
        oracle = GgufOracle(args.bin_dir, work_dir)
        for variant in cases:
            oracle.check_variant(variant)
        if run_malformed:
            oracle.guarded("malformed", "malformed", oracle.check_malformed)
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
