// SentencePiece ModelProto bytes written by hand (varints, length-delimited and 32-bit fields),
// for the parser's tests, the GGUF export's tests and the fuzz target's round trip.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "formats/sentencepiece_model.h"

namespace gk::spm_test {

struct ProtoWriter {
  std::string bytes;
  void Varint(uint64_t v) {
    do {
      const uint8_t byte = v & 0x7f;
      v >>= 7;
      bytes += char(byte | (v ? 0x80 : 0));
    } while (v);
  }
  void Key(uint64_t field, int wire) { Varint(field << 3 | uint64_t(wire)); }
  void Bytes(uint64_t field, std::string_view s) {
    Key(field, 2);
    Varint(s.size());
    bytes += s;
  }
  void Float(uint64_t field, float f) {
    Key(field, 5);
    char b[4];
    std::memcpy(b, &f, 4);
    bytes.append(b, 4);
  }
  void Enum(uint64_t field, uint64_t v) {
    Key(field, 0);
    Varint(v);
  }
};

// ModelProto.SentencePiece {piece = 1, score = 2, type = 3}.
inline std::string PieceMessage(const SpmPiece& p) {
  ProtoWriter w;
  w.Bytes(1, p.piece);
  w.Float(2, p.score);
  w.Enum(3, uint64_t(p.type));
  return w.bytes;
}

// A ModelProto holding these pieces (field 1) and nothing else.
inline std::string ModelBytes(const std::vector<SpmPiece>& pieces) {
  ProtoWriter w;
  for (const SpmPiece& p : pieces) w.Bytes(1, PieceMessage(p));
  return w.bytes;
}

}  // namespace gk::spm_test
