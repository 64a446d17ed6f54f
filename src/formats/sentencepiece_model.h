// A SentencePiece model file (`tokenizer.model`): the protobuf ModelProto of
// sentencepiece_model.proto. gemmakit reads only its pieces (repeated field 1), for the Gemma 3
// GGUF export, which takes tokens, scores and types from it as llama.cpp's converter does.
// The file comes from outside (a checkpoint's directory), so the parser is fuzzed
// (fuzz/sentencepiece_model_fuzz.cc) and checked against the sentencepiece library itself
// (tests/bridge/sentencepiece_model_oracle_test.py).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gk {

// One ModelProto.SentencePiece.
struct SpmPiece {
  std::string piece;
  float score = 0.f;
  int type = 1;  // sentencepiece_model.proto: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6
};

// The pieces in id order. Everything else in the ModelProto (trainer_spec, normalizer_spec, ...)
// is skipped. Decoded as protobuf does: the last occurrence of a field wins, a type varint keeps
// its low 32 bits, and a type that is not in the enum leaves the piece's type unchanged (proto2
// keeps an unknown enum value aside). A damaged message is an error naming `origin` and the
// byte offset; a model with no pieces, or more than `max_pieces`, is an error. An empty piece is
// 2 bytes of file and some 40 of memory: the cap keeps a crafted file from growing 20-fold
// (real vocabularies: Gemma 3 has 262,144 pieces).
inline constexpr size_t kMaxSentencePieces = size_t{1} << 24;
Result<std::vector<SpmPiece>> ParseSentencePieceModel(std::string_view bytes, const std::string& origin,
                                                      size_t max_pieces = kMaxSentencePieces);

}  // namespace gk
