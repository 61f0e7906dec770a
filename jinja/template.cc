#include "jinja/template.h"

#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/renderer.h"
#include "jinja/runtime.h"

namespace millipede::jinja {

struct Program {
  std::string source;  // normalized: positions in errors refer to it
  Body body;
};

StatusOr<Template> Template::Parse(std::string_view source, const TemplateOptions& options) {
  auto program = std::make_shared<Program>();
  program->source = NormalizeSource(source);
  LexOptions lex;
  lex.trim_blocks = options.trim_blocks;
  lex.lstrip_blocks = options.lstrip_blocks;
  MP_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(program->source, lex));
  MP_ASSIGN_OR_RETURN(program->body, jinja::Parse(program->source, tokens));
  return Template(std::move(program));
}

StatusOr<std::string> Template::Render(const Variables& variables,
                                       const RenderLimits& limits) const {
  std::string out;
  internal::Runtime runtime(program_->source, limits);
  internal::Renderer renderer(&runtime, variables);
  MP_RETURN_IF_ERROR(renderer.Run(program_->body, &out));
  return out;
}

}  // namespace millipede::jinja
