#include "formats/orbax/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gk::orbax {
namespace {

// RFC 3720 (iSCSI), appendix B.4: the CRC-32C of 32-byte patterns and of a read PDU.
TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = uint8_t(i);
    down[i] = uint8_t(31 - i);
  }
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(up.data(), up.size()), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down.data(), down.size()), 0x113FDB5Cu);
  const uint8_t pdu[48] = {0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                           0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
                           0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
                           0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(Crc32c(pdu, sizeof(pdu)), 0xD9963A56u);
}

TEST(Crc32cTest, CheckValueAndEmpty) {
  EXPECT_EQ(Crc32c(std::string("123456789")), 0xE3069283u);  // the catalogued check value
  EXPECT_EQ(Crc32c(std::string()), 0u);
}

// Extending piece by piece, at every split point and alignment, equals one pass.
TEST(Crc32cTest, ExtendMatchesOnePass) {
  std::string s;
  for (int i = 0; i < 100; ++i) s.push_back(char(i * 37 + 11));
  const uint32_t whole = Crc32c(s);
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    uint32_t c = Crc32cExtend(0, s.data(), cut);
    c = Crc32cExtend(c, s.data() + cut, s.size() - cut);
    EXPECT_EQ(c, whole) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace gk::orbax
