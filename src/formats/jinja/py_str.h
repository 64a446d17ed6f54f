// Python's str semantics on UTF-8 Text: templates index, slice, strip, split and case-map strings
// as Python does (by code point, with Python's whitespace and Unicode case tables), and print
// floats and reprs exactly as Python prints them, so our output matches jinja2 byte for byte.
//
// Invalid UTF-8 (possible only in a caller's context, never in JSON text) is never an error: each
// bad byte counts as one code point and is written back unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/jinja/text.h"

namespace gk::jinja::py {

// Decodes the code point at s[pos]; returns its length in bytes (>= 1).
size_t DecodeAt(std::string_view s, size_t pos, char32_t* code_point);
void AppendUtf8(std::string& out, char32_t code_point);
bool IsAscii(std::string_view s);  // every byte below 0x80: code point i is byte i
size_t CodePointCount(std::string_view s);
// Byte offset of every code point, plus s.size() at the end.
std::vector<size_t> CodePointOffsets(std::string_view s);
// The bytes [first, first + second) of code point `index` (negative counts from the end, as in
// Python), or nothing when it is out of range. Builds no table: an ASCII string is indexed
// directly, any other walked forward to s[i] or back from the end to s[-i], so a loop of s[i]
// over a long string no longer allocates and decodes the whole string at every step.
std::optional<std::pair<size_t, size_t>> CodePointSpan(std::string_view s, int64_t index);

// Substring search (bytes) in time linear in the string: glibc's memmem, where std::string::find
// compares at every position, so that a template's ('a' * 10**6 ~ 'b') in ('a' * 5 * 10**6)
// took minutes. FindBytes: the first occurrence at or after `from`; RFindBytes: the last.
// std::string::npos when there is none; an empty `sub` is found at `from` (or at the end).
size_t FindBytes(std::string_view s, std::string_view sub, size_t from = 0);
size_t RFindBytes(std::string_view s, std::string_view sub);

bool IsSpace(char32_t c);      // str.isspace (also what str.strip()/split() remove)
bool IsPrintable(char32_t c);  // str.isprintable (what repr leaves unescaped)
bool IsLower(std::string_view s);  // str.islower
bool IsUpper(std::string_view s);  // str.isupper

// Case mappings, each output code point keeping the origin of the code point it came from.
Text Upper(const Text& s);
Text Lower(const Text& s);
Text Title(const Text& s);       // str.title
Text Capitalize(const Text& s);  // str.capitalize

// str.strip/lstrip/rstrip; `chars` absent strips whitespace.
Text Strip(const Text& s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit; `sep` absent splits on whitespace runs. sep must not be empty.
std::vector<Text> Split(const Text& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<Text> RSplit(const Text& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<Text> SplitLines(const Text& s, bool keep_ends);
// str.replace (count < 0: all), new text keeping its own origin.
Text Replace(const Text& s, std::string_view old, const Text& replacement, int64_t count);
// str.find / str.count over code point indices [start, end) (Python slice rules for the bounds).
int64_t Find(std::string_view s, std::string_view sub, std::optional<int64_t> start,
             std::optional<int64_t> end, bool reverse);
int64_t Count(std::string_view s, std::string_view sub);

// A decimal float literal already checked for syntax ("1.5e3", "inf", no sign), rounded as Python
// does; past the double range it is inf or 0.0 as in Python, never an error.
double ParseDecimal(std::string_view literal);

// Python's repr() of a str and of a float, and str() of a float.
std::string StrRepr(std::string_view s);
std::string FloatRepr(double value);

}  // namespace gk::jinja::py
