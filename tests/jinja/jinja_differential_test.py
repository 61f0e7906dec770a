#!/usr/bin/env python3
"""The template engine against Python's Jinja, configured as transformers renders chat templates.

Every case renders with both (Jinja: ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks as the case says, the loopcontrols extension, transformers' tojson and
raise_exception). Where Jinja renders, the engine must give the same text; where Jinja raises, the
engine must refuse too. Cases marked UNSUPPORTED use what the engine leaves out: it must refuse
them with an error that says so.
  jinja_differential_test.py JINJA_RENDER_BINARY
Exit status: 0 all agree, 1 a difference, 77 (skipped) when jinja2 cannot be imported.
"""
import json
import subprocess
import sys

try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIP: jinja2 is not importable ({e})")
    sys.exit(77)

MESSAGES = [
    {"role": "system", "content": "  Be brief.\n"},
    {"role": "user", "content": "Hi \u00e9\u4e2d\u00a0"},
    {"role": "assistant", "content": "Hello!"},
]
VARS = {"messages": MESSAGES, "n": 3, "f": 2.5, "s": "a,b,c", "empty": "", "nothing": None,
        "d": {"b": 1, "a": [1, 2, {"x": "y"}], "items": "shadowed"}}

# (template, options) with options "" (no trimming) or "tl" (trim_blocks + lstrip_blocks).
CASES = [
    # Whitespace control, trim_blocks and lstrip_blocks.
    ("  {% if true %}\n  x\n  {% endif %}\n  y {# c #}\n  {# c2 #}\nz\n", "tl"),
    ("  {% if true %}\n  x\n  {% endif %}\n  y {# c #}\n  {# c2 #}\nz\n", ""),
    ("a  {%- if true -%}  b  {%- endif -%}  c", "tl"),
    ("a\n  {%+ if true %}x{% endif +%}\nb\n", "tl"),
    ("a \n {{- 'x' -}} \n b {{ 'y' }}  \n  {{ 'z' }}\n", "tl"),
    ("{% for m in messages %}\n    {{- m.role }}\n{% endfor %}\n", "tl"),
    ("{% for m in messages %}\n    {{ m.role }}\n{% endfor %}\n", ""),
    ("x {#- comment -#}  y\n{#+ keep +#}\nz", "tl"),
    ("\t{% set x = 1 %}\t{{ x }}\r\n{{ x }}\r\n", "tl"),
    ("line\n\n", ""),
    # Scoping.
    ("{% set x = 0 %}{% for i in [1,2,3] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}", ""),
    ("{% for i in [1,2] %}{% if i == 2 %}{% set x = i %}{% endif %}{{ x }};{% endfor %}", ""),
    ("{% set ns = namespace(a=1, b='s') %}{% for i in [1,2] %}{% set ns.a = ns.a + i %}"
     "{% endfor %}{{ ns.a }}{{ ns.b }}", ""),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, %}{{ t }}", ""),
    ("{% set x %}in {{ n }} block{% endset %}[{{ x }}]", ""),
    ("{% set messages = messages[1:] %}{{ messages|length }}", ""),
    # Loops.
    ("{% for a in [1,2,3] if a > 1 %}{{ loop.index }}/{{ loop.length }}{{ loop.last }}"
     "{{ loop.revindex0 }};{% else %}E{% endfor %}", ""),
    ("{% for a in [] %}x{% else %}E{% endfor %}", ""),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ""),
    ("{% for k, v in d|items %}{{ k }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", ""),
    ("{% for c in 'h\u00e9' %}[{{ c }}]{% endfor %}{% for x in nothing_here %}x{% endfor %}", ""),
    ("{% for m in [1,2,3] %}{% if loop.first %}{% continue %}{% endif %}{{ m }}{% if m == 2 %}"
     "{% break %}{% endif %}{% endfor %}", "tl"),
    ("{% for i in range(3) %}{{ i }}{{ loop.previtem }}{% endfor %}{{ range(2, 10, 3)|list }}", ""),
    ("{% for a in [[1, 2], [3, 4]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}"
     "{{ loop.index }}{% endfor %}", ""),
    # Values and printing.
    ("{{ [1, 'a', none, true, 1.5, {'k': [1]}, (1,), (1, 2)] }}", ""),
    ("{{ \"it's\" }} {{ [\"it's\", 'a\"b', 'x\\ny', '\\xa0', '\\t\\\\'] }}", ""),
    ("{{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} "
     "{{ 2**-1 }} {{ 1e20 }} {{ 1e-5 }} {{ 0.1+0.2 }} {{ 1e16 }} {{ 3.0 }} {{ -0.0 }} "
     "{{ 7.5 % 2 }} {{ -7.5 // 2 }} {{ 1_000 }} {{ 0x1f }} {{ 2.5e-7 }}", ""),
    ("{{ true + 1 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1, 2] + [3] }} {{ 'a' 'b' }} "
     "{{ 1 + 1.5 }} {{ -n }} {{ +f }} {{ not n }}", ""),
    ("{{ 'x' ~ 1 ~ none ~ 1.0 ~ u ~ [1] }}", ""),
    ("{{ none }} {{ true }} {{ u }}|{{ d }} {{ messages[0] }}", ""),
    ("{{ 'a\\u00e9\\x41\\101\\q\\N' }}", ""),
    # Access.
    ("{{ 'abc'[::-1] }} {{ 'abc'[1:] }} {{ [1,2,3][-1] }} {{ [1,2][5] }}|{{ 'h\u00e9llo'[1] }}"
     "{{ 'h\u00e9llo'[-4:-1] }} {{ [1,2,3,4,5][::2] }} {{ [1,2,3][5:] }} {{ 'abc'[-5:2] }}", ""),
    ("{{ 'abcdef'[::-2] }} {{ 'abcdef'[5:1:-2] }} {{ [1, 2, 3, 4][-1:-5:-1] }} "
     "{{ 'h\u00e9llo'[::-2] }} {{ 'abc'[10:] }}|{{ 'abc'[-10:-5] }}|{{ (1, 2, 3)[1:] }} "
     "{{ 'abc'[::100] }} {{ [1, 2, 3][:-1] }} {{ 'abc'[1:1] }}|", ""),
    ("{{ 'abc'[::0] }}", ""),
    ("{{ 'abc'[::9223372036854775807] }} {{ 'abc'[::-9223372036854775807] }} "
     "{{ (-9223372036854775807 - 1) % -1 }} {{ [{'a': 1}]|map(attribute='0')|list }} "
     "{{ [[1, 2]]|map(attribute='1')|list }} {{ [[1]]|map(attribute='99999999999999999999')|list }}",
     ""),
    ("{{ d.b }} {{ d['a'][2].x }} {{ d.items }}|{{ d['items'] }} {{ d.get('b') }} "
     "{{ d.get('zz', 7) }} {{ d.keys()|list }} {{ d.values()|length }}", "UNSUPPORTED_REPR"),
    ("{{ d.b }} {{ d['a'][2].x }} {{ d['items'] }} {{ d.get('b') }} {{ d.get('zz', 7) }} "
     "{{ d.keys()|list }} {{ d.values()|length }}", ""),
    ("{{ 'str'.content is defined }} {{ 'str'.content }}|{{ none.x }}|{{ n.x }}|", ""),
    ("{{ messages[0]['role'] }}{{ messages[5] }}|{{ (messages|last).content }}", ""),
    # Operators and tests.
    ("{{ 'a' in 'cat' }} {{ 'k' in {'k':1} }} {{ 1 not in [1] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} "
     "{{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ [1] == [1.0] }} {{ (1,) == [1] }} "
     "{{ {'a': 1} == {'a': 1} }} {{ u == u }} {{ u == none }} {{ 'x' in u }}", ""),
    ("{{ 'a' and 'b' }} {{ '' or 'x' }} {{ 0 or none }} {{ 1 if 0 else 2 if 1 else 3 }}"
     "{{ 'x' if false }}|{{ 1 if 0.0 else 2 }}{{ 1 if [] else 2 }}{{ 1 if {} else 2 }}", ""),
    ("{{ u is iterable }} {{ u is sequence }} {{ none is iterable }} {{ 'a' is iterable }} "
     "{{ {} is sequence }} {{ 1 is number }} {{ true is number }} {{ true is integer }} "
     "{{ 1.0 is float }} {{ d is mapping }} {{ [] is mapping }} {{ u is defined }} "
     "{{ none is none }} {{ 3 is odd }} {{ 4 is divisibleby 2 }} {{ 1 is eq 1 }} "
     "{{ 1 is in [1] }} {{ 2 is equalto(2) }} {{ 'ab' is lower }} {{ 'A1' is upper }} "
     "{{ n is not string }} {{ f is ge 2 }} {{ true is true }} {{ 0 is false }}", ""),
    ("{% if not messages[0] is mapping or messages is string %}a{% elif n %}b{% else %}c"
     "{% endif %}", ""),
    # Filters.
    ("{{ '  x\u00a0\u3000 '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ u|trim }}|{{ n|string }}"
     "{{ none|string }}", ""),
    ("{{ 'hello world'|title }} {{ 'hello-world x(y'|title }} {{ 'hELLO'|capitalize }} "
     "{{ 'Ab'|upper }}{{ 'Ab'|lower }}", ""),
    ("{{ [1,2,3]|join(', ') }} {{ ['a','b']|first }}{{ 'xy'|last }} {{ d|items|list }} "
     "{{ d|list }} {{ d|length }} {{ 'h\u00e9'|length }} {{ []|first }}|{{ 'ab'|list }} "
     "{{ [{'n': 1}, {'n': 2}]|join('-', attribute='n') }} {{ [3, 1, 2]|reverse|list }}", ""),
    ("{{ u|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ u|d }}|"
     "{{ none|default(1) }}", ""),
    ("{{ messages|selectattr('role', 'equalto', 'user')|list|length }} "
     "{{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|join(',') }} "
     "{{ [{'r': 'a'}, {'x': 1}]|selectattr('r')|list }} "
     "{{ [{'r': 'a'}, {'x': 1}]|rejectattr('r', 'defined')|list }} "
     "{{ ['a', 'b', 'c']|reject('equalto', 'b')|join }} {{ [1, 0, 2]|select|list }} "
     "{{ ['a']|map('upper')|list }} {{ [{'a': {'b': 3}}]|map(attribute='a.b')|list }}", ""),
    ("{{ d|tojson }} {{ d|tojson(indent=2) }} {{ 'caf\u00e9 \"q\" \\n \U0001F600'|tojson }} "
     "{{ [1.0, none, true, 1e300*1e10]|tojson }} {{ {}|tojson(indent=4) }} "
     "{{ d|tojson(sort_keys=true) }} {{ [1, [2]]|tojson(separators=(',', ':')) }} "
     "{{ 'caf\u00e9\U0001F600\x7f'|tojson(ensure_ascii=true) }} {{ [[]]|tojson(indent='ab') }}", ""),
    ("{{ 'abc'.replace('b', 'x') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'aaa'|replace('a', 'b', 1) }}"
     " {{ 'a b  c'.split() }} {{ 'a,b'.split(',') }} {{ ' a b '.split(None, 1) }} "
     "{{ s.split(',', 1) }} {{ ' x '.strip() }}|{{ 'xyx'.strip('x') }} {{ ' x '.lstrip() }}|"
     "{{ ' x '.rstrip() }}| {{ 'The cat'.title() }} {{ \"they're\".title() }} "
     "{{ 'ab'.startswith(('x', 'a')) }} {{ 'ab'.endswith('b') }} {{ '-'.join(['a', 'b']) }} "
     "{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'aB'.capitalize() }}", ""),
    ("{{ 1.5|int }} {{ '3'|int }} {{ ' 12 '|int }} {{ '1.9'|int }} {{ 'x'|int }} {{ 2|float }} "
     "{{ -3|abs }} {{ 'x'|float(1.5) }} {{ '1e3'|float }} {{ none|int(5) }}", ""),
    ("{{ raise_exception('stop here') }}", ""),
    # Errors Jinja raises too.
    ("{{ x.y }}", ""),
    ("{{ 'a' + 1 }}", ""),
    ("{{ u + 1 }}", ""),
    ("{{ 1 // 0 }}", ""),
    ("{{ 'a' < 1 }}", ""),
    ("{{ none|length }}", ""),
    ("{% for k in none %}{% endfor %}", ""),
    ("{% for k in 5 %}{% endfor %}", ""),
    ("{{ 'abc'.split('') }}", ""),
    ("{{ [1,2][5].x }}", ""),
    ("{{ u() }}", ""),
    ("{{ n() }}", ""),
    ("{% if %}x{% endif %}", ""),
    ("{% if true %}x", ""),
    ("{% for x in y %}x{% endif %}", ""),
    ("{{ 'unclosed }}", ""),
    ("{{ (1 }}", ""),
    ("{{ 1 ]] }}", ""),
    ("{% endfor %}", ""),
    ("{{ 1 +* 2 }}", ""),
    ("{{ x is defined is none }}", ""),
    ("{% break %}", ""),
    ("{{ [1, 2]|tojson(indent=none)|u }}", ""),
    ("{{ d|tojson|int|abs|string|length + u }}", ""),
    ("{% set ns.x = 1 %}", ""),
    ("{% set q = 1 %}{% set q.x = 2 %}", ""),
    ("{% for a, b in [1] %}{% endfor %}", ""),
    ("{{ 'x'|tojson(bogus=1) }}", ""),
    # What the engine leaves out.
    ("{% macro f(x) %}{{ x }}{% endmacro %}{{ f(1) }}", "UNSUPPORTED"),
    ("{% include 'other' %}", "UNSUPPORTED"),
    ("{{ [3, 1]|sort }}", "UNSUPPORTED"),
    ("{{ 'abc'.zfill(5) }}", "UNSUPPORTED"),
    ("{{ 'x' is sameas 'x' }}", "UNSUPPORTED"),
    ("{{ '%s!' % 'hi' }}", "UNSUPPORTED"),
    ("{{ '\u00e9'|upper }}", "UNSUPPORTED"),
    ("{% raw %}{{ x }}{% endraw %}", "UNSUPPORTED"),
    ("{% for x in [1] recursive %}{% endfor %}", "UNSUPPORTED"),
    ("{{ [1, 2].append(3) }}", "UNSUPPORTED"),
    ("{% for x in [1, 2] %}{{ loop.cycle('a', 'b') }}{% endfor %}", "UNSUPPORTED"),
]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def jinja_render(template, trim):
    env = ImmutableSandboxedEnvironment(trim_blocks=trim, lstrip_blocks=trim,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    try:
        return True, env.from_string(template).render(**VARS)
    except Exception as e:  # any failure: the engine must refuse as well
        return False, f"{type(e).__name__}: {e}"


def main():
    binary = sys.argv[1]
    requests = []
    for template, mode in CASES:
        trim = mode == "tl"
        requests.append(json.dumps({"template": template, "variables": VARS,
                                    "trim_blocks": trim, "lstrip_blocks": trim}))
    run = subprocess.run([binary], input="\n".join(requests) + "\n", capture_output=True,
                         text=True, timeout=120, check=True)
    replies = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(replies) == len(CASES), (len(replies), len(CASES))
    failures = 0
    for (template, mode), reply in zip(CASES, replies):
        ok, expected = jinja_render(template, mode == "tl")
        if mode.startswith("UNSUPPORTED"):
            good = "error" in reply and ("not supported" in reply["error"] or
                                         mode == "UNSUPPORTED_REPR")
            if mode == "UNSUPPORTED_REPR":  # Jinja prints a bound method's address
                good = "error" in reply or reply.get("text") != expected
        elif ok:
            good = reply.get("text") == expected
        else:
            good = "error" in reply
        if not good:
            failures += 1
            print(f"MISMATCH {template!r} ({mode or 'plain'})\n  jinja:  {expected!r}\n"
                  f"  engine: {reply!r}")
    print(f"{len(CASES) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
