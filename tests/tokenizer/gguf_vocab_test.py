#!/usr/bin/env python3
"""GGUF vocabularies: gguf_vocab_tool (tokenizer/gguf_vocab.h) against two oracles.

The vocabularies: SmolLM2-135M-Instruct's real GGUF file (gpt2 model, pre "smollm"), and GGUF
files this test writes with `gguf`'s GGUFWriter: a byte-level BPE (gpt2 model) trained with
`tokenizers` for each supported tokenizer.ggml.pre family ("gpt-2", none, "llama-bpe",
"qwen2", "smollm"), and a SentencePiece-style one (llama model: <unk> <s> </s>, the 256 byte
tokens, scored pieces) with and without add_space_prefix. Each file is read back with
GGUFReader and handed to the tool as JSON; its ids for a few hundred strings, and its decoding
(both skip_special_tokens settings) of those ids and of random id sequences, are compared with:

  1. transformers: AutoTokenizer.from_pretrained(dir, gguf_file=...), encoding with
     add_special_tokens=False and decoding with clean_up_tokenization_spaces=False;
  2. a tokenizers.Tokenizer built here from the same vocabulary and merges, with llama.cpp's
     regexes for the file's tokenizer.ggml.pre transcribed as Split(Isolated) steps (llama.cpp
     keeps unmatched text as pieces, like Isolated) before a regex-less ByteLevel, and
     llama.cpp's treatment of token types (control and unknown: special added tokens;
     user-defined: plain added tokens). For the llama model it derives the merges from the
     scores the way transformers does (re-implemented here).

Oracle 2 must agree on every string and every id sequence. transformers must agree on every id
sequence it decodes, and on every string except where, by design, it reads the file
differently from llama.cpp (and so from the tool):
  - it ignores tokenizer.ggml.pre: a gpt2 vocabulary in a llama-architecture file always gets
    GPT-2's regex (so "smollm" loses its digit splitting and "llama-bpe" the Llama 3 regex),
    one in a qwen2-architecture file always gets Qwen2's regex and an NFC normalizer that
    llama.cpp does not apply (and the tokenizer.json spelling of that regex, whose caseless
    (?i:'s|...) also joins an apostrophe to a long s "ſ", where llama.cpp's '[sS] does not);
  - it ignores the ignore_merges that llama.cpp sets for "llama-bpe";
  - it treats user-defined tokens (type 4) as plain vocabulary, never matching them in text.
A string is compared with transformers only where none of this can show: transformers'
normalizer and pre-tokenizer split each stretch between special tokens into the same pieces as
the file's, ignore_merges changes nothing for it (oracle 2 with and without), and it spells
no user-defined token. How many strings each oracle checked is printed.

Also checked: the BOS (tokenizer.ggml.add_bos_token and llama.cpp's defaults), and the
tokenizer.json parts the llama vocabulary relies on (Prepend/Replace normalizers, Metaspace and
Digits pre-tokenizers, ByteFallback/Fuse/Replace/Strip/Metaspace decoders, no decoder) on
variants of oracle 2's tokenizer.json, loaded by the tool with --tokenizer-json and compared
with `tokenizers` directly. Every decode also checks that streaming gives the same text.

Exit status: 0 all equal; 1 a difference or failure (a missing model file is a failure); 77
(skipped) when `gguf`, `tokenizers`, `torch` or `transformers` cannot be imported.
"""

import argparse
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import tempfile

SKIP = 77

# llama.cpp's regexes (src/llama-vocab.cpp), per family of tokenizer.ggml.pre names.
GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3_RE = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
             r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
            r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# pre name -> (regexes, ignore_merges, add_bos default), as llama.cpp maps the names this
# layer supports; None stands for an absent key (GPT-2's regex here, see gguf_vocab.h).
PRE = {None: ([GPT2_RE], False, False)}
PRE.update({name: ([GPT2_RE], False, False) for name in ("gpt-2", "phi-2", "mpt", "olmo")})
PRE.update({name: ([LLAMA3_RE], True, True)
            for name in ("llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral")})
PRE.update({name: ([LLAMA3_RE], False, False) for name in ("dbrx", "smaug-bpe")})
PRE.update({name: ([QWEN2_RE], False, False)
            for name in ("qwen2", "deepseek-r1-qwen", "stablelm2")})
PRE.update({name: ([r"\p{N}", GPT2_RE], False, False)
            for name in ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
                         "minerva-7b")})

CONTROL, UNKNOWN, USER_DEFINED, NORMAL, BYTE = 3, 2, 4, 1, 6

EN = ("the of and to in is that it for was on are as with his they at be this from have or by "
      "one had not but what all were when we there can an your which their said if do will each "
      "about how up out them then she many some so these would other into has more her two like "
      "him see time could no make than first been its who now people my made over did down only "
      "way find use may water long little very after words called just where most know token "
      "tokenizer model merge vocabulary byte level pre split regex number digit space tab line "
      "The This When It We They I You She He Hello World Python Rust Llama Qwen").split()
OTHER = ["café", "naïve", "Zürich", "straße", "Übermäßig", "déjà", "東京", "北京市", "日本語",
         "中文", "文本", "こんにちは", "カタカナ", "ひらがな", "안녕하세요", "한국어", "Привет",
         "мир", "Москва", "مرحبا", "بالعالم", "שלום", "नमस्ते", "दुनिया", "हिंदी", "ภาษาไทย",
         "Ελληνικά", "αβγ"]
CONTRACTIONS = ["don't", "it's", "we'll", "I'm", "they've", "you'd", "DON'T", "IT'S", "We'Re",
                "O'Neil", "rock'n'roll", "it'ſelf"]
CODE = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
        "#include <stdio.h>\n", "x = {'a': 1, \"b\": [2, 3]}", "if a != b && c >= d || !e:",
        "std::vector<int> v;", "// comment", "/* block */", "print(f\"{x:.3f}\")", "a->b", "=>",
        "    indented\n        more\n"]
PUNCT = [".", ",", "!", "?", "...", ";", ":", "-", "--", "—", "(", ")", "[", "]", "\"", "'", "«",
         "»", "“", "”", "、", "。", "!?", "#", "$", "%", "&", "*", "@", "/", "\\", "|", "~", "`"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\t\t", " " * 8, "\u00a0",
          "\u3000", "\u2009"]
EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "❤️", "🇯🇵", "✨", "🤖", "🧑‍💻"]
COMBINING = ["e\u0301", "a\u0308", "o\u0302\u0323", "\u1100\u1161", "A\u030a", "\u0915\u093c",
             "e\u0301\u0301", "n\u0303o"]
NUMBERS = ["0", "7", "12", "123", "1234", "12345", "2024", "3.14159", "1,000,000", "0x1F",
           "12345678901234567890", "٣٤٥", "१२३", "½", "²", "Ⅻ", "1st", "2nd", "v2.0.1"]
SPECIAL_BITS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tool|>", "<s>", "</s>",
                "<unk>", "<|im_start|>user\n", "<|im_", "<s", "</s", "<<s>>", "<|endoftext|"]


def corpus(rng, lines):
    """Training text: mostly English-like sentences with every other ingredient mixed in."""
    out = []
    for _ in range(lines):
        words = []
        for _ in range(rng.randint(3, 18)):
            r = rng.random()
            if r < 0.72:
                words.append(rng.choice(EN))
            elif r < 0.80:
                words.append(rng.choice(OTHER))
            elif r < 0.86:
                words.append(rng.choice(NUMBERS) if rng.random() < 0.5 else
                             str(rng.randint(0, 10 ** rng.randint(1, 6))))
            elif r < 0.91:
                words.append(rng.choice(CONTRACTIONS))
            elif r < 0.95:
                words.append(rng.choice(PUNCT))
            else:
                words.append(rng.choice(CODE))
        line = " ".join(words)
        if rng.random() < 0.3:
            line += rng.choice([".", "!", "?", ":"])
        out.append(line + rng.choice(["\n", "\n", " ", "\n\n", "\t"]))
    return out


def test_strings(rng, count):
    texts = [
        "", " ", "  ", "\t", "\n", "\n\n", " \n ", "\r\n", "hello world", "Hello, world!",
        "  leading spaces", "trailing spaces   ", "a    b", "a \t b\n\nc", "\t\tindent\n    code",
        "don't stop, it's fine. We'll see; I'm here, you'd've", "'s 's 'S 'LL 'ſ 'K", "it'ſelf ſ'ſt",
        "0", "12", "123", "1234", "12345678901234567890", "3.14159 and 1,000,000", "x2 2x 22y",
        "١٢٣ ٤٥ १२३ ½ ² Ⅻ", "😀🎉👍🏽 👨‍👩‍👧‍👦 🇯🇵", "日本語のテキスト 中文文本",
        "مرحبا بالعالم", "नमस्ते दुनिया", "e\u0301 a\u0308 o\u0302\u0323 \u1100\u1161",
        "cafe\u0301 vs caf\u00e9", "<|im_start|>user\nhi<|im_end|>\n", "<s>hello</s>", "<unk>",
        " <s> ", "<s><s>", "<|tool|>", "a<|tool|>b", "<|endoftext|>", "<|im_", "<s", "</s",
        "hello<s>world", " hello <s> world ", "▁hello ▁▁ ▁", "<0x41> <0xFF>", "\u2581", "x\u2581y",
        "Ünïcödé ÀÉÎÕÜ", "ℌ𝔢𝔩𝔩𝔬 𝓯𝓪𝓷𝓬𝔂 ﬁne", "a" * 300, " " * 40 + "x", "1" * 40,
        "The quick brown fox jumps over the lazy dog.\nIt's 2024; we'll see what they've done.",
    ]
    pools = [EN, EN, EN, OTHER, CONTRACTIONS, CODE, PUNCT, SPACES, SPACES, EMOJI, COMBINING,
             NUMBERS, SPECIAL_BITS]
    while len(texts) < count:
        parts = []
        for _ in range(rng.randint(1, 14)):
            pool = rng.choice(pools)
            parts.append(rng.choice(pool))
            if rng.random() < 0.5:
                parts.append(" ")
        texts.append("".join(parts))
    return texts


# --- GGUF files ---------------------------------------------------------------------------

def write_gguf(gguf, path, arch, v):
    """Writes vocabulary `v` (the tool's JSON form) as a GGUF file with no tensors."""
    w = gguf.GGUFWriter(path, arch)
    w.add_name("synthetic " + os.path.basename(path))
    w.add_tokenizer_model(v["model"])
    if v.get("pre") is not None:
        w.add_tokenizer_pre(v["pre"])
    w.add_token_list(v["tokens"])
    if "token_types" in v:
        w.add_token_types(v["token_types"])
    if "scores" in v:
        w.add_token_scores(v["scores"])
    if "merges" in v:
        w.add_token_merges(v["merges"])
    for key, add in (("bos_id", w.add_bos_token_id), ("eos_id", w.add_eos_token_id),
                     ("unk_id", w.add_unk_token_id), ("pad_id", w.add_pad_token_id),
                     ("add_bos", w.add_add_bos_token), ("add_eos", w.add_add_eos_token),
                     ("add_space_prefix", w.add_add_space_prefix)):
        if v.get(key) is not None:
            add(v[key])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_gguf(gguf, path):
    """The tool's JSON form of the tokenizer.ggml.* values of a GGUF file."""
    fields = gguf.GGUFReader(path).fields

    def get(key):
        field = fields.get("tokenizer.ggml." + key)
        return None if field is None else field.contents()

    v = {"model": get("model"), "tokens": get("tokens")}
    for key, name in (("pre", "pre"), ("scores", "scores"), ("token_type", "token_types"),
                      ("merges", "merges"), ("bos_token_id", "bos_id"), ("eos_token_id", "eos_id"),
                      ("unknown_token_id", "unk_id"), ("padding_token_id", "pad_id"),
                      ("add_bos_token", "add_bos"), ("add_eos_token", "add_eos"),
                      ("add_space_prefix", "add_space_prefix")):
        value = get(key)
        if value is not None:
            v[name] = value
    return v


# --- vocabularies ---------------------------------------------------------------------------

def pre_tokenizer_for(tk, pre):
    regexes = PRE[pre][0]
    steps = [tk.pre_tokenizers.Split(tk.Regex(r), behavior="isolated") for r in regexes]
    steps.append(tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    return tk.pre_tokenizers.Sequence(steps)


def train_gpt2_vocab(tk, lines, pre):
    """A byte-level BPE trained with the splitting of `pre`: <|endoftext|> <|im_start|>
    <|im_end|> (control), the byte symbols and merges, <|tool|> (user-defined)."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    t = tk.Tokenizer(tk.models.BPE())
    t.pre_tokenizer = pre_tokenizer_for(tk, pre)
    trainer = tk.trainers.BpeTrainer(vocab_size=3000, special_tokens=specials, min_frequency=2,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     show_progress=False)
    t.train_from_iterator(lines, trainer)
    model = json.loads(t.to_str())["model"]
    tokens = [None] * len(model["vocab"])
    for token, i in model["vocab"].items():
        tokens[i] = token
    tokens.append("<|tool|>")
    types = [CONTROL if tok in specials else NORMAL for tok in tokens]
    types[-1] = USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    v = {"model": "gpt2", "tokens": tokens, "token_types": types, "merges": merges,
         "bos_id": 1, "eos_id": 2, "pad_id": 0, "add_space_prefix": False}
    if pre is not None:
        v["pre"] = pre
    return v


def train_llama_vocab(tk, lines, add_space_prefix):
    """A SentencePiece-style vocabulary: <unk> <s> </s>, <0x00>..<0xFF>, the pieces of a BPE
    trained on "▁"-joined words (merged pieces scored by merge order, then single characters,
    with ties),
    <|im_start|> <|im_end|> (control) and <|tool|> (user-defined)."""
    t = tk.Tokenizer(tk.models.BPE())
    t.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = tk.trainers.BpeTrainer(vocab_size=3000, min_frequency=2, limit_alphabet=160,
                                     show_progress=False)
    t.train_from_iterator(lines, trainer)
    model = json.loads(t.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    merged = ["".join(m.split(" ")) for m in merges]
    chars = sorted((tok for tok in model["vocab"] if tok not in set(merged)),
                   key=lambda tok: model["vocab"][tok])
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    scores = [0.0] * len(tokens)
    # Scores fall with the merge order, in steps shared by eight pieces: the ties exercise the
    # tie-breaking of the derived merge order.
    for i, tok in enumerate(merged + chars):
        tokens.append(tok)
        types.append(NORMAL)
        scores.append(-float(i // 8))
    for tok, kind in (("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL),
                      ("<|tool|>", USER_DEFINED)):
        tokens.append(tok)
        types.append(kind)
        scores.append(0.0)
    v = {"model": "llama", "tokens": tokens, "token_types": types, "scores": scores,
         "bos_id": 1, "eos_id": 2, "unk_id": 0}
    if add_space_prefix is not None:
        v["add_space_prefix"] = add_space_prefix
    return v


def merges_from_scores(tokens, scores):
    """transformers' GGUFTokenizerSkeleton derivation, re-implemented."""
    score = {t: scores[i] for i, t in enumerate(tokens) if t}
    merges = []
    for i, t in enumerate(tokens):
        if not t:
            continue
        local = [(t[:k], t[k:], scores[i]) for k in range(1, len(t))
                 if t[:k] in score and t[k:] in score]
        local.sort(key=lambda x: (score[x[0]], score[x[1]]), reverse=True)
        merges.extend(local)
    merges.sort(key=lambda x: x[2], reverse=True)
    return [(a, b) for a, b, _ in merges]


def build_oracle(tk, v, ignore_merges=None):
    """Oracle 2: a tokenizers.Tokenizer with llama.cpp's reading of vocabulary `v`."""
    tokens = v["tokens"]
    vocab = {t: i for i, t in enumerate(tokens) if t}
    types = v.get("token_types") or [NORMAL] * len(tokens)
    if v["model"] == "gpt2":
        pre = v.get("pre")
        if ignore_merges is None:
            ignore_merges = PRE[pre][1]
        merges = [tuple(m.split(" ")) for m in v["merges"]]
        t = tk.Tokenizer(tk.models.BPE(vocab, merges, ignore_merges=ignore_merges))
        t.pre_tokenizer = pre_tokenizer_for(tk, pre)
        t.decoder = tk.decoders.ByteLevel()
    else:
        scores = v.get("scores") or [0.0] * len(tokens)
        unk = tokens[v["unk_id"]] if v.get("unk_id") is not None else None
        t = tk.Tokenizer(tk.models.BPE(vocab, merges_from_scores(tokens, scores), unk_token=unk,
                                       fuse_unk=True, byte_fallback=True))
        prefix = v.get("add_space_prefix", True)
        steps = [tk.normalizers.Prepend("\u2581")] if prefix else []
        t.normalizer = tk.normalizers.Sequence(steps + [tk.normalizers.Replace(" ", "\u2581")])
        steps = [tk.decoders.ByteFallback(), tk.decoders.Fuse(), tk.decoders.Replace("\u2581", " ")]
        if prefix:
            steps.append(tk.decoders.Strip(" ", 1, 0))
        t.decoder = tk.decoders.Sequence(steps)
    t.add_special_tokens([tk.AddedToken(tok, normalized=False, special=True)
                          for tok, ty in zip(tokens, types) if tok and ty in (UNKNOWN, CONTROL)])
    t.add_tokens([tk.AddedToken(tok, normalized=False, special=False)
                  for tok, ty in zip(tokens, types) if tok and ty == USER_DEFINED])
    return t


def expected_bos(v):
    if v.get("bos_id") is None:
        return None
    default = True if v["model"] == "llama" else PRE.get(v.get("pre"), (None, None, False))[2]
    return v["bos_id"] if v.get("add_bos", default) else None


# --- comparisons ----------------------------------------------------------------------------

def run_tool(args, lines):
    proc = subprocess.run(args, input="".join(line + "\n" for line in lines).encode("utf-8"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(args[:3]), proc.returncode,
                                                   proc.stderr.decode("utf-8", "replace")))
    out = proc.stdout.decode("utf-8").split("\n")
    if out and out[-1] == "":
        out.pop()
    if len(out) != len(lines):
        raise RuntimeError("tool printed %d lines for %d inputs" % (len(out), len(lines)))
    return [json.loads(line) for line in out]


class Report:
    def __init__(self, name):
        self.name = name
        self.failures = 0
        self.counts = {}

    def check(self, what, ok, detail):
        self.counts[what] = self.counts.get(what, 0) + 1
        if not ok:
            self.failures += 1
            if self.failures <= 8:
                print("[%s] %s mismatch: %s" % (self.name, what, detail))

    def done(self):
        print("[%s] %s: %s" % (self.name, ", ".join("%s %d" % kv for kv in self.counts.items()),
                               "all equal" if not self.failures else
                               "%d mismatches" % self.failures))
        return self.failures


def segments(text, specials):
    """`text` cut at the leftmost-longest occurrences of `specials`, those left out."""
    out, start, pos = [], 0, 0
    while pos < len(text):
        match = max((s for s in specials if text.startswith(s, pos)), key=len, default=None)
        if match is None:
            pos += 1
            continue
        if pos > start:
            out.append(text[start:pos])
        pos += len(match)
        start = pos
    if start < len(text):
        out.append(text[start:])
    return out


def pieces(backend, text):
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    if backend.pre_tokenizer is None:
        return [text]
    return [p for p, _ in backend.pre_tokenizer.pre_tokenize_str(text)]


def random_id_lists(rng, v, count):
    tokens, types = v["tokens"], v.get("token_types") or [NORMAL] * len(v["tokens"])
    special = [i for i, ty in enumerate(types) if ty in (UNKNOWN, CONTROL, USER_DEFINED)]
    byte_ids = {int(t[3:5], 16): i for i, t in enumerate(tokens)
                if re.fullmatch(r"<0x[0-9A-F]{2}>", t)}
    lists = []
    for _ in range(count):
        ids = []
        for _ in range(rng.randint(1, 24)):
            r = rng.random()
            if r < 0.15:
                ids.append(rng.choice(special))
            elif r < 0.35 and byte_ids:
                # Runs of byte tokens, whole characters or not.
                char = rng.choice(["é", "日", "😀", "a", "\u2581"])
                raw = list(char.encode("utf-8"))
                if rng.random() < 0.4:
                    raw = raw[:rng.randint(1, len(raw))] + [rng.randint(0x80, 0xFF)]
                ids.extend(byte_ids[b] for b in raw)
            else:
                ids.append(rng.randrange(len(tokens)))
        lists.append(ids)
    return lists


def compare_vocab(name, v, gguf_path, args, tk, transformers, rng, texts, tmp):
    report = Report(name)
    vocab_path = os.path.join(tmp, name + ".vocab.json")
    with open(vocab_path, "w", encoding="utf-8") as f:
        json.dump(v, f, ensure_ascii=False)
    tool = [args.tool, "--vocab", vocab_path]

    info = json.loads(subprocess.run(tool + ["--info"], stdout=subprocess.PIPE,
                                     check=True).stdout)
    report.check("bos", info["bos_id"] == expected_bos(v),
                 "bos_id %s, expected %s" % (info["bos_id"], expected_bos(v)))

    oracle = build_oracle(tk, v)
    hf = transformers.AutoTokenizer.from_pretrained(os.path.dirname(gguf_path),
                                                    gguf_file=os.path.basename(gguf_path))
    ours = run_tool(tool, [json.dumps(t) for t in texts])
    want = [e.ids for e in oracle.encode_batch(texts, add_special_tokens=False)]
    types = v.get("token_types") or []
    user_defined = [t for t, ty in zip(v["tokens"], types) if ty == USER_DEFINED]
    specials = [t for t, ty in zip(v["tokens"], types) if ty in (UNKNOWN, CONTROL)]
    no_ignore = None
    if v["model"] == "gpt2" and PRE[v.get("pre")][1]:
        no_ignore = build_oracle(tk, v, ignore_merges=False)
    not_compared = differing = 0
    for text, got, expected in zip(texts, ours, want):
        report.check("encode/oracle", got == expected,
                     "%r\n  oracle: %s\n  ours:   %s" % (text[:120], expected[:30], got[:30]))
        tf_ids = hf.encode(text, add_special_tokens=False)
        # transformers, where it reads the file like llama.cpp (see the docstring).
        comparable = not any(u in text for u in user_defined)
        if comparable and v["model"] == "gpt2":
            comparable = all(pieces(hf.backend_tokenizer, s) == pieces(oracle, s)
                             for s in segments(text, specials))
            if comparable and no_ignore is not None:
                comparable = no_ignore.encode(text, add_special_tokens=False).ids == expected
        if not comparable:
            not_compared += 1
            differing += tf_ids != got
            continue
        report.check("encode/transformers", got == tf_ids,
                     "%r\n  transformers: %s\n  ours:         %s" % (text[:120], tf_ids[:30],
                                                                    got[:30]))
    if not_compared:
        print("[%s] transformers reads this file differently on %d strings; it differs on %d "
              "of them" % (name, not_compared, differing))

    id_lists = want + random_id_lists(rng, v, 150)
    for skip in (False, True):
        ours = run_tool(tool + ["--decode"] + (["--skip-special"] if skip else []),
                        [json.dumps(ids) for ids in id_lists])
        expected = oracle.decode_batch(id_lists, skip_special_tokens=skip)
        for ids, got, want_text in zip(id_lists, ours, expected):
            tf_text = hf.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)
            report.check("decode/oracle", got == want_text,
                         "skip=%s %s\n  oracle: %r\n  ours:   %r" % (skip, ids[:20], want_text[:100],
                                                                  got[:100]))
            report.check("decode/transformers", got == tf_text,
                         "skip=%s %s\n  transformers: %r\n  ours:         %r" %
                         (skip, ids[:20], tf_text[:100], got[:100]))
    return report.done(), oracle


def compare_aliases(name, v, args, tk, texts, tmp):
    """The other names of `v`'s pre family: same regexes, their own ignore_merges and BOS."""
    failures = 0
    for alias, (regexes, _, _) in PRE.items():
        if alias in (None, v.get("pre")) or regexes != PRE[v.get("pre")][0]:
            continue
        report = Report("%s-as-%s" % (name, alias))
        va = dict(v, pre=alias)
        path = os.path.join(tmp, "%s-as-%s.vocab.json" % (name, alias))
        with open(path, "w", encoding="utf-8") as f:
            json.dump(va, f, ensure_ascii=False)
        tool = [args.tool, "--vocab", path]
        info = json.loads(subprocess.run(tool + ["--info"], stdout=subprocess.PIPE,
                                         check=True).stdout)
        report.check("bos", info["bos_id"] == expected_bos(va),
                     "bos_id %s, expected %s" % (info["bos_id"], expected_bos(va)))
        ours = run_tool(tool, [json.dumps(t) for t in texts])
        oracle = build_oracle(tk, va)
        want = [e.ids for e in oracle.encode_batch(texts, add_special_tokens=False)]
        for text, got, expected in zip(texts, ours, want):
            report.check("encode/oracle", got == expected,
                         "%r\n  oracle: %s\n  ours:   %s" % (text[:120], expected[:30], got[:30]))
        failures += report.done()
    return failures


def json_variants(base):
    """(name, tokenizer.json) variants of a SentencePiece-style tokenizer.json."""
    variants = [("legacy", base)]

    def variant(name, normalizer="keep", pre_tokenizer="keep", decoder="keep"):
        v = json.loads(json.dumps(base))
        if normalizer != "keep":
            v["normalizer"] = normalizer
        if pre_tokenizer != "keep":
            v["pre_tokenizer"] = pre_tokenizer
        if decoder != "keep":
            v["decoder"] = decoder
        variants.append((name, v))

    rep = {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}
    fb, fuse = {"type": "ByteFallback"}, {"type": "Fuse"}

    def strip(content, start, stop):
        return {"type": "Strip", "content": content, "start": start, "stop": stop}

    for scheme in ("always", "first", "never"):
        for split in (True, False):
            meta = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme,
                    "split": split}
            variant("metaspace-%s-%s" % (scheme, "split" if split else "whole"), None, meta,
                    {"type": "Sequence", "decoders": [fb, fuse, meta]})
    variant("metaspace-legacy-fields", None,
            {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
            {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True,
             "str_rep": "\u2581"})
    variant("digits-individual", None,
            {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"}]})
    variant("digits-runs", None,
            {"type": "Sequence", "pretokenizers": [
                {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
                {"type": "Digits", "individual_digits": False}]})
    variant("regex-replace-normalizer",
            {"type": "Sequence", "normalizers": [
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581\u2581"},
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})
    variant("llama-converter-decoder-order",
            decoder={"type": "Sequence", "decoders": [rep, fb, fuse, strip(" ", 1, 0)]})
    # HF 0.21's Strip panics where its trailing cut runs past the start of a token (an empty
    # token, as Fuse makes of an empty list, or one of `content` only, shorter than start +
    # stop), so a trailing Strip is only compared first in the chain, on vocabulary tokens.
    variant("strip-per-token-trailing", decoder={"type": "Sequence", "decoders": [
        strip("\u2581", 0, 1), fb, fuse, rep]})
    variant("strip-per-token-leading", decoder={"type": "Sequence", "decoders": [
        strip("\u2581", 2, 0), fb, fuse, rep]})
    variant("replace-multichar", decoder={"type": "Sequence", "decoders": [
        fb, {"type": "Replace", "pattern": {"String": "\u2581t"}, "content": "<T>"}, rep, fuse]})
    variant("no-decoder", decoder=None)
    return variants


def compare_json_variants(base_json, args, tk, rng, texts, tmp, v):
    failures = 0
    id_lists = random_id_lists(rng, v, 100)
    for name, variant in json_variants(base_json):
        report = Report("json-" + name)
        path = os.path.join(tmp, "variant-%s.json" % name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(variant, f, ensure_ascii=False)
        hf = tk.Tokenizer.from_file(path)
        tool = [args.tool, "--tokenizer-json", path]
        ours = run_tool(tool, [json.dumps(t) for t in texts])
        want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
        for text, got, expected in zip(texts, ours, want):
            report.check("encode", got == expected,
                         "%r\n  hf:   %s\n  ours: %s" % (text[:120], expected[:30], got[:30]))
        lists = want + id_lists
        for skip in (False, True):
            ours = run_tool(tool + ["--decode"] + (["--skip-special"] if skip else []),
                            [json.dumps(ids) for ids in lists])
            expected = hf.decode_batch(lists, skip_special_tokens=skip)
            for ids, got, want_text in zip(lists, ours, expected):
                report.check("decode", got == want_text,
                             "skip=%s %s\n  hf:   %r\n  ours: %r" % (skip, ids[:20], want_text[:100],
                                                                  got[:100]))
        failures += report.done()
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", required=True, help="path of gguf_vocab_tool")
    parser.add_argument("--model", required=True, help="SmolLM2-135M-Instruct's GGUF file")
    parser.add_argument("--count", type=int, default=300, help="test strings")
    parser.add_argument("--seed", type=int, default=20251128)
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' progress bars
    try:
        import gguf
        import tokenizers as tk
        import transformers
        if importlib.util.find_spec("torch") is None:  # transformers reads GGUF only with it
            raise ImportError("No module named 'torch'")
    except ImportError as e:
        print("SKIP: %s (the oracles need gguf, tokenizers, torch and transformers)" % e)
        return SKIP
    transformers.logging.set_verbosity_error()
    if not os.path.isfile(args.model):
        print("FAIL: model file %s is missing (cluster/fetch-smollm2.sh fetches it)" % args.model)
        return 1

    rng = random.Random(args.seed)
    lines = corpus(rng, 6000)
    texts = test_strings(rng, args.count)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        v = read_gguf(gguf, args.model)
        f, _ = compare_vocab("smollm2-real", v, args.model, args, tk, transformers, rng, texts, tmp)
        failures += f

        configs = []
        for pre in ("gpt-2", None, "llama-bpe", "qwen2", "smollm"):
            v = train_gpt2_vocab(tk, lines, pre)
            if pre == "llama-bpe":
                v.pop("add_bos", None)  # BOS by llama.cpp's default for the name
            elif pre == "qwen2":
                v["add_bos"] = True
            configs.append(("gpt2-" + (pre or "no-pre"), "qwen2" if pre == "qwen2" else "llama", v))
        configs.append(("llama-spm", "llama", train_llama_vocab(tk, lines, None)))
        v = train_llama_vocab(tk, lines, False)
        v["add_bos"] = False
        configs.append(("llama-spm-no-prefix", "llama", v))
        llama_oracle, llama_vocab = None, None
        for name, arch, written in configs:
            path = os.path.join(tmp, name + ".gguf")
            write_gguf(gguf, path, arch, written)
            v = read_gguf(gguf, path)
            if v != written:
                print("[%s] GGUF round trip changed the vocabulary" % name)
                failures += 1
            f, oracle = compare_vocab(name, v, path, args, tk, transformers, rng, texts, tmp)
            failures += f
            if v["model"] == "gpt2":
                failures += compare_aliases(name, v, args, tk, texts, tmp)
            if name == "llama-spm":
                llama_oracle, llama_vocab = oracle, v
        failures += compare_json_variants(json.loads(llama_oracle.to_str()), args, tk, rng,
                                          texts, tmp, llama_vocab)
    print("FAIL: %d mismatches" % failures if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
