#include "server/text_stream.h"

#include <gtest/gtest.h>

#include "server/server_test_util.h"

namespace gk::server {
namespace {

using testing::ByteId;
using testing::Id;
using testing::TestTokenizer;

std::string Feed(StopStringFilter& f, const std::vector<std::string>& pieces, std::vector<std::string>* deltas) {
  std::string out;
  for (const std::string& p : pieces) {
    deltas->push_back(f.Add(p));
    out += deltas->back();
    if (f.stopped()) break;
  }
  out += f.Finish();
  return out;
}

TEST(StopStringFilterTest, NoStopsPassesTextThrough) {
  StopStringFilter f({}, false);
  EXPECT_EQ(f.Add("abc"), "abc");
  EXPECT_EQ(f.Finish(), "");
  EXPECT_FALSE(f.stopped());
}

TEST(StopStringFilterTest, StopAcrossPiecesTruncatesBeforeIt) {
  StopStringFilter f({"STOP"}, false);
  std::vector<std::string> d;
  EXPECT_EQ(Feed(f, {"ab", "cS", "T", "OPxyz"}, &d), "abc");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched_stop(), "STOP");
  // "S" and "T" were held back (they could begin STOP), never emitted then retracted.
  EXPECT_EQ(d, (std::vector<std::string>{"ab", "c", "", ""}));
}

TEST(StopStringFilterTest, IncludeStopInOutput) {
  StopStringFilter f({"\n\n"}, true);
  std::vector<std::string> d;
  EXPECT_EQ(Feed(f, {"line\n", "\nmore"}, &d), "line\n\n");
  EXPECT_EQ(f.matched_stop(), "\n\n");
}

TEST(StopStringFilterTest, HeldBackTextIsReleasedWhenItCannotMatch) {
  StopStringFilter f({"abc"}, false);
  EXPECT_EQ(f.Add("xa"), "x");
  EXPECT_EQ(f.Add("b"), "");
  EXPECT_EQ(f.Add("d"), "abd");
  EXPECT_EQ(f.Add("ab"), "");
  EXPECT_EQ(f.Finish(), "ab");  // the end releases what was held
  EXPECT_FALSE(f.stopped());
}

TEST(StopStringFilterTest, EarliestOfSeveralStopsWins) {
  StopStringFilter f({"world", "lo w"}, false);
  std::vector<std::string> d;
  EXPECT_EQ(Feed(f, {"hello world"}, &d), "hel");
  EXPECT_EQ(f.matched_stop(), "lo w");
}

TEST(StopStringFilterTest, OverlappingPrefixes) {
  StopStringFilter f({"aab"}, false);
  std::vector<std::string> d;
  EXPECT_EQ(Feed(f, {"a", "a", "a", "b", "c"}, &d), "a");
}

TEST(StopStringFilterTest, MultiByteStopStringHoldsBackWholeCharacters) {
  StopStringFilter f({"\xC3\xA9t\xC3\xA9"}, false);  // "été"
  EXPECT_EQ(f.Add("caf\xC3\xA9"), "caf");             // "é" could begin "été"
  EXPECT_EQ(f.Add("!"), "\xC3\xA9!");
}

TEST(TextStreamTest, MultiByteCharacterSplitOverByteTokensIsNeverSplit) {
  // "é" = C3 A9 and "€" = E2 82 AC as byte-fallback tokens.
  TextStream t(TestTokenizer(), true, {}, false);
  EXPECT_EQ(t.Add(Id("a")), "a");
  EXPECT_EQ(t.Add(ByteId(0xC3)), "");
  EXPECT_EQ(t.Add(ByteId(0xA9)), "\xC3\xA9");
  EXPECT_EQ(t.Add(ByteId(0xE2)), "");
  EXPECT_EQ(t.Add(ByteId(0x82)), "");
  EXPECT_EQ(t.Add(ByteId(0xAC)), "\xE2\x82\xAC");
  EXPECT_EQ(t.Add(ByteId(0xE2)), "");
  EXPECT_EQ(t.Finish(), "\xEF\xBF\xBD");  // an unfinished character at the end becomes U+FFFD
}

TEST(TextStreamTest, StopStringAcrossTokens) {
  TextStream t(TestTokenizer(), true, {"lo w"}, false);
  std::string out;
  for (const char* p : {"h", "e", "l", "l", "o", " ", "w", "o"}) {
    out += t.Add(Id(p));
    if (t.stopped()) break;
  }
  out += t.Finish();
  EXPECT_EQ(out, "hel");
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.matched_stop(), "lo w");
  EXPECT_EQ(t.Add(Id("x")), "");  // nothing after a stop
}

TEST(TextStreamTest, StopStringInsideAMultiByteSequence) {
  TextStream t(TestTokenizer(), true, {"\xC3\xA9"}, false);
  EXPECT_EQ(t.Add(Id("a")), "a");
  EXPECT_EQ(t.Add(ByteId(0xC3)), "");
  EXPECT_EQ(t.Add(ByteId(0xA9)), "");
  EXPECT_TRUE(t.stopped());
}

TEST(TextStreamTest, SkipsSpecialTokensWhenAsked) {
  TextStream skip(TestTokenizer(), true, {}, false);
  EXPECT_EQ(skip.Add(1), "");  // <eos>
  TextStream keep(TestTokenizer(), false, {}, false);
  EXPECT_EQ(keep.Add(1), "<eos>");
}

}  // namespace
}  // namespace gk::server
