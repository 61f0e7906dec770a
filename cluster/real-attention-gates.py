#!/usr/bin/env python3
"""Writes real-attention-gates.tsv: DuoAttention-style gates for a model that has none.

DuoAttention learns one gate per KV head (how much the head needs full attention rather than
sinks plus a recent window) and ships them as full_attention_heads.tsv. None were trained for
SmolLM2-135M-Instruct, so this script measures a proxy instead, once, with Hugging Face
transformers on the CPU: on a real-text prompt (the repository's documentation, as
real-attention.py builds its corpus), each KV head's gate is the share of its query heads'
attention mass that falls OUTSIDE the streaming region (the first SINK keys and the RECENT most
recent ones), averaged over the group's query heads and over the query positions that see more
than that region. A head whose mass stays within the sinks and the window (gate near 0) loses
little when it streams; `millipede-policy import-duo --sparsity Q` makes the lowest-gated heads
streaming heads.

The written file is committed beside real-attention.py, which reads it (the measurement itself
needs no transformers). Run with a Python that has torch and transformers (with gguf):
  real-attention-gates.py --model SmolLM2-135M-Instruct.Q4_1.gguf [--tokens 4096]
      [--sink 128 --recent 256] [--out cluster/real-attention-gates.tsv]
"""
import argparse
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load_measure_script():
    spec = importlib.util.spec_from_file_location("real_attention",
                                                  os.path.join(HERE, "real-attention.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--tokens", type=int, default=4096, help="the prompt's length")
    parser.add_argument("--skip-tokens", type=int, default=8192,
                        help="corpus tokens skipped first (real-attention.py's needle haystack "
                             "at its largest length), so the prompt is the search's region")
    parser.add_argument("--sink", type=int, default=128)
    parser.add_argument("--recent", type=int, default=256)
    parser.add_argument("--out", default=os.path.join(HERE, "real-attention-gates.tsv"))
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ra = load_measure_script()
    units, _, digest = ra.build_corpus(os.path.dirname(HERE))
    directory, name = os.path.split(os.path.abspath(args.model))
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    counts = [len(tokenizer(sep + text, add_special_tokens=False)["input_ids"])
              for sep, text, _ in units]
    # The same sentence regions as real-attention.py: skip the haystack's, then take the prompt.
    used, start = 0, 0
    while start < len(units) and used + counts[start] <= args.skip_tokens:
        used += counts[start]
        start += 1
    while start < len(units) and not units[start][2]:  # start at a sentence's start
        start += 1
    taken, used = [], 0
    for i in range(start, start + len(units)):
        j = i % len(units)
        if used + counts[j] > args.tokens:
            break
        taken.append(j)
        used += counts[j]
    text = ra.join_units([units[j] for j in taken])
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    ids = ids[:, :args.tokens]
    length = ids.shape[1]
    print(f"prompt: {length} tokens from corpus unit {start} (corpus sha256 {digest[:12]})",
          file=sys.stderr)

    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name,
                                                 torch_dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    group = heads // kv_heads
    window = args.sink + args.recent
    if length <= window:
        sys.exit(f"the prompt ({length} tokens) must be longer than sink + recent ({window})")

    # Mask of the streaming region for query positions window..length-1.
    q = torch.arange(window, length).unsqueeze(1)
    k = torch.arange(length).unsqueeze(0)
    streaming = (k < args.sink) | ((k <= q) & (k > q - args.recent))
    gates = [None] * config.num_hidden_layers

    def hook(layer):
        def run(module, inputs, output):
            weights = output[1]  # [1, heads, length, length]
            inside = (weights[0, :, window:, :] * streaming).sum(-1)  # [heads, queries]
            outside = 1.0 - inside.mean(-1)  # per query head
            gates[layer] = outside.view(kv_heads, group).mean(-1).tolist()
            return (output[0], None) + tuple(output[2:])
        return run

    for i, layer in enumerate(model.model.layers):
        layer.self_attn.register_forward_hook(hook(i))
    with torch.no_grad():
        model(ids, output_attentions=True, use_cache=False)

    with open(args.out, "w") as f:
        f.write(f"# DuoAttention-style gates for {name} ({config.num_hidden_layers} layers x "
                f"{kv_heads} KV heads): one line per layer,\n"
                "# one value per KV head = the share of its query heads' attention mass outside "
                f"the first {args.sink} keys and the {args.recent} most recent,\n"
                f"# averaged over query positions {window}..{length - 1} of a {length}-token "
                "prompt of the repository's documentation\n"
                f"# (corpus sha256 {digest[:12]}). Written by cluster/real-attention-gates.py "
                "(transformers, eager attention, fp32).\n")
        for row in gates:
            f.write("\t".join(f"{g:.6f}" for g in row) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
