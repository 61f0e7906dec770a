"""Chats on the CPU service rendered with the model's own chat template (used by the openai
scenario of service_test.py): the coordinator reads tokenizer_config.json at start, /tokenize and
/v1/chat/completions render with it, and a conversation the template refuses is a 400 carrying
the template's message while the service goes on."""

import json
import os

from service_harness import check

TEMPLATE = ("{{ bos_token }}{% for m in messages %}"
            "{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}"
            "[{{ m.role|upper }}] {{ m.content|trim }}{{ eos_token }}\n{% endfor %}"
            "{%- if add_generation_prompt %}[ASSISTANT] {% endif %}")


def write_chat_template(model):
    """Gives the model directory a tokenizer_config.json with a chat template."""
    config = {"chat_template": TEMPLATE, "bos_token": "<|begin_of_text|>",
              "eos_token": {"content": "<|end_of_text|>", "__type": "AddedToken"}}
    with open(os.path.join(model, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)


def check_chat_template(svc, post):
    check("chat template: the model's tokenizer_config.json" in svc.log(),
          "the coordinator did not log its chat template:\n" + svc.log())
    messages = [{"role": "system", "content": " Be brief. "},
                {"role": "user", "content": "The quick brown fox"}]
    expected = ("<|begin_of_text|>[SYSTEM] Be brief.<|end_of_text|>\n"
                "[USER] The quick brown fox<|end_of_text|>\n[ASSISTANT] ")
    status, chat_tokens = post(svc, "/tokenize", {"messages": messages})
    check(status == 200, f"/tokenize with messages: {status} {chat_tokens}")
    status, text_tokens = post(svc, "/tokenize", {"prompt": expected, "add_special_tokens": False})
    check(status == 200 and chat_tokens["tokens"] == text_tokens["tokens"],
          f"the chat was not rendered with the template: {chat_tokens} vs {text_tokens}")
    status, answer = post(svc, "/v1/chat/completions",
                          {"messages": messages, "max_tokens": 3, "ignore_eos": True})
    check(status == 200 and answer["usage"]["prompt_tokens"] == text_tokens["count"],
          f"chat completion: {status} {answer}")
    status, error = post(svc, "/v1/chat/completions",
                         {"messages": [{"role": "tool", "content": "x"}], "max_tokens": 3})
    check(status == 400 and error["error"]["code"] == "chat_template_error" and
          "no tools here" in error["error"]["message"], f"a refused chat: {status} {error}")
