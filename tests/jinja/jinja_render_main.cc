// Renders templates for the differential test against Python's Jinja: reads JSON lines
// {"template": T, "variables": {...}, "trim_blocks": b, "lstrip_blocks": b} on stdin and writes
// {"text": ...} or {"error": ...} per line. `raise_exception(msg)` is a global, as transformers
// defines it.
#include <iostream>
#include <string>

#include "jinja/template.h"

namespace {

using Json = nlohmann::ordered_json;
using namespace millipede::jinja;

Json RenderOne(const Json& request) {
  TemplateOptions options;
  options.trim_blocks = request.value("trim_blocks", false);
  options.lstrip_blocks = request.value("lstrip_blocks", false);
  auto parsed = Template::Parse(request.at("template").get<std::string>(), options);
  if (!parsed.ok()) return Json{{"error", parsed.status().message()}};
  Variables variables;
  const Json given = request.value("variables", Json::object());
  for (const auto& [key, value] : given.items()) {
    auto v = FromJson(value);
    if (!v.ok()) return Json{{"error", v.status().message()}};
    variables[key] = *v;
  }
  variables["raise_exception"] =
      Value::Function("raise_exception", [](CallArgs& args) -> millipede::StatusOr<Value> {
        std::string message = args.positional.empty() ? "" : args.positional[0].as_string();
        return millipede::InvalidArgumentError("raised: " + message);
      });
  auto text = parsed->Render(variables);
  if (!text.ok()) return Json{{"error", text.status().message()}};
  return Json{{"text", *text}};
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    Json request = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    Json reply = request.is_discarded() ? Json{{"error", "bad request line"}} : RenderOne(request);
    std::cout << reply.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  return 0;
}
