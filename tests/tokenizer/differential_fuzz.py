#!/usr/bin/env python3
"""Differential fuzz test: millipede-tokenize against Hugging Face `tokenizers`.

Encodes a few thousand random and adversarial strings with both implementations, for the
reference tokenizer files (gpt2, llama3, qwen2) and for one produced by our BPE trainer, and
requires identical ids; then decodes HF's ids with both and requires identical text. Variants
of the trained tokenizer (every Split behavior, inverted or not, ByteLevel add_prefix_space,
added tokens with lstrip/rstrip/single_word/normalized under NFC, no decoder, ignore_merges)
are compared on a subset of the strings.

Exit status: 0 all equal, 1 a difference or failure, 77 (skipped) when `tokenizers` is missing.

Two deliberate exclusions from the random code points, both Unicode-version effects rather than
tokenizer logic: code points unassigned in this Python's Unicode database (PCRE2 and HF's
Oniguruma know different Unicode versions, so their \\p{L} differs on newly assigned ones), and
combining marks whose canonical combining class HF's NFC tables (an older Unicode) do not know.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

SKIP = 77

WORDS = ["the", "The", "HELLO", "world", "don't", "I'm", "we'll", "they've", "you'd", "it's",
         "O'Neil", "naïve", "café", "Zürich", "straße", "東京", "北京市", "こんにちは", "カタカナ",
         "안녕하세요", "Привет", "мир", "مرحبا", "שלום", "नमस्ते", "ภาษาไทย", "Ελληνικά",
         "tokenization", "antidisestablishmentarianism", "x", "_", "__init__", "camelCase",
         "snake_case", "kebab-case", "ℌ𝔢𝔩𝔩𝔬", "𝓯𝓪𝓷𝓬𝔂", "ﬁne", "Ⅻ", "½", "²", "٣", "७"]
PUNCT = [".", ",", "!", "?", "...", "—", "–", "-", "'", '"', "''", "'s", "'S", "'LL", "'Re", "'ve",
         "`", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "|", "@", "#", "$", "%", "^",
         "&", "*", "+", "=", "~", ";", ":", "«", "»", "“", "”", "‘", "’", "、", "。", "！", "？"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\u00a0", "\u3000",
          "\u2028", "\u2029", "\u200b", "\u180e", "\u2009", "\u0085", "\x0b", "\x0c", " " * 17]
EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "❤️", "🏳️‍🌈", "🇯🇵", "✨", "🤖", "\U0001f9d1\u200d\U0001f4bb"]
COMBINING = ["e\u0301", "a\u0308", "o\u0302\u0323", "o\u0323\u0302", "\u212b", "\u2126", "A\u030a",
             "\u1100\u1161", "\u1100\u1161\u11a8", "\uac00\u11a8", "\u0958", "\u0f73",
             "\u1e9b\u0323", "q\u0307\u0323", "\u0344", "\u0340", "\u00c5\u0301", "e\u0301\u0301"]
SPECIAL_BITS = ["<|endoftext|>", "<|end", "oftext|>", "|>", "<|", "<|im_start|>", "<|im_end|>",
                "<|begin_of_text|>", "<|eot_id|>", "<|reserved_special_token_7|>", "<|bos|>",
                "<|eos|>", "<|pad|>", "<|im_start|>user\n", "<<|endoftext|>>", "<|endoftext|"]


def mark_mismatches(hf_nfc):
    """Combining marks that HF's NFC orders or composes differently from unicodedata."""
    bad = set()
    for cp in range(0x300, 0x110000):
        ch = chr(cp)
        if 0xD800 <= cp < 0xE000 or not unicodedata.combining(ch):
            continue
        for s in ("a" + ch + "\u0301", "a\u0316" + ch):
            if hf_nfc.normalize_str(s) != unicodedata.normalize("NFC", s):
                bad.add(ch)
    for cp in range(0x110000):
        ch = chr(cp)
        if 0xD800 <= cp < 0xE000:
            continue
        decomposed = unicodedata.normalize("NFD", ch)
        if len(decomposed) > 1 and hf_nfc.normalize_str(decomposed) != unicodedata.normalize(
                "NFC", decomposed):
            bad.update(decomposed[1:])
    return bad


def assigned_code_points(excluded):
    points = []
    for cp in range(0x20, 0x110000):
        ch = chr(cp)
        if unicodedata.category(ch) in ("Cn", "Cs") or ch in excluded:
            continue
        points.append(ch)
    return points


def random_string(rng, points):
    kind = rng.random()
    if kind < 0.08:
        return "".join(rng.choice(points) for _ in range(rng.randint(1, 30)))
    if kind < 0.12:
        return "".join(chr(rng.randint(0x20, 0x7e)) for _ in range(rng.randint(1, 60)))
    if kind < 0.15:
        return rng.choice(["a", " ", "1", "\n", "é", "字", "!"]) * rng.randint(50, 3000)
    if kind < 0.18:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40)))
    parts = []
    for _ in range(rng.randint(1, 25)):
        pool = rng.choice([WORDS, WORDS, PUNCT, SPACES, SPACES, EMOJI, COMBINING, SPECIAL_BITS,
                           None, "digits"])
        if pool is None:
            parts.append(rng.choice(points))
        elif pool == "digits":
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
        else:
            parts.append(rng.choice(pool))
    return "".join(parts)


def run_tool(args, lines):
    proc = subprocess.run(args, input="".join(line + "\n" for line in lines).encode("utf-8"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(args), proc.returncode,
                                                   proc.stderr.decode("utf-8", "replace")))
    out = proc.stdout.decode("utf-8").split("\n")
    if out and out[-1] == "":
        out.pop()
    if len(out) != len(lines):
        raise RuntimeError("%s printed %d lines for %d inputs" % (args[0], len(out), len(lines)))
    return [json.loads(line) for line in out]


def trained_variants(trained):
    """(name, tokenizer.json dict) pairs exercising options the real files leave unused."""
    variants = []

    def variant(name):
        v = json.loads(json.dumps(trained))
        variants.append((name, v))
        return v

    for behavior in ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"):
        for invert in (False, True):
            v = variant("trained-%s%s" % (behavior, "-inverted" if invert else ""))
            split, byte_level = v["pre_tokenizer"]["pretokenizers"]
            split["behavior"] = behavior
            split["invert"] = invert
            byte_level["add_prefix_space"] = True
    v = variant("trained-string-split")
    v["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"String": "e"}
    v["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext"
    v = variant("trained-added-token-flags")
    v["normalizer"] = {"type": "NFC"}
    next_id = max(t["id"] for t in v["added_tokens"]) + 1
    for content, flags in (("the", ("single_word", "lstrip", "rstrip")), (" \u00e9", ("rstrip",)),
                           ("\u1eaf", ("lstrip",))):
        token = {"id": next_id, "content": content, "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": True, "special": content == "the"}
        token.update({flag: True for flag in flags})
        v["added_tokens"].append(token)
        next_id += 1
    variant("trained-no-decoder")["decoder"] = None
    variant("trained-no-pre-tokenizer")["pre_tokenizer"] = None
    variant("trained-ignore-merges")["model"]["ignore_merges"] = True
    return variants


def compare(name, path, texts, tokenize_bin, tokenizers):
    hf = tokenizers.Tokenizer.from_file(path)
    expected = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    ours = run_tool([tokenize_bin, path, "--jsonl"], [json.dumps(t) for t in texts])
    failures = 0
    for text, want, got in zip(texts, expected, ours):
        if want != got:
            failures += 1
            if failures <= 5:
                print("[%s] encode mismatch for %r\n  hf:   %s\n  ours: %s" %
                      (name, text[:200], want[:40], got[:40]))
    expected_text = hf.decode_batch(expected, skip_special_tokens=False)
    ours_text = run_tool([tokenize_bin, path, "--decode", "--jsonl"],
                         [json.dumps(ids) for ids in expected])
    for ids, want, got in zip(expected, expected_text, ours_text):
        if want != got:
            failures += 1
            if failures <= 10:
                print("[%s] decode mismatch for %s\n  hf:   %r\n  ours: %r" %
                      (name, ids[:20], want[:200], got[:200]))
    print("[%s] %d strings: %s" % (name, len(texts),
                                   "all equal" if failures == 0 else "%d mismatches" % failures))
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenize", required=True, help="path of millipede-tokenize")
    parser.add_argument("--train-demo", required=True, help="path of tokenizer_train_demo")
    parser.add_argument("--testdata", required=True, help="folder with gpt2/, llama3/, qwen2/")
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=20240503)
    args = parser.parse_args()
    try:
        import tokenizers
        from tokenizers import normalizers
    except ImportError:
        print("SKIP: Python package `tokenizers` is not importable (pip install tokenizers)")
        return SKIP

    rng = random.Random(args.seed)
    points = assigned_code_points(mark_mismatches(normalizers.NFC()))
    texts = [random_string(rng, points) for _ in range(args.count)]
    texts += ["", " ", "\n", "<|endoftext|>", " <|endoftext|> ", "a" * 20000, " " * 5000 + "x"]

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        trained = os.path.join(tmp, "trained.json")
        subprocess.run([args.train_demo, trained], check=True)
        targets = [("trained", trained)]
        for name in ("gpt2", "llama3", "qwen2"):
            path = os.path.join(args.testdata, name, "tokenizer.json")
            if os.path.exists(path):
                targets.append((name, path))
            else:
                print("[%s] not found at %s; not compared" % (name, path))
        for name, path in targets:
            failures += compare(name, path, texts, args.tokenize, tokenizers)
        with open(trained, encoding="utf-8") as f:
            trained_json = json.load(f)
        for name, variant in trained_variants(trained_json):
            path = os.path.join(tmp, name + ".json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(variant, f, ensure_ascii=False)
            failures += compare(name, path, texts[:args.count // 5], args.tokenize, tokenizers)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
