#include "http/chat_template.h"

#include <ctime>

#include "jinja/py_text.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

using jinja::CallArgs;
using jinja::Value;

bool HasTokens(const Tokenizer& tokenizer, std::initializer_list<const char*> tokens) {
  for (const char* token : tokens) {
    if (!tokenizer.TokenToId(token)) return false;
  }
  return true;
}

// transformers' raise_exception: the template refuses the conversation with its own message.
StatusOr<Value> RaiseException(CallArgs& args) {
  if (args.positional.size() != 1 || !args.keyword.empty() || !args.positional[0].is_string()) {
    return InvalidArgumentError("raise_exception() takes one string");
  }
  return InvalidArgumentError("the template raised an exception: " +
                              args.positional[0].as_string());
}

// transformers' strftime_now: datetime.now().strftime(format), which hands the format to C's
// strftime on the local time.
StatusOr<Value> StrftimeNow(CallArgs& args) {
  if (args.positional.size() != 1 || !args.keyword.empty() || !args.positional[0].is_string()) {
    return InvalidArgumentError("strftime_now() takes one format string");
  }
  const std::string& format = args.positional[0].as_string();
  if (format.empty()) return Value::String("");
  MP_REQUIRE(format.size() <= 256, "strftime_now(): the format is longer than 256 bytes");
  const std::time_t now = std::time(nullptr);
  std::tm local = {};
  localtime_r(&now, &local);
  char buf[1024];
  const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
  MP_REQUIRE(n > 0, "strftime_now(): the format gives no text or too much");
  return Value::String(std::string(buf, n));
}

}  // namespace

StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::Create(ChatTemplateSource source) {
  jinja::TemplateOptions options;
  options.trim_blocks = true;
  options.lstrip_blocks = true;
  StatusOr<jinja::Template> compiled = jinja::Template::Parse(source.text, options);
  if (!compiled.ok()) {
    return InvalidArgumentError("chat template (" + source.origin +
                                "): " + compiled.status().message());
  }
  return std::shared_ptr<const ChatTemplate>(
      new ChatTemplate(std::move(source), std::move(compiled).value()));
}

StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt) const {
  jinja::Variables variables;
  std::vector<Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    jinja::DictData dict;
    dict.Set("role", Value::String(m.role));
    dict.Set("content", Value::String(m.content));
    list.push_back(Value::Dict(std::move(dict)));
  }
  variables["messages"] = Value::List(std::move(list));
  variables["add_generation_prompt"] = Value::Bool(add_generation_prompt);
  variables["tools"] = Value::None();
  variables["documents"] = Value::None();
  for (const auto& [key, text] : source_.special_tokens) variables[key] = Value::String(text);
  if (!source_.additional_special_tokens.empty()) {
    std::vector<Value> tokens;
    for (const std::string& t : source_.additional_special_tokens)
      tokens.push_back(Value::String(t));
    variables["additional_special_tokens"] = Value::List(std::move(tokens));
  }
  variables["raise_exception"] = Value::Function("raise_exception", RaiseException);
  variables["strftime_now"] = Value::Function("strftime_now", StrftimeNow);
  StatusOr<std::string> text = compiled_.Render(variables);
  if (!text.ok()) {
    return Status(text.status().code(),
                  "chat template (" + source_.origin + "): " + text.status().message());
  }
  return text;
}

std::string ChatTemplate::eos_token() const {
  auto it = source_.special_tokens.find("eos_token");
  return it == source_.special_tokens.end() ? std::string() : it->second;
}

const char* ChatFormatName(ChatFormat format) {
  return format == ChatFormat::kLlama3 ? "llama3" : "chatml";
}

StatusOr<ChatFormat> ResolveChatFormat(std::string_view configured, const Tokenizer& tokenizer) {
  if (configured == "llama3") return ChatFormat::kLlama3;
  if (configured == "chatml") return ChatFormat::kChatMl;
  if (!configured.empty()) {
    return InvalidArgumentError("unknown chat format \"" + std::string(configured) +
                                "\" (supported: llama3, chatml)");
  }
  if (HasTokens(tokenizer,
                {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"})) {
    return ChatFormat::kLlama3;
  }
  if (HasTokens(tokenizer, {"<|im_start|>", "<|im_end|>"})) return ChatFormat::kChatMl;
  return InvalidArgumentError(
      "this model has no chat template (no chat_template.jinja, and no chat_template in its "
      "tokenizer_config.json or GGUF file) and its tokenizer is not a Llama-3 or ChatML one, so "
      "chats cannot be formatted: restart the server with --chat-template FILE (a Jinja chat "
      "template) or --chat-format llama3|chatml, or send a formatted prompt to /v1/completions");
}

StatusOr<std::string> FormatChat(ChatFormat format, const std::vector<ChatMessage>& messages) {
  MP_REQUIRE(!messages.empty(), "messages must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    MP_REQUIRE(role == "system" || role == "user" || role == "assistant", "messages[", i,
               "].role must be system, user or assistant, got \"", role, "\"");
  }
  std::string out;
  if (format == ChatFormat::kLlama3) {
    out = "<|begin_of_text|>";
    for (const ChatMessage& m : messages) {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
      out += jinja::PyStrip(m.content, std::nullopt, jinja::StripSide::kBoth);
      out += "<|eot_id|>";
    }
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  if (messages.front().role != "system") {
    out = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  out += "<|im_start|>assistant\n";
  return out;
}

const char* ChatEndOfTurn(ChatFormat format) {
  return format == ChatFormat::kLlama3 ? "<|eot_id|>" : "<|im_end|>";
}

}  // namespace millipede
