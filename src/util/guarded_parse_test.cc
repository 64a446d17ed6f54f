#include "util/guarded_parse.h"

#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/parse_toml.h"

namespace gk {
namespace {

bool OneLineText(const std::string& s) { return s.find('\n') == std::string::npos && s.find('\r') == std::string::npos; }

TEST(GuardedParse, PassesValuesAndErrorsThrough) {
  Result<int> r = GuardedParse("x", [] { return 7; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7);
  Result<int> e = GuardedParse("x", []() -> Result<int> { return Status::Error("own error"); });
  EXPECT_EQ(e.message(), "own error");
  Status s = GuardedParse("x", [] { return Status::Ok(); });
  EXPECT_TRUE(s.ok());
}

TEST(GuardedParse, TurnsEveryExceptionIntoOneLine) {
  Status s = GuardedParse("thing.json", []() -> Status { throw std::runtime_error("bad\nvalue"); });
  EXPECT_EQ(s.message(), "thing.json: bad\\nvalue");
  Result<int> t = GuardedParse("cfg", []() -> Result<int> { return nlohmann::json("s").get<int>(); });
  EXPECT_EQ(t.message(), "cfg: type must be number, but is string");
  Result<int> o = GuardedParse("cfg", [] { return nlohmann::json::object().at("missing").get<int>(); });
  EXPECT_EQ(o.message(), "cfg: key 'missing' not found");
  Result<size_t> big = GuardedParse("sizes", [] {
    std::vector<char> v;
    v.reserve(std::numeric_limits<size_t>::max() / 2);
    return v.size();
  });
  EXPECT_FALSE(big.ok());
  EXPECT_EQ(big.message().rfind("sizes: ", 0), 0u) << big.message();
  Result<int> bare = GuardedParse("", []() -> int { throw 42; });
  EXPECT_EQ(bare.message(), "unexpected exception while parsing");
}

// The crafted safetensors header of issue 24: a number too large for a double.
TEST(ParseJson, NumberTooLargeForADoubleIsAnError) {
  auto r = ParseJson(R"({"x":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})", "m.safetensors: header");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "m.safetensors: header: not valid JSON: number overflow parsing '1e999'");
  EXPECT_FALSE(ParseJson("[-1e400]", "a").ok());
}

TEST(ParseJson, SyntaxErrorsAndInvalidUtf8AreOneLine) {
  for (const std::string& text : {std::string("{not json"), std::string("{\"a\":\n\n\"\xff\"}"), std::string(""),
                                  std::string("[1,2"), std::string("\"\\ud800\"")}) {
    auto r = ParseJson(text, "f.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.message().rfind("f.json: not valid JSON: ", 0), 0u) << r.message();
    EXPECT_TRUE(OneLineText(r.message())) << r.message();
  }
}

TEST(ParseJson, BoundsTheNestingDepth) {
  const int ok_depth = kMaxJsonDepth - 1;
  EXPECT_TRUE(ParseJson(std::string(ok_depth, '[') + std::string(ok_depth, ']'), "d").ok());
  const int deep = 1000000;
  auto r = ParseJson(std::string(deep, '[') + std::string(deep, ']'), "d");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("nesting deeper than"), std::string::npos) << r.message();
  auto o = ParseOrderedJson(std::string(deep, '{'), "d");
  EXPECT_FALSE(o.ok());
}

TEST(ParseJson, CallbackFiltersAndMayThrow) {
  auto r = ParseJson(R"({"keep":1,"drop":2})", "f", [](int, nlohmann::json::parse_event_t e, nlohmann::json& v) {
    return !(e == nlohmann::json::parse_event_t::key && v == "drop");
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->dump(), R"({"keep":1})");
  auto t = ParseOrderedJson(R"({"a":"x"})", "f", [](int, nlohmann::ordered_json::parse_event_t, nlohmann::ordered_json& v) {
    if (v.is_string() && v == "x") (void)v.get<int>();  // type_error
    return true;
  });
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.message(), "f: not valid JSON: type must be number, but is string");
}

TEST(OneLine, EscapesControlBytesAndCutsAtCharacters) {
  EXPECT_EQ(OneLine("a\nb\tc\x01"), "a\\nb\\tc\\x01");
  EXPECT_EQ(OneLine("abcdef", 3), "abc...");
  EXPECT_EQ(OneLine("ab\xc3\xa9z", 3), "ab...");  // é is not split
  EXPECT_EQ(OneLine("short", 10), "short");
}

TEST(ParseToml, SyntaxErrorsNameTheLine) {
  auto r = ParseToml("a = 1\n[x\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message().rfind("r.toml:2:", 0), 0u) << r.message();
  EXPECT_TRUE(OneLineText(r.message()));
  auto ok = ParseToml("a = 1\n", "r.toml");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)["a"].value_or(0), 1);
}

}  // namespace
}  // namespace gk
