#!/usr/bin/env python3
"""The end-to-end peer: Hugging Face transformers (SDPA attention, bf16) on a random-weight model
of the llama3-8b shape on one GPU. Prefill time of an S-token prompt (logits of the last position
only) and decode tokens/s after it, the same measurements millipede-bench-e2e makes. Prints one
JSON line per prompt length.

usage: hf_e2e_peer.py [--seq 32768] [--decode-tokens 32]
"""
import argparse
import json
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM


def llama3_8b_config():
    return LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=1048576, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        tie_word_embeddings=False, attn_implementation="sdpa")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", default="32768")
    ap.add_argument("--decode-tokens", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    with torch.device("cuda"):
        torch.set_default_dtype(torch.bfloat16)
        model = LlamaForCausalLM(llama3_8b_config()).eval()
    for seq in [int(s) for s in args.seq.split(",")]:
        ids = torch.randint(0, 128256, (1, seq), device="cuda")
        with torch.no_grad():
            # Warm-up on a short prompt (kernel selection), then the timed prefill.
            model(ids[:, :1024], use_cache=True, logits_to_keep=1)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(ids, use_cache=True, logits_to_keep=1)
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            torch.cuda.synchronize()
            prefill_s = time.perf_counter() - t0
            cache = out.past_key_values
            t1 = time.perf_counter()
            for _ in range(args.decode_tokens):
                out = model(token, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                token = out.logits[:, -1].argmax(-1, keepdim=True)
            torch.cuda.synchronize()
            decode_s = time.perf_counter() - t1
        print(json.dumps({"bench": "e2e-peer", "impl": "transformers-sdpa",
                          "transformers": transformers.__version__, "torch": torch.__version__,
                          "seq": seq, "prefill_s": prefill_s,
                          "prefill_tokens_per_s": seq / prefill_s,
                          "decode_tokens_per_s": args.decode_tokens / decode_s,
                          "decode_ms_per_token": 1000 * decode_s / args.decode_tokens}),
              flush=True)
        del out, cache
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
