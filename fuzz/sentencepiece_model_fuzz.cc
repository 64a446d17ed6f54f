// libFuzzer target for the SentencePiece model reader (src/formats/sentencepiece_model.h): the
// input is a whole `tokenizer.model`. A model that parses is written back as a ModelProto and
// must parse to the same pieces (text, score bits, a type in the enum).
#include <cstdint>
#include <cstring>
#include <string>

#include "formats/sentencepiece_model.h"
#include "formats/sentencepiece_model_test_util.h"
#include "fuzz_util.h"

namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gk::fuzz::Check;
  auto pieces = gk::ParseSentencePieceModel(gk::fuzz::AsText(data, size), "tokenizer.model");
  if (!pieces.ok()) {
    Check(pieces.message().starts_with("tokenizer.model: "));
    return 0;
  }
  Check(!pieces->empty());
  for (const gk::SpmPiece& p : *pieces) Check(p.type >= 1 && p.type <= 6);
  auto again = gk::ParseSentencePieceModel(gk::spm_test::ModelBytes(*pieces), "again");
  Check(again.ok() && again->size() == pieces->size());
  for (size_t i = 0; i < pieces->size(); ++i) {
    const gk::SpmPiece &a = (*pieces)[i], &b = (*again)[i];
    Check(a.piece == b.piece && Bits(a.score) == Bits(b.score) && a.type == b.type);
  }
  return 0;
}
