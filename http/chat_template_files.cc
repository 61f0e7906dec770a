// Finding a model's chat template and special tokens in its files, as transformers'
// from_pretrained does.
#include "common/file_util.h"
#include "common/json_util.h"
#include "http/chat_template.h"

namespace millipede {
namespace {

constexpr const char* kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                             "pad_token", "cls_token", "mask_token"};

// A special token as the files write it: a string, or an AddedToken object {"content": ...}.
StatusOr<std::optional<std::string>> TokenText(const Json& value, const std::string& where) {
  if (value.is_null()) return std::optional<std::string>();
  if (value.is_string()) return std::optional<std::string>(value.get<std::string>());
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return std::optional<std::string>(value["content"].get<std::string>());
  }
  return InvalidArgumentError(where + " must be a string, null or {\"content\": string}");
}

// Reads the special tokens of one file into `source` (later files override earlier ones).
Status ReadSpecialTokens(const Json& config, const std::string& file, ChatTemplateSource* source) {
  if (!config.is_object()) return InvalidArgumentError(file + " must hold a JSON object");
  for (const char* key : kSpecialTokenKeys) {
    if (!config.contains(key)) continue;
    MP_ASSIGN_OR_RETURN(std::optional<std::string> text, TokenText(config[key], file + ": " + key));
    if (text) {
      source->special_tokens[key] = *text;
    } else {
      source->special_tokens.erase(key);
    }
  }
  if (config.contains("additional_special_tokens")) {
    const Json& list = config["additional_special_tokens"];
    if (!list.is_array()) {
      return InvalidArgumentError(file + ": additional_special_tokens must be a list");
    }
    source->additional_special_tokens.clear();
    for (const Json& item : list) {
      MP_ASSIGN_OR_RETURN(std::optional<std::string> text,
                          TokenText(item, file + ": additional_special_tokens"));
      if (text) source->additional_special_tokens.push_back(*text);
    }
  }
  return OkStatus();
}

// tokenizer_config.json's chat_template: a string, or named templates of which "default" is the
// one apply_chat_template uses without tools.
StatusOr<std::optional<std::string>> ConfigTemplate(const Json& config, const std::string& file) {
  if (!config.contains("chat_template") || config["chat_template"].is_null()) {
    return std::optional<std::string>();
  }
  const Json& value = config["chat_template"];
  if (value.is_string()) return std::optional<std::string>(value.get<std::string>());
  if (!value.is_array()) {
    return InvalidArgumentError(file +
                                ": chat_template must be a string or a list of "
                                "{\"name\", \"template\"}");
  }
  std::string names;
  for (const Json& entry : value) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string()) {
      return InvalidArgumentError(file +
                                  ": chat_template entries must be {\"name\": string, "
                                  "\"template\": string}");
    }
    if (entry["name"] == "default") {
      return std::optional<std::string>(entry["template"].get<std::string>());
    }
    names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
  }
  return InvalidArgumentError(file + ": chat_template lists templates (" + names +
                              ") but none named \"default\"");
}

StatusOr<ChatTemplateSource> ReadModelFiles(const std::string& model_dir,
                                            std::optional<std::string>* config_template) {
  ChatTemplateSource source;
  const std::string config_path = JoinPath(model_dir, "tokenizer_config.json");
  if (FileExists(config_path)) {
    MP_ASSIGN_OR_RETURN(Json config, ParseJsonFile(config_path));
    MP_RETURN_IF_ERROR(ReadSpecialTokens(config, "tokenizer_config.json", &source));
    MP_ASSIGN_OR_RETURN(*config_template, ConfigTemplate(config, "tokenizer_config.json"));
  }
  const std::string map_path = JoinPath(model_dir, "special_tokens_map.json");
  if (FileExists(map_path)) {
    MP_ASSIGN_OR_RETURN(Json map, ParseJsonFile(map_path));
    MP_RETURN_IF_ERROR(ReadSpecialTokens(map, "special_tokens_map.json", &source));
  }
  return source;
}

}  // namespace

StatusOr<std::optional<ChatTemplateSource>> LoadModelChatTemplate(const std::string& model_dir) {
  std::optional<std::string> config_template;
  MP_ASSIGN_OR_RETURN(ChatTemplateSource source, ReadModelFiles(model_dir, &config_template));
  const std::string jinja_path = JoinPath(model_dir, "chat_template.jinja");
  if (FileExists(jinja_path)) {
    MP_ASSIGN_OR_RETURN(source.text, ReadFileToString(jinja_path));
    source.origin = "chat_template.jinja";
    return std::optional<ChatTemplateSource>(std::move(source));
  }
  if (!config_template) return std::optional<ChatTemplateSource>();
  source.text = std::move(*config_template);
  source.origin = "tokenizer_config.json";
  return std::optional<ChatTemplateSource>(std::move(source));
}

StatusOr<ChatTemplateSource> LoadChatTemplateFile(const std::string& path,
                                                  const std::string& model_dir) {
  ChatTemplateSource source;
  if (!model_dir.empty()) {
    std::optional<std::string> unused;
    MP_ASSIGN_OR_RETURN(source, ReadModelFiles(model_dir, &unused));
  }
  MP_ASSIGN_OR_RETURN(source.text, ReadFileToString(path));
  source.origin = path;
  return source;
}

namespace {

// The server's template from the model's own (read or failed), when there is no override.
ServerChatTemplate FromModelTemplate(StatusOr<std::optional<ChatTemplateSource>> source) {
  ServerChatTemplate setup;
  // ChooseBuiltInChatFormat writes the note of a model without a template.
  if (source.ok() && !source->has_value()) return setup;
  StatusOr<std::shared_ptr<const ChatTemplate>> compiled =
      source.ok() ? ChatTemplate::Create(std::move(**source))
                  : StatusOr<std::shared_ptr<const ChatTemplate>>(source.status());
  if (!compiled.ok()) {
    setup.chat_template_error =
        "the model's chat template cannot be used: " + compiled.status().message() +
        " (start the server with --chat-template FILE to replace it)";
    setup.note = setup.chat_template_error + "; chat requests will be refused";
    return setup;
  }
  setup.chat_template = std::move(compiled).value();
  setup.note = "chat template: the model's " + setup.chat_template->origin();
  return setup;
}

StatusOr<ServerChatTemplate> FromOverride(ChatTemplateSource source,
                                          const std::string& override_path) {
  ServerChatTemplate setup;
  MP_ASSIGN_OR_RETURN(setup.chat_template, ChatTemplate::Create(std::move(source)));
  setup.note = "chat template: " + override_path + " (--chat-template)";
  return setup;
}

}  // namespace

StatusOr<ServerChatTemplate> SetUpChatTemplate(const std::string& model_dir,
                                               const std::string& override_path) {
  if (!override_path.empty()) {
    MP_ASSIGN_OR_RETURN(ChatTemplateSource source, LoadChatTemplateFile(override_path, model_dir));
    return FromOverride(std::move(source), override_path);
  }
  // --chat-format: ChooseBuiltInChatFormat names the format.
  if (model_dir.empty()) return ServerChatTemplate{};
  return FromModelTemplate(LoadModelChatTemplate(model_dir));
}

StatusOr<ServerChatTemplate> SetUpEmbeddedChatTemplate(ChatTemplateSource model,
                                                       const std::string& override_path) {
  if (!override_path.empty()) {
    MP_ASSIGN_OR_RETURN(model.text, ReadFileToString(override_path));
    model.origin = override_path;
    return FromOverride(std::move(model), override_path);
  }
  if (model.text.empty()) return FromModelTemplate(std::optional<ChatTemplateSource>());
  return FromModelTemplate(std::optional<ChatTemplateSource>(std::move(model)));
}

void ChooseBuiltInChatFormat(std::string_view configured, const Tokenizer& tokenizer,
                             ServerChatTemplate* setup) {
  if (setup->chat_template || !setup->chat_template_error.empty()) return;
  StatusOr<ChatFormat> format = ResolveChatFormat(configured, tokenizer);
  if (!format.ok()) {
    setup->chat_template_error = format.status().message();
    setup->note = "the model has no chat template and its tokenizer has neither the Llama-3 nor "
                  "the ChatML special tokens: chat requests will be refused (give --chat-template "
                  "FILE or --chat-format llama3|chatml); completions are served";
    return;
  }
  setup->note = std::string("chat template: the built-in ") + ChatFormatName(*format) +
                " format (" +
                (configured.empty() ? "the model has none; its tokenizer has that format's "
                                      "special tokens)"
                                    : "--chat-format)");
}

}  // namespace millipede
