// Renders conversations with a model directory's chat template, for the oracle test against
// transformers: chat_template_render MODEL_DIR reads JSON lines {"messages": [{"role",
// "content"}], "add_generation_prompt": bool} and writes {"text": ...} or {"error": ...} per line.
#include <iostream>
#include <string>

#include "common/json_util.h"
#include "http/chat_template.h"

namespace {

using millipede::ChatMessage;
using millipede::ChatTemplate;
using millipede::Json;

Json RenderOne(const ChatTemplate& chat, const Json& request) {
  std::vector<ChatMessage> messages;
  for (const Json& m : request.at("messages")) {
    messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  }
  auto text = chat.Render(messages, request.value("add_generation_prompt", true));
  if (!text.ok()) return Json{{"error", text.status().message()}};
  return Json{{"text", *text}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: chat_template_render MODEL_DIR < requests.jsonl\n";
    return 2;
  }
  auto source = millipede::LoadModelChatTemplate(argv[1]);
  if (!source.ok() || !source->has_value()) {
    std::cerr << "chat_template_render: "
              << (source.ok() ? "the model has no chat template" : source.status().ToString())
              << "\n";
    return 1;
  }
  auto chat = ChatTemplate::Create(std::move(**source));
  if (!chat.ok()) {
    std::cerr << "chat_template_render: " << chat.status().ToString() << "\n";
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    auto request = millipede::ParseJson(line, "request");
    Json reply =
        request.ok() ? RenderOne(**chat, *request) : Json{{"error", request.status().message()}};
    std::cout << reply.dump() << "\n";
  }
  return 0;
}
