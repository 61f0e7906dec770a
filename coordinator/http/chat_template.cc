#include "coordinator/http/chat_template.h"

#include "common/tokenizer/tokenizer.h"

namespace millipede {
namespace {

// Jinja's `trim`: strips leading and trailing whitespace.
std::string_view Trim(std::string_view s) {
  const char* kSpace = " \t\n\r\f\v";
  size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  size_t end = s.find_last_not_of(kSpace);
  return s.substr(begin, end - begin + 1);
}

bool HasTokens(const Tokenizer& tokenizer, std::initializer_list<const char*> tokens) {
  for (const char* token : tokens) {
    if (!tokenizer.TokenToId(token)) return false;
  }
  return true;
}

}  // namespace

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
      "this model has no known chat template (supported: Llama-3 and ChatML/Qwen2 families); "
      "use /v1/completions with a formatted prompt");
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
      out += Trim(m.content);
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
