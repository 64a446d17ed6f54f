#include "tools/bench_serve/sse_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gk::bench {
namespace {

std::vector<std::string> FeedAll(const std::vector<std::string>& pieces, bool* pending = nullptr) {
  SseParser p;
  std::vector<std::string> out;
  for (const auto& piece : pieces) p.Feed(piece, [&](std::string_view d) { out.emplace_back(d); });
  if (pending) *pending = p.pending();
  return out;
}

TEST(SseParserTest, SplitsEventsOnBlankLines) {
  EXPECT_EQ(FeedAll({"data: {\"a\":1}\n\ndata: [DONE]\n\n"}), (std::vector<std::string>{"{\"a\":1}", "[DONE]"}));
}

TEST(SseParserTest, EventsSplitAcrossReadsAndCrlf) {
  // A chunk boundary can fall anywhere, even between \r and \n.
  EXPECT_EQ(FeedAll({"da", "ta: x\r", "\n\r", "\ndata:y\r\n", "\r\n"}), (std::vector<std::string>{"x", "y"}));
}

TEST(SseParserTest, CommentsAndOtherFieldsAreSkipped) {
  EXPECT_EQ(FeedAll({": ping\n\nevent: message\nid: 7\ndata: z\n\n"}), (std::vector<std::string>{"z"}));
}

TEST(SseParserTest, MultiLineDataIsJoined) {
  EXPECT_EQ(FeedAll({"data: a\ndata: b\n\n"}), (std::vector<std::string>{"a\nb"}));
}

TEST(SseParserTest, OnlyOneLeadingSpaceIsRemoved) {
  EXPECT_EQ(FeedAll({"data:  two\n\n"}), (std::vector<std::string>{" two"}));
}

TEST(SseParserTest, UnfinishedEventIsPending) {
  bool pending = false;
  EXPECT_TRUE(FeedAll({"data: x\n"}, &pending).empty());
  EXPECT_TRUE(pending);
  FeedAll({"data: x\n\n"}, &pending);
  EXPECT_FALSE(pending);
}

}  // namespace
}  // namespace gk::bench
