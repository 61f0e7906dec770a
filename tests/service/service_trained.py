"""The service on a trained model (the trained scenario of service_test.py): SmolLM2-135M-Instruct
as one GGUF file, served on the CPU by 1 coordinator + 2 workers. The coordinator reads the
tokenizer and the chat template from the file; a chat asking a plain question gets the right
answer; the chat's prompt is the template's text; a completion equals millipede-run's."""

import json
import urllib.error
import urllib.request

from service_harness import Service, check, offline

QUESTION = "What is the capital of France?"
# SmolLM2's template (tokenizer.chat_template in the file) for one user message, as transformers'
# apply_chat_template renders it.
RENDERED = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
            "<|im_start|>assistant\n")
NAME = "SmolLM2-135M-Instruct.Q4_1"


def post(svc, path, body):
    req = urllib.request.Request(f"http://{svc.http}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def scenario_trained(bin_dir, gguf):
    svc = Service(bin_dir, gguf, http=True)
    try:
        check("chat template: the model's GGUF tokenizer.chat_template" in svc.log(),
              "the coordinator did not take the file's chat template:\n" + svc.log())
        status, models = post(svc, "/tokenize", {"prompt": "x"})
        check(status == 200, f"/tokenize: {status} {models}")
        messages = [{"role": "user", "content": QUESTION}]
        status, chat_tokens = post(svc, "/tokenize", {"messages": messages})
        status2, text_tokens = post(svc, "/tokenize",
                                    {"prompt": RENDERED, "add_special_tokens": False})
        check(status == 200 and status2 == 200 and chat_tokens["tokens"] == text_tokens["tokens"],
              f"the chat is not the template's text: {chat_tokens} vs {text_tokens}")
        # <|im_start|> is id 1 and <|im_end|> id 2 in SmolLM2's vocabulary.
        check(text_tokens["tokens"][0] == 1 and 2 in text_tokens["tokens"],
              f"special tokens not recognised: {text_tokens}")

        status, answer = post(svc, "/v1/chat/completions",
                              {"model": NAME, "messages": messages, "max_tokens": 32,
                               "temperature": 0})
        check(status == 200, f"chat: {status} {answer}")
        text = answer["choices"][0]["message"]["content"]
        check("Paris" in text, f"the trained model did not answer the question: {text!r}")
        check(answer["choices"][0]["finish_reason"] == "stop",
              f"the answer did not end at <|im_end|>: {answer}")

        # The same prompt offline (millipede-run on as many ranks) gives the same greedy tokens.
        want = offline(bin_dir, gguf, ["--prompt", "The three primary colours are",
                                       "--max-new-tokens", "12", "--ignore-eos"], ranks=2)
        r = svc.submit("--prompt", "The three primary colours are", "--max-tokens", "12",
                       "--ignore-eos", "--json")
        check(r.rc == 0 and r.json()["ids"] == want["ids"],
              f"service {r} differs from millipede-run {want}")
    finally:
        svc.stop()
