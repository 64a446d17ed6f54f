#include "formats/sentencepiece_model.h"

#include <gtest/gtest.h>

#include "formats/sentencepiece_model_test_util.h"

namespace gk {
namespace {

using spm_test::ModelBytes;
using spm_test::PieceMessage;
using spm_test::ProtoWriter;

TEST(SentencePieceModelTest, ReadsPiecesInOrderAndSkipsTheRest) {
  ProtoWriter w;
  w.Bytes(2, "trainer_spec: skipped");
  w.Bytes(1, PieceMessage({"<unk>", 0.f, 2}));
  w.Key(9, 0);  // unknown fields of every wire type protobuf skips
  w.Varint(300);
  w.Key(10, 1);
  w.bytes.append(8, '\x01');
  w.Float(11, 1.f);
  w.Bytes(1, PieceMessage({"\xe2\x96\x81the", -3.25f, 1}));
  w.Bytes(1, PieceMessage({"<0x0A>", 0.f, 6}));
  auto pieces = ParseSentencePieceModel(w.bytes, "tokenizer.model");
  ASSERT_TRUE(pieces.ok()) << pieces.message();
  ASSERT_EQ(pieces->size(), 3u);
  EXPECT_EQ((*pieces)[0].piece, "<unk>");
  EXPECT_EQ((*pieces)[0].type, 2);
  EXPECT_EQ((*pieces)[1].piece, "\xe2\x96\x81the");
  EXPECT_EQ((*pieces)[1].score, -3.25f);
  EXPECT_EQ((*pieces)[1].type, 1);
  EXPECT_EQ((*pieces)[2].type, 6);
}

TEST(SentencePieceModelTest, FieldsDecodeAsProtobufDecodesThem) {
  ProtoWriter piece;
  piece.Bytes(1, "first");
  piece.Bytes(1, "last");  // a repeated scalar field: the last one wins
  piece.Enum(3, 3);
  piece.Enum(3, 9);  // not in the enum: kept aside, so the type stays CONTROL
  piece.Key(4, 2);  // unknown field inside the piece
  piece.Varint(0);
  ProtoWriter high;
  high.Bytes(1, "high");
  high.Enum(3, (uint64_t{1} << 32) | 5);  // an int32 enum keeps the low 32 bits: UNUSED
  ProtoWriter negative;
  negative.Bytes(1, "negative");
  negative.Enum(3, uint64_t(-1));  // -1: not in the enum, the default NORMAL stays
  ProtoWriter model;
  for (const ProtoWriter* p : {&piece, &high, &negative}) model.Bytes(1, p->bytes);
  model.Bytes(1, "");  // an empty piece message: all defaults
  auto pieces = ParseSentencePieceModel(model.bytes, "t.model");
  ASSERT_TRUE(pieces.ok()) << pieces.message();
  ASSERT_EQ(pieces->size(), 4u);
  EXPECT_EQ((*pieces)[0].piece, "last");
  EXPECT_EQ((*pieces)[0].type, 3);
  EXPECT_EQ((*pieces)[1].type, 5);
  EXPECT_EQ((*pieces)[2].type, 1);
  EXPECT_EQ((*pieces)[3].piece, "");
  EXPECT_EQ((*pieces)[3].score, 0.f);
  EXPECT_EQ((*pieces)[3].type, 1);
}

TEST(SentencePieceModelTest, DamagedFilesAreOneErrorNamingTheByte) {
  const std::string good = ModelBytes({{"a", 0.f, 1}, {"b", -1.f, 1}});
  ASSERT_TRUE(ParseSentencePieceModel(good, "t.model").ok());
  // Every truncation of a good file is refused, except at a piece boundary.
  const size_t boundary = good.size() / 2;
  for (size_t n = 1; n < good.size(); ++n) {
    auto r = ParseSentencePieceModel(good.substr(0, n), "t.model");
    EXPECT_EQ(r.ok(), n == boundary) << n;
    if (!r.ok()) EXPECT_TRUE(r.message().starts_with("t.model: not a SentencePiece model (damaged protobuf at byte ")) << r.message();
  }
  EXPECT_EQ(ParseSentencePieceModel(std::string("\x0a\x05""ab", 4), "t.model").message(),
            "t.model: not a SentencePiece model (damaged protobuf at byte 0)");
  EXPECT_EQ(ParseSentencePieceModel(good + "\x0b", "t.model").message(),  // a group (wire type 3)
            "t.model: not a SentencePiece model (damaged protobuf at byte " + std::to_string(good.size()) + ")");
  EXPECT_EQ(ParseSentencePieceModel(good + std::string(11, '\xff'), "t.model").message(),  // an 11-byte varint
            "t.model: not a SentencePiece model (damaged protobuf at byte " + std::to_string(good.size()) + ")");
  ProtoWriter inner_bad;  // a piece whose string runs past the piece
  inner_bad.Key(1, 2);
  inner_bad.Varint(50);
  ProtoWriter model;
  model.Bytes(1, inner_bad.bytes);
  EXPECT_EQ(ParseSentencePieceModel(model.bytes, "t.model").message(),
            "t.model: not a SentencePiece model (damaged protobuf at byte 2)");
}

TEST(SentencePieceModelTest, NoPiecesOrTooManyAreRefused) {
  EXPECT_EQ(ParseSentencePieceModel("", "t.model").message(), "t.model: a SentencePiece model with no pieces");
  ProtoWriter only_spec;
  only_spec.Bytes(2, "trainer_spec");
  EXPECT_EQ(ParseSentencePieceModel(only_spec.bytes, "t.model").message(),
            "t.model: a SentencePiece model with no pieces");
  const std::string three = ModelBytes({{"a", 0.f, 1}, {"b", 0.f, 1}, {"c", 0.f, 1}});
  EXPECT_TRUE(ParseSentencePieceModel(three, "t.model", 3).ok());
  EXPECT_EQ(ParseSentencePieceModel(three, "t.model", 2).message(),
            "t.model: a SentencePiece model with more than 2 pieces");
}

}  // namespace
}  // namespace gk
