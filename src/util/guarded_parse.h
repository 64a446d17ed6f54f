// Parsing outside input without exceptions escaping: the one place where a parser's exception
// becomes an error value.
//
// Model files, configs, adapters, recipes, data sets and HTTP bodies come from outside, and
// the libraries that read them throw: nlohmann::json on a number too large for a double
// (out_of_range.406), on .get<T>() of the wrong type, .at() of a missing key or .value() on a
// non-object, on dump() of a string that is not UTF-8; toml++ throws parse_error; absurd sizes
// throw std::length_error or std::bad_alloc; std::regex throws regex_error. Uncaught, any of
// them aborts the process (SIGABRT, exit 134), which a crafted file must never be able to do.
//
// So every parser of outside input runs its whole parse step inside GuardedParse at its public
// boundary (not a try/catch per call), and JSON is parsed with ParseJson, which also bounds the
// nesting depth (nlohmann's copy and dump() recurse, so "[[[[..." a million deep would
// overflow the stack later). Library code never throws on purpose; this only turns what the
// libraries throw into a one-line Status naming what was being parsed. docs/RELIABILITY.md
// lists the parsers and the fuzzers that check them.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace gk {

// `text` on one line: newlines, tabs and other control bytes become \n, \t, \xNN escapes, so
// an error that quotes input (a tensor name, a JSON key) stays one line. Longer than
// `max_bytes`, it is cut (at a UTF-8 character boundary) and ends in "...".
std::string OneLine(std::string_view text, size_t max_bytes = std::string::npos);

// The message of an exception caught at a parse boundary: one line, at most 400 bytes, without
// nlohmann's "[json.exception.type_error.302] " prefix; std::bad_alloc says what it means.
std::string DescribeParseException(const std::exception& e);

namespace guarded_parse_detail {
template <class T>
struct ResultOf {
  using type = Result<T>;
};
template <class T>
struct ResultOf<Result<T>> {
  using type = Result<T>;
};
template <>
struct ResultOf<Status> {
  using type = Status;
};
template <class F>
using ResultOfT = typename ResultOf<std::remove_cvref_t<std::invoke_result_t<F>>>::type;
}  // namespace guarded_parse_detail

// Runs `parse` (returning Status, Result<T> or a plain T) and returns what it returns, or, if
// it throws, an error "<what>: <exception message>". `what` names the input ("model.safetensors:
// header", "POST /v1/chat/completions body"); empty, the message stands alone.
template <class F>
guarded_parse_detail::ResultOfT<F> GuardedParse(std::string_view what, F&& parse) {
  using R = guarded_parse_detail::ResultOfT<F>;
  auto error = [&](const std::string& message) {
    return R(Status::Error(what.empty() ? message : StrCat(what, ": ", message)));
  };
  try {
    return std::forward<F>(parse)();
  } catch (const std::exception& e) {
    return error(DescribeParseException(e));
  } catch (...) {
    return error("unexpected exception while parsing");
  }
}

// Nesting deeper than this is refused by ParseJson (real files nest a few levels; Orbax trees
// a few dozen).
inline constexpr int kMaxJsonDepth = 512;

// Parses JSON text. Any failure (syntax, invalid UTF-8, a number too large for a double,
// nesting deeper than kMaxJsonDepth, a throwing callback) is "<what>: not valid JSON: <detail>".
// `callback` (optional) is nlohmann's parser callback: it may filter the DOM as it is built
// (tokenizer.json's vocab is captured this way); when it discards the root, the result is a
// discarded value, as with nlohmann::json::parse.
Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what,
                                 const nlohmann::json::parser_callback_t& callback = nullptr);
Result<nlohmann::ordered_json> ParseOrderedJson(
    std::string_view text, std::string_view what,
    const nlohmann::ordered_json::parser_callback_t& callback = nullptr);

}  // namespace gk
