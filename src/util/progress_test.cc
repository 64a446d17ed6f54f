#include "util/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace gk {
namespace {

std::string Read(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

int Count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

// Not a terminal: a line per file and per tenth of the bytes, then the totals; tracked fills
// count bytes and tensors only when they succeed.
TEST(ConversionProgress, LinesPerFileAndTenthWithoutATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ConversionProgress p("merge", f, /*tty=*/0);
    p.AddWork(1000, 10);
    auto ok = p.Track([](uint8_t*, size_t) { return Status::Ok(); });
    auto bad = p.Track([](uint8_t*, size_t) { return Status::Error("disk full"); });
    uint8_t buf[100];
    EXPECT_FALSE(bad(buf, 100).ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(ok(buf, 100).ok());
    p.FileDone("out/model-00001-of-00002.safetensors");
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(ok(buf, 100).ok());
    p.FileDone("out/model-00002-of-00002.safetensors");
    p.Finish();
  }
  const std::string out = Read(f);
  std::fclose(f);
  EXPECT_EQ(Count(out, "merge: wrote out/model-0000"), 2) << out;
  EXPECT_NE(out.find("wrote out/model-00001-of-00002.safetensors (500 B / 1 kB, 5/10 tensors"), std::string::npos) << out;
  EXPECT_NE(out.find("merge: done, 1 kB / 1 kB, 10/10 tensors"), std::string::npos) << out;
  EXPECT_EQ(Count(out, "0%,"), 9) << out;  // 10 % ... 90 %
  EXPECT_EQ(out.find('\r'), std::string::npos);
}

// A terminal: one line redrawn in place, ending with a newline.
TEST(ConversionProgress, OneRedrawnBarOnATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ConversionProgress p("quantize", f, /*tty=*/1);
    p.AddWork(2e9, 2);
    p.TensorDone(1e9);
    p.FileDone("x");
    p.TensorDone(1e9);
    p.Finish();
  }
  const std::string out = Read(f);
  std::fclose(f);
  EXPECT_EQ(Count(out, "\n"), 1) << out;
  EXPECT_GE(Count(out, "\r"), 2) << out;
  EXPECT_NE(out.find("[############............]  50% 1.00 GB / 2.00 GB, 1/2 tensors"), std::string::npos) << out;
  EXPECT_NE(out.find("100% 2.00 GB / 2.00 GB, 2/2 tensors"), std::string::npos) << out;
}

TEST(ConversionProgress, HumanUnits) {
  EXPECT_EQ(HumanBytes(62.1e9), "62.10 GB");
  EXPECT_EQ(HumanBytes(512e6), "512 MB");
  EXPECT_EQ(HumanDuration(3725), "1h02m");
  EXPECT_EQ(HumanDuration(187), "3m07s");
  EXPECT_EQ(HumanDuration(12.4), "12s");
}

}  // namespace
}  // namespace gk
