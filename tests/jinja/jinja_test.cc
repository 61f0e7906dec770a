// The template engine: constructs, whitespace control, Python value semantics, errors with
// positions, and bounded work. Expected texts are what Python's Jinja renders.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "jinja/template.h"

namespace millipede::jinja {
namespace {

Variables TestVariables() {
  Variables v;
  auto messages = FromJson(Json::parse(R"([{"role": "system", "content": " Be brief. "},
                                           {"role": "user", "content": "Hi"},
                                           {"role": "assistant", "content": "Hello"}])"));
  v["messages"] = *messages;
  v["n"] = Value::Int(3);
  v["name"] = Value::String("caf\u00e9");
  v["raise_exception"] = Value::Function("raise_exception", [](CallArgs& args) -> StatusOr<Value> {
    return InvalidArgumentError("raised: " + args.positional.at(0).as_string());
  });
  return v;
}

StatusOr<std::string> Render(std::string_view source, bool trim = false,
                             const RenderLimits& limits = {}) {
  TemplateOptions options;
  options.trim_blocks = trim;
  options.lstrip_blocks = trim;
  MP_ASSIGN_OR_RETURN(Template t, Template::Parse(source, options));
  return t.Render(TestVariables(), limits);
}

std::string Ok(std::string_view source, bool trim = false) {
  auto text = Render(source, trim);
  EXPECT_TRUE(text.ok()) << source << ": " << text.status().ToString();
  return text.ok() ? *text : "<error>";
}

// The error message, which must start with its position.
std::string Err(std::string_view source, const char* position, bool trim = false) {
  auto text = Render(source, trim);
  EXPECT_FALSE(text.ok()) << source << " rendered " << (text.ok() ? *text : "");
  if (text.ok()) return "";
  EXPECT_EQ(text.status().message().rfind(position, 0), 0u) << text.status().message();
  return text.status().message();
}

TEST(JinjaTest, ConditionalsAndLoops) {
  EXPECT_EQ(Ok("{% if n > 5 %}a{% elif n == 3 %}b{% else %}c{% endif %}"), "b");
  EXPECT_EQ(Ok("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
               "{{ loop.last }}{{ loop.length }}{{ m.role[0] }};{% endfor %}"),
            "10TrueFalse3s;21FalseFalse3u;32FalseTrue3a;");
  EXPECT_EQ(Ok("{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}"
               "{% endfor %}"),
            "1/22/2");
  EXPECT_EQ(Ok("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Ok("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  EXPECT_EQ(Ok("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}"
               "{% if i == 3 %}{% break %}{% endif %}{% endfor %}"),
            "023");
}

TEST(JinjaTest, SetScopesAndNamespaces) {
  // A set inside a loop lasts for that round only; a namespace carries values out.
  EXPECT_EQ(Ok("{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}"
               "{{ x }}"),
            "01020");
  EXPECT_EQ(Ok("{% set ns = namespace(total=0) %}{% for i in [1, 2, 3] %}"
               "{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}"),
            "6");
  EXPECT_EQ(Ok("{% set a, b = 'x', 'y' %}{{ b }}{{ a }}"), "yx");
  EXPECT_EQ(Ok("{% set block %}n={{ n }}{% endset %}[{{ block }}]"), "[n=3]");
  EXPECT_EQ(Ok("{% set messages = messages[1:] %}{{ messages|length }}"), "2");
}

TEST(JinjaTest, FiltersTestsAndMethods) {
  EXPECT_EQ(Ok("{{ messages[0].content|trim }}|{{ '\u00a0x\u3000'|trim }}|{{ 'xax'|trim('x') }}"),
            "Be brief.|x|a");
  EXPECT_EQ(
      Ok("{{ messages|selectattr('role', 'equalto', 'user')|list|length }}"
         "{{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|join(',') }}"),
      "1system,assistant");
  EXPECT_EQ(Ok("{{ {'b': [1, 'x'], 'a': none}|tojson }} {{ [1]|tojson(indent=2) }}"),
            "{\"b\": [1, \"x\"], \"a\": null} [\n  1\n]");
  EXPECT_EQ(Ok("{{ u|default('d') }} {{ 'AbC'|upper }}{{ 'AbC'|lower }} {{ n|string ~ '!' }} "
               "{{ [1, 2]|first }}{{ [1, 2]|last }} {{ 'a-b'|replace('-', '+') }}"),
            "d ABCabc 3! 12 a+b");
  EXPECT_EQ(Ok("{{ ' a b '.strip() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'ab'.startswith('a') }}"
               "{{ 'ab'.endswith('a') }}|{{ 'hello world'.title() }}|{{ 'x'.upper() }}"),
            "a b|['a', 'b,c']|TrueFalse|Hello World|X");
  EXPECT_EQ(Ok("{{ u is defined }}{{ n is number }}{{ name is string }}{{ messages[0] is mapping }}"
               "{{ messages is iterable }}{{ messages is sequence }}{{ none is none }}"
               "{{ n is equalto 3 }}{{ n is not odd }}"),
            "FalseTrueTrueTrueTrueTrueTrueTrueFalse");
}

TEST(JinjaTest, PythonValueSemantics) {
  EXPECT_EQ(Ok("{{ name|length }} {{ name[3] }} {{ name[::-1] }} {{ name[1:-1] }}"),
            "4 \u00e9 \u00e9fac af");
  EXPECT_EQ(Ok("{{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 1e20 }} "
               "{{ 0.1 + 0.2 }} {{ 2.5e-7 }}"),
            "0.5 2.0 3 -4 2 1024 1e+20 0.30000000000000004 2.5e-07");
  EXPECT_EQ(Ok("{{ none }} {{ true }} {{ u }}|{{ [1, 'a', none, (1,)] }} {{ messages[1] }}"),
            "None True |[1, 'a', None, (1,)] {'content': 'Hi', 'role': 'user'}");
  EXPECT_EQ(Ok("{{ 'a' ~ 1 ~ none }} {{ 'ab' in 'cab' }} {{ 'role' in messages[0] }} "
               "{{ 1 < 2 < 3 }} {{ [1] == [1.0] }} {{ messages[0] == messages[0] }} "
               "{{ 'x' if n else 'y' }} {{ '' or 'z' }} {{ not n }}"),
            "a1None True True True True True x z False");
  EXPECT_EQ(Ok("{{ \"it's\" }} {{ 'tab\\t\\u00e9\\x41\\101' }}"), "it's tab\t\u00e9AA");
}

TEST(JinjaTest, WhitespaceControl) {
  EXPECT_EQ(Ok("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(Ok("a {{- 'x' -}} \n b"), "axb");
  EXPECT_EQ(Ok("x {#- note -#}  y"), "xy");
  // trim_blocks drops the newline after a tag, lstrip_blocks the indentation before one.
  const char* kBlock = "  {% if true %}\n  x\n  {% endif %}\n  y {# c #}\n  {# c2 #}\nz\n";
  EXPECT_EQ(Ok(kBlock, /*trim=*/true), "  x\n  y z");
  EXPECT_EQ(Ok(kBlock, /*trim=*/false), "  \n  x\n  \n  y \n  \nz");
  // + keeps what the options would remove.
  EXPECT_EQ(Ok("a\n  {%+ if true %}x{% endif +%}\nb\n", /*trim=*/true), "a\n  x\nb");
  EXPECT_EQ(Ok("{% for m in messages %}\n    {{- m.role[0] }}\n{% endfor %}\n", true), "s\nu\na\n");
  EXPECT_EQ(Ok("line\r\nnext\r\n"), "line\nnext");  // newlines normalised, one trailing dropped
}

TEST(JinjaTest, SyntaxErrorsNamePositionAndConstruct) {
  EXPECT_NE(Err("ab\n  {% macro f() %}{% endmacro %}", "line 2, column 6").find("macro"),
            std::string::npos);
  EXPECT_NE(Err("{% include 'x' %}", "line 1, column 4").find("not supported"), std::string::npos);
  EXPECT_NE(Err("x\n{% if n %}\nno end", "line 2, column 4").find("{% endif %}"),
            std::string::npos);
  EXPECT_NE(Err("{{ 1 + }}", "line 1, column 8").find("expected an expression"), std::string::npos);
  EXPECT_NE(Err("{{ 'open }}", "line 1, column 4").find("not closed"), std::string::npos);
  EXPECT_NE(Err("{{ (1 ] }}", "line 1, column 7").find("expected ')'"), std::string::npos);
  EXPECT_NE(Err("{% endfor %}", "line 1, column 4").find("endfor"), std::string::npos);
  EXPECT_NE(Err("{% break %}", "line 1, column 4").find("outside a for loop"), std::string::npos);
  EXPECT_NE(Err("{% for x in y recursive %}{% endfor %}", "line 1, column 15").find("recursive"),
            std::string::npos);
  EXPECT_NE(Err("{{ a $ b }}", "line 1, column 6").find("'$'"), std::string::npos);
  EXPECT_NE(Err(std::string("{{ 'a\xff' }}"), "line 1, column 6").find("UTF-8"), std::string::npos);
}

TEST(JinjaTest, RuntimeErrorsNamePositionAndConstruct) {
  EXPECT_NE(Err("{{ n|sort }}", "line 1, column 6").find("filter 'sort' is not supported"),
            std::string::npos);
  EXPECT_NE(Err("{{ n is sameas 3 }}", "line 1, column 6").find("test 'sameas'"),
            std::string::npos);
  EXPECT_NE(Err("{{ name.zfill(5) }}", "line 1, column 8").find("zfill"), std::string::npos);
  EXPECT_NE(Err("\n  {{ missing.x }}", "line 2, column 13").find("'missing' is undefined"),
            std::string::npos);
  EXPECT_NE(Err("{{ name + 1 }}", "line 1, column 9").find("'str' and 'int'"), std::string::npos);
  EXPECT_NE(Err("{{ 1 // 0 }}", "line 1, column 6").find("by zero"), std::string::npos);
  EXPECT_NE(Err("{{ '%s' % n }}", "line 1, column 9").find("not supported"), std::string::npos);
  EXPECT_NE(Err("{{ name|upper }}", "line 1, column 9").find("non-ASCII"), std::string::npos);
  EXPECT_NE(Err("{% set n.x = 1 %}", "line 1, column 4").find("namespace"), std::string::npos);
  EXPECT_NE(Err("{% for x in n %}{% endfor %}", "line 1, column 13").find("not iterable"),
            std::string::npos);
  const std::string raised =
      Err("{% if true %}\n  {{ raise_exception('roles must alternate') }}"
          "{% endif %}",
          "line 2, column 21");
  EXPECT_NE(raised.find("raised: roles must alternate"), std::string::npos);
}

TEST(JinjaTest, WorkIsBounded) {
  RenderLimits limits;
  limits.max_steps = 200000;
  const auto start = std::chrono::steady_clock::now();
  auto nested = Render(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
      "{% endfor %}",
      false, limits);
  ASSERT_FALSE(nested.ok());
  EXPECT_EQ(nested.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(nested.status().message().find("work limit"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  for (const char* hostile :
       {"{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}",
        "{{ 'x' * 100000000000 }}", "{{ [1] * 100000000000 }}", "{{ range(10**18)|length }}",
        "{% for i in range(1000000) %}{{ 'abcdefgh' * 1000 }}{% endfor %}"}) {
    RenderLimits small;
    small.max_output_bytes = 1 << 20;
    auto text = Render(hostile, false, small);
    ASSERT_FALSE(text.ok()) << hostile;
    EXPECT_EQ(text.status().code(), StatusCode::kResourceExhausted) << text.status().ToString();
  }
}

TEST(JinjaTest, NestingIsBounded) {
  const std::string deep_expr =
      "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(Err(deep_expr, "line 1").find("nests too deeply"), std::string::npos);
  std::string deep_blocks;
  for (int i = 0; i < 2000; ++i) deep_blocks += "{% if true %}";
  EXPECT_NE(Err(deep_blocks, "line 1").find("too deeply"), std::string::npos);
  EXPECT_NE(Err("{{ " + std::string(5000, '-') + "1 }}", "line 1").find("too deeply"),
            std::string::npos);
  // Values nested by a loop: printing, comparing and dumping stop at a depth limit.
  const std::string build =
      "{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}"
      "{% endfor %}";
  EXPECT_NE(Err(build, "line 1, column 71").find("deeper than"), std::string::npos);
  // A namespace cannot be put inside itself (no reference cycles).
  EXPECT_NE(
      Err("{% set ns = namespace() %}{% set ns.me = [ns] %}", "line 1, column 30").find("cycle"),
      std::string::npos);
}

}  // namespace
}  // namespace millipede::jinja
