#!/usr/bin/env python3
"""Chat templates of real models: the engine against transformers' apply_chat_template.

For each model of chat_template_fixtures.py a model directory is written (tokenizer_config.json
with the model's template and special tokens, and a small tokenizer.json so that transformers can
load it). Every conversation below is rendered with add_generation_prompt true and false by
transformers (AutoTokenizer.from_pretrained(dir).apply_chat_template(messages, tokenize=False,
...)) and by chat_template_render (the coordinator's loader and renderer). The texts must be
equal; where the template refuses a conversation (Mistral's alternation rule) both must refuse,
and the engine's error must carry the template's message.
  chat_template_oracle_test.py CHAT_TEMPLATE_RENDER_BINARY
Exit status: 0 all agree, 1 a difference, 77 (skipped) when transformers, tokenizers or jinja2
cannot be imported.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_template_fixtures import MODELS  # noqa: E402

try:
    import jinja2  # noqa: F401  (transformers renders with it)
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIP: needs transformers, tokenizers and jinja2 ({e})")
    sys.exit(77)

SYSTEM = {"role": "system", "content": "You are a terse assistant.\n"}
USER = {"role": "user", "content": "What is 2+2?"}
ASSISTANT = {"role": "assistant", "content": " 4. \n"}
USER2 = {"role": "user", "content": "  And 3+3?\u00a0\u3000\n"}
ODD = {"role": "user",
       "content": "Caf\u00e9 \u4e2d\u6587 \U0001F600 {{ not jinja }} {% if %} 'single' \"double\" "
                  "\\ backslash\ttab\r\nend"}
EMPTY = {"role": "user", "content": ""}

CONVERSATIONS = [
    [USER],
    [SYSTEM, USER],
    [SYSTEM, USER, ASSISTANT, USER2],
    [USER, ASSISTANT, USER2, ASSISTANT, USER],
    [USER, ASSISTANT],  # the assistant last
    [SYSTEM, USER, ASSISTANT],
    [ODD],
    [SYSTEM, ODD, ASSISTANT, USER2],
    [EMPTY],
    [SYSTEM, EMPTY, ASSISTANT, EMPTY],
    # Roles that do not alternate: Mistral's templates refuse them.
    [USER, USER],
    [ASSISTANT, USER],
    [SYSTEM, ASSISTANT],
    [SYSTEM, USER, SYSTEM, USER],
    [USER, ASSISTANT, ASSISTANT],
]


def write_model(directory, config):
    """A model directory transformers can load: tokenizer_config.json and a word-level
    tokenizer.json (the templates do not tokenize; the tokenizer only has to load)."""
    tokenizer = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    full = dict(config, tokenizer_class="PreTrainedTokenizerFast", model_max_length=4096)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(full, f, ensure_ascii=False, indent=2)


def reference(tokenizer, messages, add_generation_prompt):
    try:
        return True, tokenizer.apply_chat_template(messages, tokenize=False,
                                                   add_generation_prompt=add_generation_prompt)
    except jinja2.exceptions.TemplateError as e:
        return False, str(e)


def check_model(name, config, binary, workdir):
    directory = os.path.join(workdir, name)
    os.makedirs(directory)
    write_model(directory, config)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    cases = [(c, agp) for c in CONVERSATIONS for agp in (True, False)]
    requests = "".join(json.dumps({"messages": c, "add_generation_prompt": agp}) + "\n"
                       for c, agp in cases)
    run = subprocess.run([binary, directory], input=requests, capture_output=True, text=True,
                         timeout=120)
    if run.returncode != 0:
        print(f"FAIL {name}: chat_template_render exited {run.returncode}: {run.stderr}")
        return len(cases), 0
    replies = [json.loads(line) for line in run.stdout.splitlines()]
    failures = refusals = 0
    for (messages, agp), reply in zip(cases, replies):
        ok, expected = reference(tokenizer, messages, agp)
        if ok:
            good = reply.get("text") == expected
        else:
            refusals += 1
            good = expected in reply.get("error", "")
        if not good:
            failures += 1
            roles = [m["role"] for m in messages]
            print(f"MISMATCH {name} {roles} add_generation_prompt={agp}\n"
                  f"  transformers: {expected!r}\n  engine:       {reply!r}")
    if len(replies) != len(cases):
        print(f"FAIL {name}: {len(replies)} replies for {len(cases)} requests")
        failures += 1
    print(f"{name}: {len(cases) - failures} of {len(cases)} agree "
          f"({refusals} refused by the template)")
    return failures, refusals


def main():
    binary = sys.argv[1]
    transformers.logging.set_verbosity_error()
    print(f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}")
    failures = 0
    mistral_refusals = 0
    with tempfile.TemporaryDirectory() as workdir:
        for name, config in MODELS.items():
            f, refused = check_model(name, config, binary, workdir)
            failures += f
            if name.startswith("mistral"):
                mistral_refusals += refused
    # The alternation rule must have been exercised, not skipped.
    if mistral_refusals == 0:
        print("FAIL: no conversation was refused by a Mistral template")
        failures += 1
    total = len(MODELS) * len(CONVERSATIONS) * 2
    print(f"{total - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
