// Chat formatting: turns OpenAI-style messages into the prompt text a chat model was trained on.
// Two families are known: Llama-3 (header tokens, <|eot_id|>) and ChatML as Qwen2 uses it
// (<|im_start|>/<|im_end|>, with Qwen2's default system message). Special tokens are written
// as text; the tokenizer recognises them as added tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace millipede {

class Tokenizer;

enum class ChatFormat { kLlama3, kChatMl };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// "llama3" or "chatml".
const char* ChatFormatName(ChatFormat format);

// The format named by ModelInfo::chat_format ("llama3", "chatml") or, when that is empty, the
// one whose special tokens the tokenizer has. InvalidArgument when neither names a known family
// (the message lists the supported ones).
StatusOr<ChatFormat> ResolveChatFormat(std::string_view configured, const Tokenizer& tokenizer);

// The prompt text for `messages` followed by the opening of the assistant's turn, exactly as the
// family's Hugging Face chat template renders it with add_generation_prompt=True:
//   Llama-3: "<|begin_of_text|>" then per message
//            "<|start_header_id|>ROLE<|end_header_id|>\n\n" + trimmed content + "<|eot_id|>",
//            then "<|start_header_id|>assistant<|end_header_id|>\n\n".
//   ChatML:  per message "<|im_start|>ROLE\n" + content + "<|im_end|>\n" (a default system
//            message "You are a helpful assistant." first when the first message is not one),
//            then "<|im_start|>assistant\n".
// InvalidArgument naming the message index for an empty list or an unknown role.
StatusOr<std::string> FormatChat(ChatFormat format, const std::vector<ChatMessage>& messages);

// The text of the token that ends an assistant turn ("<|eot_id|>" or "<|im_end|>").
const char* ChatEndOfTurn(ChatFormat format);

}  // namespace millipede
