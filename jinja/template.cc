#include "jinja/template.h"

#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

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
  internal::Interpreter interpreter(program_->source, variables, limits);
  MP_RETURN_IF_ERROR(interpreter.Run(program_->body, &out));
  return out;
}

}  // namespace millipede::jinja
