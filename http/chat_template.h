// Chat formatting: turns OpenAI-style messages into the prompt text a chat model was trained on.
//
// A model's own chat template (Jinja, from its tokenizer_config.json or chat_template.jinja, or a
// file given with --chat-template) is rendered as transformers' apply_chat_template renders it
// (ChatTemplate). Models without one fall back to two built-in families: Llama-3 (header tokens,
// <|eot_id|>) and ChatML as Qwen2 uses it (<|im_start|>/<|im_end|>, with Qwen2's default system
// message). Special tokens are written as text; the tokenizer recognises them as added tokens.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jinja/template.h"

namespace millipede {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (templates may accept others)
  std::string content;
};

// A chat template's text, where it came from, and the special tokens transformers passes to it.
struct ChatTemplateSource {
  std::string text;    // the Jinja source
  std::string origin;  // for logs and errors: "tokenizer_config.json", a --chat-template path, ...
  // bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token: those set.
  std::map<std::string, std::string> special_tokens;
  std::vector<std::string> additional_special_tokens;
};

// The chat template of a model directory, found as transformers finds it: chat_template.jinja if
// present, else tokenizer_config.json's "chat_template" (a string, or a list of {"name",
// "template"} of which "default" is used). Special tokens come from tokenizer_config.json (strings
// or {"content": ...} objects), overridden by special_tokens_map.json. nullopt when the model has
// no template. InvalidArgument for malformed files; IoError for unreadable ones.
StatusOr<std::optional<ChatTemplateSource>> LoadModelChatTemplate(const std::string& model_dir);

// The template text of `path` (raw Jinja, as --chat-template takes it) with the special tokens of
// `model_dir` (empty: none).
StatusOr<ChatTemplateSource> LoadChatTemplateFile(const std::string& path,
                                                  const std::string& model_dir);

class ChatTemplate {
 public:
  // Parses the template as transformers compiles it (trim_blocks, lstrip_blocks). InvalidArgument
  // naming the origin, line and column for a syntax error or a construct outside the engine's
  // subset (jinja/template.h).
  static StatusOr<std::shared_ptr<const ChatTemplate>> Create(ChatTemplateSource source);

  // The text of transformers' apply_chat_template(messages, tokenize=False,
  // add_generation_prompt=...): the template sees `messages` ([{"role", "content"}]),
  // `add_generation_prompt`, `tools` and `documents` (None), the special tokens,
  // `raise_exception(message)` and `strftime_now(format)` (local time). InvalidArgument with the
  // position and the template's own message when it raises or fails; ResourceExhausted past the
  // engine's work limits.
  StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt) const;

  const std::string& origin() const { return source_.origin; }
  // The template's eos_token ("" when the model sets none): the end of an assistant turn.
  std::string eos_token() const;

 private:
  ChatTemplate(ChatTemplateSource source, jinja::Template compiled)
      : source_(std::move(source)), compiled_(std::move(compiled)) {}
  ChatTemplateSource source_;
  jinja::Template compiled_;
};

// The chat template for the HTTP server, chosen at start: the file `override_path`
// (--chat-template) when given, else the model's own from `model_dir` (when not empty). An
// unreadable or invalid override is an error; the model's own template failing to load or parse is
// not (completions still work): it becomes `chat_template_error`. `note` says which was chosen, for
// the log.
struct ServerChatTemplate {
  std::shared_ptr<const ChatTemplate> chat_template;
  std::string chat_template_error;
  std::string note;
};
StatusOr<ServerChatTemplate> SetUpChatTemplate(const std::string& model_dir,
                                               const std::string& override_path);
// For a server left without a template (and without a reason the model's own failed): the
// built-in format chats will use, named in `setup->note` (the format `configured` by
// --chat-format, else the one the tokenizer's special tokens show); when there is none, chats
// cannot be formatted: `setup->chat_template_error` says so and names the flags that fix it, and
// the note is a warning that chat requests will be refused.
void ChooseBuiltInChatFormat(std::string_view configured, const Tokenizer& tokenizer,
                             ServerChatTemplate* setup);

// The same for a model whose template and special tokens were read already (a GGUF file's):
// `model` holds them, its text empty when the model has no template. The override, when given,
// replaces the text and keeps the special tokens.
StatusOr<ServerChatTemplate> SetUpEmbeddedChatTemplate(ChatTemplateSource model,
                                                       const std::string& override_path);

// The built-in formats, for models without a template of their own.
enum class ChatFormat { kLlama3, kChatMl };

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
// Content is trimmed of Python's whitespace (str.strip()), as the Llama-3 template's |trim does.
// InvalidArgument naming the message index for an empty list or an unknown role.
StatusOr<std::string> FormatChat(ChatFormat format, const std::vector<ChatMessage>& messages);

// The text of the token that ends an assistant turn ("<|eot_id|>" or "<|im_end|>").
const char* ChatEndOfTurn(ChatFormat format);

}  // namespace millipede
