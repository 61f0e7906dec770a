#!/usr/bin/env python3
"""Real attention, measured: sparse attention policies on a trained model and real text.

Runs Millipede's own binaries (millipede-tokenize, millipede-policy, millipede-run) on a trained
GGUF model (written for SmolLM2-135M-Instruct: Llama, ChatML chat template) and measures, per
attention policy, how far its answers move from dense attention's:

  1. prompts of real English prose: the repository's own documentation (README.md, docs/*.md)
     with code blocks, tables, headings and images removed, split into sentences; tokenized by
     the service's tokenizer (millipede-tokenize on the model file);
  2. per-head patterns found by MInference's search (`millipede-policy search` on a reference
     prompt of the largest length), reported as the share of each pattern and the density;
  3. the policies (docs/quality.md, "Real attention, measured", says why each has its shape):
     dense (an explicit all-dense policy file, run apart from the reference, which has no
     --policy), searched, MInference-style vertical-slash on every head sized by the length,
     DuoAttention-style with half of the KV heads streaming (gates: a measured proxy shipped
     beside this script), OmniKV at budgets 256, 512 and 1024, static eviction;
  4. per policy: (a) greedy agreement with dense attention over T generated tokens on a few
     real-text prompts at the largest length; (b) a needle-in-a-haystack score: a sentence such
     as "The secret code for the blue door is 48193." inside real text, the question through the
     chat template, greedy up to 24 tokens, right when the code's digits are in the answer;
  5. results.json (every number), results.md (tables), needle.png (needle score over length and
     depth, one panel per policy) and searched-policy.json in --out.

Every run is one `millipede-run --json` process; its parsed output is kept under --work (default
OUT/work) by a key of everything that determines it, so an interrupted measurement resumes where
it stopped. Python 3 standard library only.

  real-attention.py --bin BUILD/bin --model SmolLM2-135M-Instruct.Q4_1.gguf --backend cuda \\
      --out results/real-attention --lengths 2048,4096,8192
"""
import argparse
import concurrent.futures
import hashlib
import json
import math
import mmap
import os
import random
import re
import shlex
import struct
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_GATES = os.path.join(HERE, "real-attention-gates.tsv")
AGREEMENT_LOGPROBS = 5  # alternatives reported per generated token in the agreement runs
ALL_POLICIES = ["dense", "searched", "minference", "xattention", "fp8", "duo", "omnikv-256",
                "omnikv-512", "omnikv-1024", "static-eviction"]


def fail(message):
    sys.exit(f"real-attention: {message}")


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# GGUF metadata (only the key-value section: the config and the chat template)

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                10: "<Q", 11: "<q", 12: "<d"}


def read_gguf_metadata(path, wanted_prefixes=("general.", "tokenizer.chat_template",
                                             "tokenizer.ggml.eos", "tokenizer.ggml.bos")):
    """The file's metadata values whose keys start with one of `wanted_prefixes` or lie under
    the architecture's name; arrays are skipped (their values are not needed here)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            fail(f"{path} is not a GGUF file")
        version, = struct.unpack_from("<I", m, 4)
        if version not in (2, 3):
            fail(f"{path}: GGUF version {version}")
        _, kv_count = struct.unpack_from("<QQ", m, 8)
        pos = 24

        def string(pos):
            n, = struct.unpack_from("<Q", m, pos)
            return m[pos + 8:pos + 8 + n].decode("utf-8", "replace"), pos + 8 + n

        def value(pos, kind):
            if kind in GGUF_SCALARS:
                fmt = GGUF_SCALARS[kind]
                v, = struct.unpack_from(fmt, m, pos)
                return v, pos + struct.calcsize(fmt)
            if kind == 8:
                s, pos = string(pos)
                return s, pos
            if kind == 9:
                item, n = struct.unpack_from("<IQ", m, pos)
                pos += 12
                if item in GGUF_SCALARS:
                    return None, pos + n * struct.calcsize(GGUF_SCALARS[item])
                for _ in range(n):
                    _, pos = value(pos, item)
                return None, pos
            fail(f"{path}: unknown GGUF value type {kind}")

        meta = {}
        for _ in range(kv_count):
            key, pos = string(pos)
            kind, = struct.unpack_from("<I", m, pos)
            pos += 4
            v, pos = value(pos, kind)
            meta[key] = v
    arch = meta.get("general.architecture")
    keep = {}
    for key, v in meta.items():
        if v is None:
            continue
        if key.startswith(wanted_prefixes) or (arch and key.startswith(arch + ".")):
            keep[key] = v
    return keep


class ModelInfo:
    def __init__(self, path):
        self.path = os.path.abspath(path)
        meta = read_gguf_metadata(path)
        arch = meta.get("general.architecture", "")
        self.arch = arch
        self.name = meta.get("general.name", os.path.basename(path))
        try:
            self.layers = int(meta[f"{arch}.block_count"])
            self.heads = int(meta[f"{arch}.attention.head_count"])
            self.kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", self.heads))
            self.context = int(meta[f"{arch}.context_length"])
        except KeyError as e:
            fail(f"{path} lacks {e}")
        self.template = meta.get("tokenizer.chat_template")
        self.eos_id = meta.get("tokenizer.ggml.eos_token_id")
        self.size = os.path.getsize(path)


# --------------------------------------------------------------------------------------------
# The chat template. millipede-run takes raw text or ids, so the prompt is rendered here, in the
# ChatML shape the model's template writes (checked against the template's own text).

CHATML_PIECES = ("'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'",
                 "'<|im_start|>assistant\n'")
SYSTEM_RE = re.compile(r"\{\{\s*'(<\|im_start\|>system\n(.*?)<\|im_end\|>\n)'\s*\}\}", re.S)


class ChatML:
    def __init__(self, template):
        if not template:
            fail("the model file has no chat template (tokenizer.chat_template)")
        missing = [p for p in CHATML_PIECES if p not in template]
        if missing:
            fail("the model's chat template is not ChatML-shaped (lacks "
                 f"{missing[0]!r}); this script renders ChatML only")
        # A template that adds a default system message when the conversation has none
        # (SmolLM2's does): the same message here.
        m = SYSTEM_RE.search(template)
        self.default_system = m.group(1) if m else ""

    def render(self, user):
        return (f"{self.default_system}<|im_start|>user\n{user}<|im_end|>\n"
                "<|im_start|>assistant\n")


# --------------------------------------------------------------------------------------------
# The corpus: the repository's documentation as prose sentences

def corpus_files(root):
    files = ["README.md"]
    docs = os.path.join(root, "docs")
    files += sorted("docs/" + n for n in os.listdir(docs) if n.endswith(".md"))
    return files


INLINE_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"`])")


def clean_inline(text):
    text = INLINE_LINK.sub(r"\1", text)
    text = text.replace("**", "").replace("`", "").replace("<br>", " ")
    text = re.sub(r"\s+", " ", text)
    return text.strip()


def is_prose(paragraph):
    words = paragraph.split()
    if len(words) < 8:
        return False
    letters = sum(c.isalpha() for c in paragraph)
    visible = sum(not c.isspace() for c in paragraph)
    return visible > 0 and letters / visible >= 0.7


def markdown_paragraphs(text):
    """Prose paragraphs of a Markdown file: fenced and indented code, tables, headings, images
    and HTML dropped; list items become paragraphs of their own."""
    paragraphs, current = [], []
    in_fence = False
    previous_blank = True

    def flush():
        if current:
            paragraphs.append(" ".join(current))
            current.clear()

    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            in_fence = not in_fence
            previous_blank = False
            continue
        if in_fence:
            continue
        if not stripped:
            flush()
            previous_blank = True
            continue
        indented_code = line.startswith("    ") and (previous_blank and not current)
        if (stripped.startswith(("|", "#", "![", "<", ">")) or indented_code):
            flush()
            previous_blank = False
            continue
        item = re.match(r"^\s*(?:[-*+]|\d+\.)\s+(.*)$", line)
        if item:
            flush()
            current.append(item.group(1))
        else:
            current.append(stripped)
        previous_blank = False
    flush()
    return paragraphs


MAX_UNIT_CHARS = 240


def build_corpus(root):
    """The corpus as units of running text: (separator, text, starts_sentence). The separator
    goes before the text ("\\n\\n" at a paragraph's start, " " inside one). A sentence longer
    than MAX_UNIT_CHARS is cut at spaces into pieces (each later piece starts no sentence), so
    prompts fill their lengths closely while the text stays the same. Sentences that mention
    the needles' "secret code" are left out. Also the files read and the digest of the text."""
    units = []
    files = corpus_files(root)
    digest = hashlib.sha256()
    for name in files:
        with open(os.path.join(root, name), encoding="utf-8") as f:
            text = f.read()
        for paragraph in markdown_paragraphs(text):
            paragraph = clean_inline(paragraph)
            if not is_prose(paragraph):
                continue
            for i, sentence in enumerate(SENTENCE_END.split(paragraph)):
                sentence = sentence.strip()
                # The docs describe this measurement: no sentence about its needles may become
                # part of a haystack.
                if not sentence or "secret code" in sentence.lower():
                    continue
                sep, first = ("\n\n" if i == 0 else " "), True
                while sentence:
                    piece = sentence
                    if len(sentence) > MAX_UNIT_CHARS:
                        cut = sentence.rfind(" ", 0, MAX_UNIT_CHARS)
                        if cut <= 0:
                            cut = sentence.find(" ")
                        piece = sentence if cut <= 0 else sentence[:cut]
                    units.append((sep, piece, first))
                    sentence = sentence[len(piece):].strip()
                    sep, first = " ", False
    for sep, text, _ in units:
        digest.update((sep + text).encode())
    return units, files, digest.hexdigest()


def join_units(units):
    return "".join((u[0] if i > 0 else "") + u[1] for i, u in enumerate(units))


# --------------------------------------------------------------------------------------------
# Tools

class Tools:
    def __init__(self, args, model):
        self.bin = os.path.abspath(args.bin)
        self.model = model
        self.backend = args.backend
        self.engine_flags = shlex.split(args.engine_flags or "")
        for name in ("millipede-run", "millipede-policy", "millipede-tokenize"):
            if not os.access(os.path.join(self.bin, name), os.X_OK):
                fail(f"{self.bin}/{name} is not there (build millipede-run millipede-policy "
                     "millipede-tokenize)")

    def path(self, name):
        return os.path.join(self.bin, name)

    def tokenize(self, texts):
        """Each text's ids, from the service's tokenizer (no BOS added; the chat markers in the
        text become their ids)."""
        if not texts:
            return []
        data = "".join(json.dumps(t) + "\n" for t in texts)
        r = subprocess.run([self.path("millipede-tokenize"), self.model.path, "--jsonl"],
                           input=data.encode(), capture_output=True)
        if r.returncode != 0:
            fail("millipede-tokenize failed: " + r.stderr.decode(errors="replace").strip())
        lines = r.stdout.decode().splitlines()
        if len(lines) != len(texts):
            fail(f"millipede-tokenize gave {len(lines)} lines for {len(texts)} texts")
        return [json.loads(line) for line in lines]

    def decode(self, ids):
        r = subprocess.run([self.path("millipede-tokenize"), self.model.path, "--decode"],
                           input=" ".join(map(str, ids)).encode(), capture_output=True)
        if r.returncode != 0:
            fail("millipede-tokenize --decode failed: " + r.stderr.decode(errors="replace"))
        return r.stdout.decode()

    def policy(self, *args, check=True):
        command = [self.path("millipede-policy")] + [str(a) for a in args]
        r = subprocess.run(command, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({r.returncode}): "
                               f"{r.stderr.strip()}")
        return r


# --------------------------------------------------------------------------------------------
# Prompts

NEEDLE_COLOURS = ["blue", "red", "green", "yellow", "silver", "orange", "purple", "white"]
NEEDLE_OBJECTS = ["door", "box", "gate", "safe", "locker", "drawer", "chest", "vault"]


def needle_for(length, depth):
    rng = random.Random(f"needle/{length}/{depth}")
    colour, obj = rng.choice(NEEDLE_COLOURS), rng.choice(NEEDLE_OBJECTS)
    code = str(rng.randint(10000, 99999))
    return {"code": code,
            "sentence": f"The secret code for the {colour} {obj} is {code}.",
            "question": f"What is the secret code for the {colour} {obj}? "
                        "Answer with the number only."}


class Prompts:
    """Builds every prompt from the corpus's units, tokenized by the service."""

    def __init__(self, tools, chat, units):
        self.tools = tools
        self.chat = chat
        self.units = units
        log(f"tokenizing {len(units)} corpus units")
        counts = tools.tokenize([sep + text for sep, text, _ in units])
        self.counts = [len(ids) for ids in counts]
        self.total_tokens = sum(self.counts)
        self.wrapped = False

    def take(self, start, budget):
        """Units from `start` (wrapping around the corpus) whose estimated tokens fit `budget`:
        (unit indices, next start)."""
        taken, used, i = [], 0, start
        while len(taken) < len(self.units):
            j = i % len(self.units)
            if used + self.counts[j] > budget:
                break
            if i >= len(self.units):
                self.wrapped = True
            taken.append(j)
            used += self.counts[j]
            i += 1
        return taken, i

    def fit(self, build, budget, initial):
        """Tokenizes build(n) for n = initial, initial - 1, ... until its ids fit `budget`
        (the estimate from per-unit counts is close; the text is tokenized whole): (text, ids,
        n)."""
        n = initial
        while n > 0:
            text = build(n)
            ids = self.tools.tokenize([text])[0]
            if len(ids) <= budget:
                return text, ids, n
            n -= max(1, (len(ids) - budget) // 16)
        fail(f"no prompt fits {budget} tokens")

    def plain(self, start, budget):
        # A prompt starts at a sentence's start.
        for _ in range(len(self.units)):
            if self.units[start % len(self.units)][2]:
                break
            start += 1
        taken, end = self.take(start, budget)
        text, ids, n = self.fit(lambda n: join_units([self.units[j] for j in taken[:n]]),
                                budget, len(taken))
        # The units were tokenized one at a time, the prompt as one text: the two counts.
        units_sum = sum(self.counts[j] for j in taken[:n])
        return {"text": text, "ids": ids, "units_tokens": units_sum}, end

    def needle(self, start, length, depth, new_tokens):
        spec = needle_for(length, depth)
        budget = length - new_tokens
        scaffold = self.chat.render(spec["sentence"] + "\n\n" + spec["question"])
        overhead = len(self.tools.tokenize([scaffold])[0]) + 2
        taken, _ = self.take(start, budget - overhead)

        def build(n):
            units = [self.units[j] for j in taken[:n]]
            # The needle goes to the sentence boundary nearest the depth (by tokens): before
            # a unit that starts a sentence, or at the end.
            total = sum(self.counts[j] for j in taken[:n])
            target, acc, at = depth * total, 0, 0
            best = abs(target)
            for k in range(n):
                acc += self.counts[taken[k]]
                boundary = k + 1 == n or units[k + 1][2]
                if boundary and abs(acc - target) < best:
                    best, at = abs(acc - target), k + 1
            haystack = units[:at] + [(" ", spec["sentence"], True)] + units[at:]
            text = join_units(haystack)
            return self.chat.render(text + "\n\n" + spec["question"])

        text, ids, _ = self.fit(build, budget, len(taken))
        # Where the needle landed: the share of the haystack's characters before it.
        begin = text.index("<|im_start|>user\n") + len("<|im_start|>user\n")
        end = text.rindex("\n\n" + spec["question"])
        at = text.index(spec["sentence"], begin)
        placed = (at - begin) / max(1, end - begin - len(spec["sentence"]))
        return dict(spec, text=text, ids=ids, length=length, depth=depth,
                    placed=round(placed, 4))


# --------------------------------------------------------------------------------------------
# Policies

def omnikv_policy(budget, layers):
    """OmniKV's layout of the decode benchmarks (docs/performance.md): layers 0 and 1 full,
    filter layers 2, 8 and 18 (those the model has), every other layer selected."""
    filters = [l for l in (2, 8, 18) if l < layers]
    entries = [{"layer": l, "decode": "full"} for l in (0, 1) if l < layers]
    entries += [{"layer": l, "decode": "filter"} for l in filters]
    return {"version": 1, "filter": {"top_k": budget}, "default": {"decode": "selected"},
            "layers": entries}


def minference_sizes(length):
    """MInference's default vertical-slash sizes (1000 columns, 6096 diagonals, set for its
    128K contexts) scaled by length / 128K, at least its kernel's floors (30 and 50)."""
    scale = length / 131072
    return max(30, round(1000 * scale)), max(50, round(6096 * scale))


def minference_policy(length):
    vertical, slash = minference_sizes(length)
    return {"version": 1, "default": {"prefill": "vertical-slash"},
            "vertical_slash": {"last_queries": 64, "vertical": vertical, "slash": slash}}


# XAttention's adaptive blocks at its usual threshold (90% of each query block's attention mass),
# in 64-token blocks (its 128 would leave a 2K prompt 16 blocks), stride 8.
XATTENTION = {"version": 1, "default": {"prefill": "antidiagonal"},
              "antidiagonal": {"block": 64, "stride": 8, "mass_permille": 900}}

FP8 = {"version": 1, "fp8_attention": True}

STATIC_EVICTION = {"version": 1, "default": {"decode": "static-eviction"},
                   "static_eviction": {"keep_tokens": 256, "recent_tokens": 256,
                                       "observed_queries": 32}}

DESCRIPTIONS = {
    "dense": "every head dense and full (an explicit policy file, run apart from the reference)",
    "searched": "MInference's search: each KV head's best of a-shape / vertical-slash / "
                "block-sparse at the budget",
    "minference": "vertical-slash on every head, MInference's default sizes (1000, 6096) "
                  "scaled by length / 128K (floors 30, 50)",
    "xattention": "XAttention's antidiagonal block selection on every head: 64-token blocks, "
                  "stride 8, the blocks holding 90% of each query block's attention mass",
    "fp8": "every head dense, its prefill attention on E4M3 operands (fp8_attention)",
    "duo": "DuoAttention: half of the KV heads streaming (sinks + recent window), ranked by "
           "the shipped gate proxy",
    "omnikv-256": "OmniKV: filter layers 2, 8, 18; layers 0-1 full; the rest selected; 256 "
                  "tokens per KV head",
    "omnikv-512": "the same at 512 tokens",
    "omnikv-1024": "the same at 1024 tokens",
    "static-eviction": "H2O-style: 256 heavy hitters (chosen by the last 32 prompt queries) + "
                       "256 recent tokens per KV head",
}


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1)
        f.write("\n")


def parse_show(text):
    density = re.search(r"^\s*all\s+([0-9.]+)%", text, re.M)
    summary = re.search(r"^summary: (.*)$", text, re.M)
    return (float(density.group(1)) / 100 if density else None,
            summary.group(1).strip() if summary else None)


def pattern_counts(summary):
    """{"dense": n, "a-shape": n, ...} from a policy summary ("prefill a-shape 56, dense 200;
    decode full 256" or "dense/full")."""
    if summary is None:
        return {}
    prefill = summary.split(";")[0]
    if prefill.strip() == "dense/full":
        return {"dense": None}
    return {name: int(n) for name, n in re.findall(r"([a-z-]+) (\d+)", prefill)}


# --------------------------------------------------------------------------------------------
# Runs

class Runner:
    def __init__(self, tools, work, jobs):
        self.tools = tools
        self.work = work
        self.jobs = jobs
        os.makedirs(os.path.join(work, "runs"), exist_ok=True)
        os.makedirs(os.path.join(work, "prompts"), exist_ok=True)

    def prompt_file(self, ids):
        text = " ".join(map(str, ids)) + "\n"
        key = hashlib.sha256(text.encode()).hexdigest()[:20]
        path = os.path.join(self.work, "prompts", key + ".ids")
        if not os.path.exists(path):
            with open(path + ".part", "w") as f:
                f.write(text)
            os.replace(path + ".part", path)
        return path, key

    def command(self, ids, new_tokens, policy, ignore_eos, logprobs=None):
        path, prompt_key = self.prompt_file(ids)
        command = [self.tools.path("millipede-run"), "--model", self.tools.model.path,
                   "--backend", self.tools.backend, "--prompt-ids", path,
                   "--max-new-tokens", str(new_tokens), "--json"] + self.tools.engine_flags
        policy_text = ""
        if policy is not None:
            command += ["--policy", policy]
            with open(policy, encoding="utf-8") as f:
                policy_text = f.read()
        if ignore_eos:
            command.append("--ignore-eos")
        if logprobs is not None:
            command += ["--logprobs", str(logprobs)]
        key_text = json.dumps([prompt_key, new_tokens, policy_text, ignore_eos, logprobs,
                               self.tools.backend, self.tools.engine_flags,
                               self.tools.model.path, self.tools.model.size])
        return command, hashlib.sha256(key_text.encode()).hexdigest()[:24]

    def run_one(self, job):
        command, key = job
        path = os.path.join(self.work, "runs", key + ".json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        start = time.time()
        r = subprocess.run(command, capture_output=True, text=True)
        result = {"wall_s": round(time.time() - start, 3)}
        if r.returncode != 0:
            result["error"] = (r.stderr.strip() or r.stdout.strip())[-2000:]
            return result  # not kept: a failed run is tried again next time
        try:
            result.update(json.loads(r.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            result["error"] = "no JSON from millipede-run: " + r.stdout[-500:]
            return result
        write_json(path + ".part", result)
        os.replace(path + ".part", path)
        return result

    def run_all(self, jobs, what):
        """Runs (command, key) jobs, --jobs at a time; results in order."""
        results = [None] * len(jobs)
        done = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = {pool.submit(self.run_one, job): i for i, job in enumerate(jobs)}
            for future in concurrent.futures.as_completed(futures):
                results[futures[future]] = future.result()
                done += 1
                if done % max(1, len(jobs) // 10) == 0 or done == len(jobs):
                    log(f"{what}: {done}/{len(jobs)} runs")
        return results


# --------------------------------------------------------------------------------------------
# The PNG heatmap (zlib + struct, no imaging library)

FONT = {  # 3 x 5 glyphs, rows top to bottom, "#" lit
    "0": "###,#.#,#.#,#.#,###", "1": ".#.,##.,.#.,.#.,###", "2": "###,..#,###,#..,###",
    "3": "###,..#,.##,..#,###", "4": "#.#,#.#,###,..#,..#", "5": "###,#..,###,..#,###",
    "6": "###,#..,###,#.#,###", "7": "###,..#,.#.,.#.,.#.", "8": "###,#.#,###,#.#,###",
    "9": "###,#.#,###,..#,###", "A": ".#.,#.#,###,#.#,#.#", "B": "##.,#.#,##.,#.#,##.",
    "C": ".##,#..,#..,#..,.##", "D": "##.,#.#,#.#,#.#,##.", "E": "###,#..,##.,#..,###",
    "F": "###,#..,##.,#..,#..", "G": ".##,#..,#.#,#.#,.##", "H": "#.#,#.#,###,#.#,#.#",
    "I": "###,.#.,.#.,.#.,###", "J": "..#,..#,..#,#.#,.#.", "K": "#.#,#.#,##.,#.#,#.#",
    "L": "#..,#..,#..,#..,###", "M": "#.#,###,###,#.#,#.#", "N": "##.,#.#,#.#,#.#,#.#",
    "O": ".#.,#.#,#.#,#.#,.#.", "P": "##.,#.#,##.,#..,#..", "Q": ".#.,#.#,#.#,##.,.##",
    "R": "##.,#.#,##.,#.#,#.#", "S": ".##,#..,.#.,..#,##.", "T": "###,.#.,.#.,.#.,.#.",
    "U": "#.#,#.#,#.#,#.#,###", "V": "#.#,#.#,#.#,#.#,.#.", "W": "#.#,#.#,###,###,#.#",
    "X": "#.#,#.#,.#.,#.#,#.#", "Y": "#.#,#.#,.#.,.#.,.#.", "Z": "###,..#,.#.,#..,###",
    "-": "...,...,###,...,...", ".": "...,...,...,...,.#.", "%": "#.#,..#,.#.,#..,#.#",
    "/": "..#,..#,.#.,#..,#..", ":": "...,.#.,...,.#.,...", " ": "...,...,...,...,...",
    "=": "...,###,...,###,...", ",": "...,...,...,.#.,#..", "(": ".#.,#..,#..,#..,.#.", ")": ".#.,..#,..#,..#,.#.",
}


class Canvas:
    def __init__(self, width, height, background=(255, 255, 255)):
        self.width, self.height = width, height
        self.pixels = [bytearray(bytes(background) * width) for _ in range(height)]

    def rect(self, x, y, w, h, colour):
        for yy in range(max(0, y), min(self.height, y + h)):
            row = self.pixels[yy]
            for xx in range(max(0, x), min(self.width, x + w)):
                row[3 * xx:3 * xx + 3] = bytes(colour)

    def text(self, x, y, text, scale=2, colour=(0, 0, 0)):
        for ch in text.upper():
            glyph = FONT.get(ch, FONT[" "]).split(",")
            for gy, row in enumerate(glyph):
                for gx, cell in enumerate(row):
                    if cell == "#":
                        self.rect(x + gx * scale, y + gy * scale, scale, scale, colour)
            x += 4 * scale
        return x

    def png(self):
        raw = b"".join(b"\x00" + bytes(row) for row in self.pixels)

        def chunk(kind, data):
            return (struct.pack(">I", len(data)) + kind + data +
                    struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def score_colour(score):
    if score is None:
        return (200, 200, 200)
    # red (wrong) -> amber -> green (right)
    stops = [(0.0, (200, 50, 40)), (0.5, (235, 190, 60)), (1.0, (40, 160, 70))]
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if score <= b:
            t = (score - a) / (b - a)
            return tuple(round(ca[i] + t * (cb[i] - ca[i])) for i in range(3))
    return stops[-1][1]


def length_label(n):
    return f"{n // 1024}K" if n % 1024 == 0 and n >= 1024 else str(n)


def needle_png(path, policies, lengths, depths, cells):
    """cells[policy][(length, depth)] -> score in [0, 1] or None. One panel per policy: length
    across, depth down."""
    cw, ch, s = 34, 20, 2
    label_w = 4 * s * 4 + 6
    panel_w = label_w + cw * len(lengths) + 16
    title_h, foot_h = 14, 16
    panel_h = title_h + ch * len(depths) + foot_h + 10
    columns = min(4, len(policies))
    rows = math.ceil(len(policies) / columns)
    title = "NEEDLE SCORE: LENGTH ACROSS, DEPTH DOWN"
    canvas = Canvas(max(panel_w * columns + 8, 4 * s * len(title) + 16), panel_h * rows + 48)
    canvas.text(8, 6, title, scale=s)
    x = 8
    for label, colour in (("RIGHT", score_colour(1.0)), ("WRONG", score_colour(0.0)),
                          ("NOT RUN", score_colour(None))):
        canvas.rect(x, panel_h * rows + 30, 12, 10, colour)
        x = canvas.text(x + 16, panel_h * rows + 30, label, scale=s) + 16
    for p, name in enumerate(policies):
        x0 = 8 + (p % columns) * panel_w
        y0 = 26 + (p // columns) * panel_h
        canvas.text(x0, y0, name, scale=s)
        gy = y0 + title_h
        for r, depth in enumerate(depths):
            canvas.text(x0, gy + r * ch + 5, f"{round(depth * 100)}%", scale=s)
            for c, length in enumerate(lengths):
                colour = score_colour(cells[name].get((length, depth)))
                canvas.rect(x0 + label_w + c * cw, gy + r * ch, cw - 2, ch - 2, colour)
        for c, length in enumerate(lengths):
            canvas.text(x0 + label_w + c * cw + 2, gy + len(depths) * ch + 3,
                        length_label(length), scale=s)
    with open(path, "wb") as f:
        f.write(canvas.png())


# --------------------------------------------------------------------------------------------
# The measurement

def parse_list(text, kind):
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"bad list {text!r}")


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def pct(x, digits=1):
    return "—" if x is None else f"{100 * x:.{digits}f}%"


def agreement(reference, ids, tokens, logprobs=None):
    """Greedy agreement of `ids` with the reference's ids over `tokens` positions; with the
    reference's logprobs ([id, logprob, [[id, logprob], ...]] per token), also the reference's
    margin at the first divergence: its top token's log-probability minus that of the token the
    policy chose (a lower bound when that token is not among the reference's alternatives)."""
    ref = reference[:tokens]
    got = ids[:tokens]
    prefix = 0
    while prefix < min(len(ref), len(got)) and ref[prefix] == got[prefix]:
        prefix += 1
    equal = sum(1 for a, b in zip(ref, got) if a == b)
    row = {"prefix": prefix, "equal": equal, "tokens": tokens,
           "prefix_share": prefix / tokens, "equal_share": equal / tokens}
    if logprobs and prefix < min(len(ref), len(got), len(logprobs)):
        _, top_logprob, alternatives = logprobs[prefix]
        chosen = [lp for i, lp in alternatives if i == got[prefix]]
        if chosen:
            row["margin"] = top_logprob - chosen[0]
        elif alternatives:
            row["margin"] = top_logprob - min(lp for _, lp in alternatives)
            row["margin_lower_bound"] = True
    return row


def answer_right(code, text):
    return code in re.sub(r"[^0-9]", "", text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="folder of the millipede binaries")
    parser.add_argument("--model", required=True, help="the GGUF model file")
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", required=True, help="folder for results.json, results.md, "
                        "needle.png and searched-policy.json")
    parser.add_argument("--work", help="folder for prompts, policies and cached runs "
                        "(default OUT/work)")
    parser.add_argument("--lengths", default="2048,4096,8192",
                        help="sequence lengths (prompt + answer), comma-separated")
    parser.add_argument("--depths", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--policies", default=",".join(ALL_POLICIES),
                        help="comma-separated subset of " + ",".join(ALL_POLICIES))
    parser.add_argument("--agreement-prompts", type=int, default=3)
    parser.add_argument("--agreement-tokens", type=int, default=128)
    parser.add_argument("--needle-tokens", type=int, default=24,
                        help="tokens generated for a needle answer at most (the model tends "
                        "to restate the question, about 10 tokens, before the code's 5 digits)")
    parser.add_argument("--search-budget", type=float, default=0.1)
    parser.add_argument("--search-length", type=int,
                        help="the reference prompt's tokens (default: the largest length)")
    parser.add_argument("--gates", default=DEFAULT_GATES,
                        help="DuoAttention gate TSV (default: the one beside this script)")
    parser.add_argument("--duo-sparsity", type=float, default=0.5)
    parser.add_argument("--duo-sink", type=int, default=128)
    parser.add_argument("--duo-recent", type=int, default=256)
    parser.add_argument("--engine-flags", default="",
                        help="more millipede-run/search flags, e.g. \"--kv-dtype fp32\"")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument("--corpus-root", default=ROOT,
                        help="the repository whose README.md and docs/*.md are the corpus")
    args = parser.parse_args()

    lengths = sorted(set(parse_list(args.lengths, int)))
    depths = parse_list(args.depths, float)
    policies = parse_list(args.policies, str)
    for p in policies:
        if p not in ALL_POLICIES:
            fail(f"unknown policy {p!r} (known: {', '.join(ALL_POLICIES)})")
    if not lengths or not depths:
        fail("no lengths or depths")
    if any(not 0 <= d <= 1 for d in depths):
        fail("depths lie in [0, 1]")
    model = ModelInfo(args.model)
    largest = lengths[-1]
    if largest > model.context:
        fail(f"length {largest} is beyond the model's context ({model.context})")
    search_length = args.search_length or largest
    if search_length > model.context:
        fail(f"--search-length {search_length} is beyond the model's context")
    if largest <= args.agreement_tokens + 64 or lengths[0] <= args.needle_tokens + 64:
        fail("the lengths must leave room for a prompt beside the generated tokens")
    os.makedirs(args.out, exist_ok=True)
    work = os.path.abspath(args.work or os.path.join(args.out, "work"))
    os.makedirs(os.path.join(work, "policies"), exist_ok=True)
    tools = Tools(args, model)
    chat = ChatML(model.template)
    runner = Runner(tools, work, args.jobs)
    started = time.time()
    errors = []

    # 1. Corpus and prompts. Regions of the corpus, in order: the needle haystack, the search's
    # reference prompt, the agreement prompts.
    units, files, corpus_digest = build_corpus(args.corpus_root)
    prompts = Prompts(tools, chat, units)
    _, cursor = prompts.take(0, largest)  # the haystack's region (the longest haystack)
    needles = []
    for length in lengths:
        for depth in depths:
            needles.append(prompts.needle(0, length, depth, args.needle_tokens))
    search_prompt, cursor = prompts.plain(cursor, search_length)
    agreement_prompts = []
    for _ in range(args.agreement_prompts):
        p, cursor = prompts.plain(cursor, largest - args.agreement_tokens)
        agreement_prompts.append(p)
    # A prompt's ids decode back to its text (the tokenizer loses nothing on this corpus):
    sample = agreement_prompts[0]["ids"] if agreement_prompts else search_prompt["ids"]
    decoded = tools.decode(sample)
    round_trip = decoded == (agreement_prompts[0] if agreement_prompts
                             else search_prompt)["text"]
    log(f"corpus: {sum(u[2] for u in units)} sentences, {prompts.total_tokens} tokens; "
        f"{len(needles)} needle prompts, {len(agreement_prompts)} agreement prompts")

    # 2. Policies.
    pdir = os.path.join(work, "policies")
    policy_files = {}  # name -> {length: path}
    policy_notes = {}
    dense_path = os.path.join(pdir, "dense.json")
    write_json(dense_path, {"version": 1})
    search = {"length": len(search_prompt["ids"]), "budget": args.search_budget}
    for name in policies:
        try:
            if name == "dense":
                policy_files[name] = {n: dense_path for n in lengths}
            elif name == "searched":
                path = os.path.join(pdir, "searched.json")
                ids_path, prompt_key = runner.prompt_file(search_prompt["ids"])
                stamp = json.dumps([prompt_key, args.search_budget, args.backend,
                                    tools.engine_flags, model.path, model.size])
                stamp_path = path + ".key"
                log_path = os.path.join(pdir, "searched.log")
                if not (os.path.exists(path) and os.path.exists(stamp_path) and
                        open(stamp_path).read() == stamp):
                    log(f"searching a policy on a {len(search_prompt['ids'])}-token prompt "
                        f"at budget {args.search_budget}")
                    t0 = time.time()
                    r = tools.policy("search", "--model", model.path, "--prompt-ids", ids_path,
                                     "--budget", args.search_budget, "--out", path,
                                     "--backend", args.backend, *tools.engine_flags)
                    with open(log_path, "w") as f:
                        f.write(r.stdout + r.stderr)
                    with open(log_path, "a") as f:
                        f.write(f"search took {time.time() - t0:.1f} s\n")
                    with open(stamp_path, "w") as f:
                        f.write(stamp)
                with open(log_path) as f:
                    search["log"] = f.read()
                took = re.search(r"^search took ([0-9.]+) s$", search["log"], re.M)
                if took:
                    search["seconds"] = float(took.group(1))
                    log(f"search took {search['seconds']} s")
                policy_files[name] = {n: path for n in lengths}
            elif name == "minference":
                policy_files[name] = {}
                for n in lengths:
                    path = os.path.join(pdir, f"minference-{n}.json")
                    write_json(path, minference_policy(n))
                    policy_files[name][n] = path
                policy_notes[name] = {str(n): dict(zip(("vertical", "slash"),
                                                       minference_sizes(n))) for n in lengths}
            elif name == "duo":
                path = os.path.join(pdir, "duo.json")
                tools.policy("import-duo", args.gates, "--model", model.path, "--sparsity",
                             args.duo_sparsity, "--sink", args.duo_sink, "--recent",
                             args.duo_recent, "--out", path)
                policy_files[name] = {n: path for n in lengths}
                policy_notes[name] = {"gates": os.path.relpath(args.gates, ROOT)
                                      if args.gates.startswith(ROOT) else args.gates,
                                      "sparsity": args.duo_sparsity, "sink": args.duo_sink,
                                      "recent": args.duo_recent}
            elif name.startswith("omnikv-"):
                path = os.path.join(pdir, f"{name}.json")
                write_json(path, omnikv_policy(int(name.split("-")[1]), model.layers))
                policy_files[name] = {n: path for n in lengths}
            elif name == "xattention":
                path = os.path.join(pdir, "xattention.json")
                write_json(path, XATTENTION)
                policy_files[name] = {n: path for n in lengths}
            elif name == "fp8":
                path = os.path.join(pdir, "fp8.json")
                write_json(path, FP8)
                policy_files[name] = {n: path for n in lengths}
            elif name == "static-eviction":
                path = os.path.join(pdir, "static-eviction.json")
                write_json(path, STATIC_EVICTION)
                policy_files[name] = {n: path for n in lengths}
        except RuntimeError as e:
            errors.append(f"{name}: {e}")
            log(f"policy {name} not written: {e}")
    policies = [p for p in policies if p in policy_files]

    # Expected density and summary of each policy at each length (millipede-policy show).
    shown = {}
    for name in policies:
        shown[name] = {}
        for n in lengths:
            r = tools.policy("show", policy_files[name][n], "--model", model.path,
                             "--length", n, check=False)
            density, summary = parse_show(r.stdout)
            if r.returncode != 0:
                errors.append(f"show {name} at {n}: {r.stderr.strip()}")
            shown[name][n] = {"density": density, "summary": summary}
    if "searched" in policies:
        counts = pattern_counts(shown["searched"][largest]["summary"])
        total = model.layers * model.kv_heads
        search["pattern_counts"] = counts
        search["pattern_shares"] = {k: (v / total if v is not None else 1.0)
                                    for k, v in counts.items()}
        search["density_by_length"] = {str(n): shown["searched"][n]["density"] for n in lengths}
        search["summary"] = shown["searched"][largest]["summary"]
        candidates = re.findall(r"^.*candidate.*$", search.get("log", ""), re.M)
        search["candidate_lines"] = candidates[:20]

    # 3. Runs: the reference (no --policy) and every policy, on the agreement prompts
    # (--ignore-eos, a fixed number of tokens) and on the needles (up to --needle-tokens, EOS
    # stops).
    jobs, slots = [], []
    for i, p in enumerate(agreement_prompts):
        for name in [None] + policies:
            policy = policy_files[name][largest] if name else None
            jobs.append(runner.command(p["ids"], args.agreement_tokens, policy, True,
                                       logprobs=AGREEMENT_LOGPROBS))
            slots.append(("agreement", i, name))
    for i, p in enumerate(needles):
        for name in [None] + policies:
            policy = policy_files[name][p["length"]] if name else None
            jobs.append(runner.command(p["ids"], args.needle_tokens, policy, False))
            slots.append(("needle", i, name))
    log(f"{len(jobs)} runs ({len(policies) + 1} configurations, backend {args.backend}, "
        f"{args.jobs} at a time)")
    results = runner.run_all(jobs, "runs")
    by_slot = dict(zip(slots, results))
    for slot, r in by_slot.items():
        if "error" in r:
            errors.append(f"{slot[0]} prompt {slot[1]}, {slot[2] or 'reference'}: {r['error']}")

    # 4. Scores.
    configs = ["reference"] + policies

    def get(kind, i, name):
        return by_slot[(kind, i, None if name == "reference" else name)]

    agreement_out = {"tokens": args.agreement_tokens, "length": largest,
                     "prompts": [{"prompt_tokens": len(p["ids"]),
                                  "tokens_of_its_units": p["units_tokens"],
                                  "starts_with": p["text"][:80]} for p in agreement_prompts],
                     "by_policy": {}}
    for name in configs:
        rows = []
        for i in range(len(agreement_prompts)):
            ref, got = get("agreement", i, "reference"), get("agreement", i, name)
            if "error" in ref or "error" in got:
                rows.append(None)
                continue
            row = agreement(ref["ids"], got["ids"], args.agreement_tokens, ref.get("logprobs"))
            row["prefill_density"] = got.get("prefill_density")
            row["ttft_s"] = got.get("ttft_s")
            row["decode_tokens_per_s"] = got.get("decode_tokens_per_s")
            row["text"] = got.get("text", "")[:300]
            rows.append(row)
        agreement_out["by_policy"][name] = {
            "prefix_share": mean([r["prefix_share"] for r in rows if r]),
            "equal_share": mean([r["equal_share"] for r in rows if r]),
            "prefill_density": mean([r["prefill_density"] for r in rows if r]),
            "per_prompt": rows}

    needle_out = {"depths": depths, "lengths": lengths, "tokens": args.needle_tokens,
                  "by_policy": {}}
    cells = {}
    for name in configs:
        rows, cells[name] = [], {}
        for i, p in enumerate(needles):
            got = get("needle", i, name)
            row = {"length": p["length"], "depth": p["depth"], "placed": p["placed"],
                   "prompt_tokens": len(p["ids"]), "code": p["code"],
                   "question": p["question"]}
            if "error" in got:
                row["error"] = got["error"]
                cells[name][(p["length"], p["depth"])] = None
            else:
                row.update(answer=got.get("text", ""), correct=answer_right(p["code"],
                                                                            got.get("text", "")),
                           ids=got.get("ids"), prefill_density=got.get("prefill_density"),
                           ttft_s=got.get("ttft_s"))
                cells[name][(p["length"], p["depth"])] = 1.0 if row["correct"] else 0.0
            rows.append(row)
        by_length = {}
        for n in lengths:
            ok = [r["correct"] for r in rows if r["length"] == n and "correct" in r]
            by_length[str(n)] = {"right": sum(ok), "of": len(ok),
                                 "score": sum(ok) / len(ok) if ok else None,
                                 "prefill_density": mean([r.get("prefill_density") for r in rows
                                                          if r["length"] == n]),
                                 "ttft_s": mean([r.get("ttft_s") for r in rows
                                                 if r["length"] == n])}
        ok = [r["correct"] for r in rows if "correct" in r]
        same = [r["ids"] == get("needle", i, "reference").get("ids")
                for i, r in enumerate(rows) if "correct" in r]
        needle_out["by_policy"][name] = {
            "score": sum(ok) / len(ok) if ok else None, "right": sum(ok), "of": len(ok),
            "same_answer_as_reference": sum(same), "by_length": by_length, "cells": rows}

    out = {
        "model": {"file": os.path.basename(model.path), "name": model.name, "bytes": model.size,
                  "architecture": model.arch, "layers": model.layers, "heads": model.heads,
                  "kv_heads": model.kv_heads, "context": model.context},
        "backend": args.backend, "engine_flags": tools.engine_flags,
        "lengths": lengths, "depths": depths,
        "length_means": "the whole sequence: prompt plus the generated tokens",
        "chat": {"rendering": "ChatML, rendered by this script in the template's shape",
                 "default_system": chat.default_system},
        "corpus": {"files": files, "sentences": sum(u[2] for u in units), "units": len(units),
                   "tokens": prompts.total_tokens,
                   "sha256": corpus_digest, "wrapped": prompts.wrapped,
                   "decode_round_trip": round_trip},
        "search": search,
        "policies": {name: {"description": DESCRIPTIONS[name],
                            "expected_density": {str(n): shown[name][n]["density"]
                                                 for n in lengths},
                            "summary": shown[name][largest]["summary"],
                            "notes": policy_notes.get(name)} for name in policies},
        "agreement": agreement_out,
        "needle": needle_out,
        "errors": errors,
        "seconds": round(time.time() - started, 1),
    }
    write_json(os.path.join(args.out, "results.json"), out)
    if "searched" in policy_files:
        with open(policy_files["searched"][largest]) as src, \
                open(os.path.join(args.out, "searched-policy.json"), "w") as dst:
            dst.write(src.read())
    needle_png(os.path.join(args.out, "needle.png"), configs, lengths, depths, cells)
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(markdown(out, configs, lengths))
    log(f"wrote {args.out}/results.json, results.md, needle.png in {out['seconds']} s")
    if errors:
        for e in errors:
            log("error: " + e[:500])
        sys.exit(1)


def markdown(out, configs, lengths):
    m = out["model"]
    lines = [f"# Real attention, measured: {m['name']} ({m['file']})", "",
             f"Backend {out['backend']}; {m['layers']} layers x {m['kv_heads']} KV heads "
             f"({m['heads']} query heads); lengths {', '.join(map(str, lengths))} (prompt plus "
             f"answer); corpus: {out['corpus']['sentences']} sentences, "
             f"{out['corpus']['tokens']} tokens of the repository's documentation "
             f"(sha256 {out['corpus']['sha256'][:12]}).", ""]
    s = out["search"]
    if "pattern_counts" in s:
        lines += ["## Patterns found by search", "",
                  f"`millipede-policy search` on a {s['length']}-token reference prompt at "
                  f"budget {s['budget']}" +
                  (f" ({s['seconds']} s)" if "seconds" in s else "") + ".", "",
                  "| pattern | KV heads | share |", "| --- | --- | --- |"]
        total = m["layers"] * m["kv_heads"]
        for name, count in sorted(s["pattern_counts"].items()):
            lines.append(f"| {name} | {count if count is not None else total} | "
                         f"{pct(s['pattern_shares'][name])} |")
        lines += ["", "| length | " + " | ".join(map(str, lengths)) + " |",
                  "| --- |" + " --- |" * len(lengths),
                  "| expected density (show) | " +
                  " | ".join(pct(s["density_by_length"][str(n)]) for n in lengths) + " |", ""]
    lines += ["## Policies", "", "| policy | what | expected prefill density by length | "
              "summary |", "| --- | --- | --- | --- |"]
    for name, p in out["policies"].items():
        dens = ", ".join(pct(p["expected_density"][str(n)]) for n in lengths)
        lines.append(f"| {name} | {p['description']} | {dens} | {p['summary']} |")
    a = out["agreement"]
    lines += ["", f"## Greedy agreement with dense attention ({a['tokens']} tokens, "
              f"{len(a['prompts'])} real-text prompts of "
              f"{', '.join(str(p['prompt_tokens']) for p in a['prompts'])} tokens)", "",
              "Prefix: the share of positions before the first token that differs from the "
              "reference (no --policy); equal: the share of positions with the same token. Per "
              "prompt: prefix / equal tokens and, in brackets, the reference's margin at the "
              "first divergence (its top token's log-probability minus that of the policy's "
              "token, in nats; > when that token is not among its top "
              f"{AGREEMENT_LOGPROBS}): a small margin is a near-tie that flipped.", "",
              "| policy | prefix | equal | per prompt (prefix / equal [margin]) | measured "
              "prefill density |", "| --- | --- | --- | --- | --- |"]

    def one(x):
        if x is None:
            return "—"
        text = f"{x['prefix']} / {x['equal']}"
        if "margin" in x:
            bound = ">" if x.get("margin_lower_bound") else ""
            text += f" [{bound}{x['margin']:.2f}]"
        return text

    for name in configs:
        r = a["by_policy"][name]
        per = "; ".join(one(x) for x in r["per_prompt"])
        lines.append(f"| {name} | {pct(r['prefix_share'])} | {pct(r['equal_share'])} | {per} | "
                     f"{pct(r['prefill_density'], 2)} |")
    n = out["needle"]
    lines += ["", f"## Needle in a haystack ({len(n['depths'])} depths per length: "
              f"{', '.join(f'{round(100 * d)}%' for d in n['depths'])}; right when the code's "
              "digits are in the answer)", "",
              "| policy | " + " | ".join(map(str, lengths)) + " | all | same answer as the "
              "reference |", "| --- |" + " --- |" * (len(lengths) + 2)]
    for name in configs:
        r = n["by_policy"][name]
        cells = " | ".join(f"{r['by_length'][str(x)]['right']}/{r['by_length'][str(x)]['of']}"
                           for x in lengths)
        lines.append(f"| {name} | {cells} | {r['right']}/{r['of']} | "
                     f"{r['same_answer_as_reference']}/{r['of']} |")
    ref = n["by_policy"]["reference"]["cells"]
    lines += ["", "Dense answers (the reference):", "", "| length | depth | code | answer |",
              "| --- | --- | --- | --- |"]
    for r in ref:
        answer = r.get("answer", r.get("error", "")).replace("\n", " ").replace("|", "/")
        lines.append(f"| {r['length']} | {round(100 * r['depth'])}% | {r['code']} | "
                     f"{answer[:80]} |")
    if out["errors"]:
        lines += ["", "## Errors", ""] + [f"- {e[:300]}" for e in out["errors"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
