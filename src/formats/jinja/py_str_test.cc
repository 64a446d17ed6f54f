// Python's str semantics; every expectation is what CPython 3.11 prints.
#include "formats/jinja/py_str.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace gk::jinja::py {
namespace {

std::string Bytes(const Text& t) { return t.bytes(); }

std::vector<std::string> Strings(const std::vector<Text>& parts) {
  std::vector<std::string> out;
  for (const Text& t : parts) out.push_back(t.bytes());
  return out;
}

Text T(std::string s) { return Text::Template(std::move(s)); }

TEST(JinjaPyStrTest, FloatReprMatchesPython) {
  EXPECT_EQ(FloatRepr(1.0), "1.0");
  EXPECT_EQ(FloatRepr(0.1), "0.1");
  EXPECT_EQ(FloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FloatRepr(1e16), "1e+16");
  EXPECT_EQ(FloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(FloatRepr(123456789.125), "123456789.125");
  EXPECT_EQ(FloatRepr(0.0001), "0.0001");
  EXPECT_EQ(FloatRepr(0.00001), "1e-05");
  EXPECT_EQ(FloatRepr(1.5e-7), "1.5e-07");
  EXPECT_EQ(FloatRepr(-0.0), "-0.0");
  EXPECT_EQ(FloatRepr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(FloatRepr(5e-324), "5e-324");
  EXPECT_EQ(FloatRepr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(FloatRepr(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(FloatRepr(std::nan("")), "nan");
}

TEST(JinjaPyStrTest, StrReprMatchesPython) {
  EXPECT_EQ(StrRepr("abc"), "'abc'");
  EXPECT_EQ(StrRepr("it's"), "\"it's\"");
  EXPECT_EQ(StrRepr("both ' and \""), "'both \\' and \"'");
  EXPECT_EQ(StrRepr("a\\b\n\t\r\x01\x7f"), "'a\\\\b\\n\\t\\r\\x01\\x7f'");
  EXPECT_EQ(StrRepr("caf\xc3\xa9 \xf0\x9f\x98\x80"), "'caf\xc3\xa9 \xf0\x9f\x98\x80'");  // printable: kept
  EXPECT_EQ(StrRepr("zw\xe2\x80\x8bj \xc2\xa0"), "'zw\\u200bj \\xa0'");                 // ZWSP, NBSP
  EXPECT_EQ(StrRepr("\xf3\xa0\x80\x81"), "'\\U000e0001'");                              // a tag character
}

TEST(JinjaPyStrTest, SplitFamilyMatchesPython) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Strings(Split(T("  a b\t\nc  "), std::nullopt, -1)), (V{"a", "b", "c"}));
  EXPECT_EQ(Strings(Split(T("  a  b c "), std::nullopt, 1)), (V{"a", "b c "}));
  EXPECT_EQ(Strings(Split(T("a,b,,c"), ",", -1)), (V{"a", "b", "", "c"}));
  EXPECT_EQ(Strings(Split(T(""), ",", -1)), (V{""}));
  EXPECT_EQ(Strings(Split(T(""), std::nullopt, -1)), (V{}));
  EXPECT_EQ(Strings(RSplit(T("a,b,c"), ",", 1)), (V{"a,b", "c"}));
  EXPECT_EQ(Strings(RSplit(T("  a b  c  "), std::nullopt, 1)), (V{"  a b", "c"}));
  EXPECT_EQ(Strings(SplitLines(T("a\r\nb\rc\n\nd\xe2\x80\xa8" "e"), false)), (V{"a", "b", "c", "", "d", "e"}));
  EXPECT_EQ(Strings(SplitLines(T("a\r\nb\n"), true)), (V{"a\r\n", "b\n"}));
}

TEST(JinjaPyStrTest, StripUsesPythonWhitespace) {
  EXPECT_EQ(Bytes(Strip(T("\xe3\x80\x80 \t\n\x0b\x0c\x1c x y \xc2\xa0\xc2\x85"), std::nullopt, true, true)), "x y");
  EXPECT_EQ(Bytes(Strip(T("\xe2\x80\x8bx"), std::nullopt, true, true)), "\xe2\x80\x8bx");  // ZWSP is not space
  EXPECT_EQ(Bytes(Strip(T("xxhixx"), std::string("x"), true, false)), "hixx");
  EXPECT_EQ(Bytes(Strip(T("\xc3\xa9" "a\xc3\xa9"), std::string("\xc3\xa9"), true, true)), "a");
}

TEST(JinjaPyStrTest, CaseMappingMatchesPython) {
  EXPECT_EQ(Bytes(Upper(T("stra\xc3\x9f" "e \xef\xac\x81"))), "STRASSE FI");  // ß -> SS, ﬁ -> FI
  EXPECT_EQ(Bytes(Lower(T("\xc4\xb0"))), "i\xcc\x87");                         // İ -> i + dot
  // Final sigma: Σ at the end of a word lowers to ς, elsewhere to σ.
  EXPECT_EQ(Bytes(Lower(T("\xce\xa3\xce\x91\xce\xa3 \xce\xa3"))), "\xcf\x83\xce\xb1\xcf\x82 \xcf\x83");
  EXPECT_EQ(Bytes(Title(T("hello wORLD o'neil"))), "Hello World O'Neil");
  EXPECT_EQ(Bytes(Capitalize(T("hELLO World"))), "Hello world");
  EXPECT_TRUE(IsLower("abc1"));
  EXPECT_FALSE(IsLower("aBc"));
  EXPECT_FALSE(IsLower("123"));
  EXPECT_TRUE(IsUpper("ABC \xc3\x89"));
}

TEST(JinjaPyStrTest, FindCountReplaceByCodePoint) {
  EXPECT_EQ(Find("h\xc3\xa9llo w\xc3\xb6rld", "o", std::nullopt, std::nullopt, false), 4);
  EXPECT_EQ(Find("h\xc3\xa9llo w\xc3\xb6rld", "l", std::nullopt, std::nullopt, true), 9);
  EXPECT_EQ(Find("hello", "l", 4, std::nullopt, false), -1);
  EXPECT_EQ(Find("hello", "", -2, std::nullopt, false), 3);
  EXPECT_EQ(Count("aaaa", "aa"), 2);
  EXPECT_EQ(Count("\xc3\xa9\xc3\xa9", ""), 3);
  EXPECT_EQ(Bytes(Replace(T("abc"), "", T("-"), -1)), "-a-b-c-");
  EXPECT_EQ(Bytes(Replace(T("aaa"), "a", T("b"), 2)), "bba");
}

TEST(JinjaPyStrTest, CodePointSpansIndexLikePython) {
  using Span = std::optional<std::pair<size_t, size_t>>;
  EXPECT_TRUE(IsAscii(""));
  EXPECT_TRUE(IsAscii("hello\x7f"));
  EXPECT_FALSE(IsAscii(std::string(1000, 'a') + "\xc3\xa9"));
  EXPECT_EQ(CodePointSpan("hello", 0), Span({0, 1}));
  EXPECT_EQ(CodePointSpan("hello", -1), Span({4, 1}));
  EXPECT_EQ(CodePointSpan("hello", -5), Span({0, 1}));
  EXPECT_EQ(CodePointSpan("hello", 5), std::nullopt);
  EXPECT_EQ(CodePointSpan("hello", -6), std::nullopt);
  EXPECT_EQ(CodePointSpan("", 0), std::nullopt);
  EXPECT_EQ(CodePointSpan("", -1), std::nullopt);
  const std::string s = "h\xc3\xa9\xf0\x9f\x99\x82!";  // h, é (2 bytes), 🙂 (4 bytes), !
  EXPECT_EQ(CodePointSpan(s, 1), Span({1, 2}));
  EXPECT_EQ(CodePointSpan(s, 2), Span({3, 4}));
  EXPECT_EQ(CodePointSpan(s, 3), Span({7, 1}));
  EXPECT_EQ(CodePointSpan(s, 4), std::nullopt);
  EXPECT_EQ(CodePointSpan(s, -2), Span({3, 4}));
  EXPECT_EQ(CodePointSpan(s, -4), Span({0, 1}));
  EXPECT_EQ(CodePointSpan(s, -5), std::nullopt);
  EXPECT_EQ(CodePointSpan(s, INT64_MIN), std::nullopt);
  EXPECT_EQ(CodePointSpan(s, INT64_MAX), std::nullopt);
  const std::string bad = "a\xff\xc3(";  // each invalid byte is one code point
  EXPECT_EQ(CodePointSpan(bad, 1), Span({1, 1}));
  EXPECT_EQ(CodePointSpan(bad, 2), Span({2, 1}));
  EXPECT_EQ(CodePointSpan(bad, -1), Span({3, 1}));
  // Every index of every string agrees with the offset table: these, and random strings of
  // ASCII, lead, continuation and invalid bytes (walking back must cut them as decoding forward does).
  std::vector<std::string> texts = {s, bad, "abc", "\xe2\x82", "\xe2\x82\x82\xac", "\xf0\xe2\x82\xac", "\xc3\xa9\xa9"};
  uint32_t state = 12345;
  const unsigned char alphabet[] = {'a', 0x80, 0x82, 0xa9, 0xbf, 0xc0, 0xc3, 0xe2, 0xed, 0xf0, 0xf4, 0xf8, 0xff};
  for (int n = 0; n < 2000; ++n) {
    std::string t;
    for (int len = n % 12; len > 0; --len) {
      state = state * 1664525u + 1013904223u;
      t += static_cast<char>(alphabet[(state >> 16) % sizeof alphabet]);
    }
    texts.push_back(t);
  }
  for (const std::string& text : texts) {
    const std::vector<size_t> offsets = CodePointOffsets(text);
    const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
    EXPECT_EQ(CodePointCount(text), static_cast<size_t>(n));
    for (int64_t i = -n - 2; i < n + 2; ++i) {
      const int64_t k = i < 0 ? i + n : i;
      const Span want = k >= 0 && k < n ? Span({offsets[k], offsets[k + 1] - offsets[k]}) : std::nullopt;
      ASSERT_EQ(CodePointSpan(text, i), want) << i << " in " << StrRepr(text);
    }
  }
}

TEST(JinjaPyStrTest, InvalidUtf8NeverBreaks) {
  const std::string bad = "a\xff\xc3(b\xe2\x82";
  EXPECT_EQ(CodePointCount(bad), 7u);
  EXPECT_EQ(Bytes(Upper(T(bad))), "A\xff\xc3(B\xe2\x82");
  EXPECT_EQ(StrRepr(bad), "'a\\xff\\xc3(b\\xe2\\x82'");
}

}  // namespace
}  // namespace gk::jinja::py
