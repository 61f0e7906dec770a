// Python's text semantics for the template engine: strings are sequences of code points (stored
// as UTF-8), whitespace is what str.isspace() accepts, and numbers print as str() prints them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/utf8.h"

namespace millipede::jinja {

// The tokenizer's UTF-8 helpers: validation (overlongs, surrogates and code points above
// U+10FFFF refused) and encoding one code point.
using tokenizer_internal::AppendUtf8;
using tokenizer_internal::FindInvalidUtf8;

// Code points of valid UTF-8 text.
std::u32string DecodeUtf8(std::string_view text);
std::string EncodeUtf8(std::u32string_view cps);

// Whether every byte is ASCII (then bytes are code points).
bool IsAscii(std::string_view text);

// Code points in valid UTF-8 text (what Python's len() counts).
int64_t CodePointCount(std::string_view text);

// str.isspace() for one code point: ASCII whitespace, \x1c-\x1f, U+0085, U+00A0 and the Unicode
// space separators and line/paragraph separators.
bool IsPySpace(char32_t cp);

enum class StripSide { kBoth, kLeft, kRight };
// str.strip / lstrip / rstrip: `chars` (code points) or, when absent, Python whitespace.
std::string PyStrip(std::string_view text, const std::optional<std::string>& chars, StripSide side);

// str.split(sep, maxsplit): with no separator, runs of whitespace split and leading/trailing
// whitespace gives no empty parts. InvalidArgument for an empty separator.
StatusOr<std::vector<std::string>> PySplit(std::string_view text,
                                           const std::optional<std::string>& sep, int64_t maxsplit);

// str.replace(old, new, count) (count < 0: all). An empty `old` inserts `repl` between every
// code point, as Python does.
std::string PyReplace(std::string_view text, std::string_view old, std::string_view repl,
                      int64_t count);

// Case mapping. Python maps every script; this engine maps ASCII letters only and refuses text
// with other letters rather than return something Python would not (InvalidArgument).
enum class CaseMap { kUpper, kLower, kTitle, kCapitalize, kJinjaTitle };
StatusOr<std::string> PyCase(std::string_view text, CaseMap map);

// Python's repr(float) (= str(float)): shortest round-trip digits, "1.0", "1e+16", "2.5e-07",
// "inf", "nan", "-0.0".
std::string PyFloatRepr(double value);

// Python's repr(str): quoted with ' (or " when the text has ' but not "), with \\, \n, \r, \t,
// \xNN / \uNNNN / \UNNNNNNNN for control, format and separator characters.
std::string PyStringRepr(std::string_view text);

}  // namespace millipede::jinja
