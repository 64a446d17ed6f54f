#include "formats/sentencepiece_model.h"

#include <cstdint>
#include <cstring>

#include "util/guarded_parse.h"

namespace gk {

namespace {

// Protobuf's base-128 varint: at most 10 bytes; false when it runs past `end`.
bool ReadVarint(const uint8_t*& p, const uint8_t* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const uint8_t b = *p++;
    *v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Skips a field of this wire type (varint, 64-bit, length-delimited, 32-bit); false when it
// does not fit or the wire type is a group or invalid (sentencepiece_model.proto has no groups).
bool SkipField(const uint8_t*& p, const uint8_t* end, uint64_t wire) {
  uint64_t n = 0;
  switch (wire) {
    case 0: return ReadVarint(p, end, &n);
    case 1: if (end - p < 8) return false; p += 8; return true;
    case 2: if (!ReadVarint(p, end, &n) || uint64_t(end - p) < n) return false; p += n; return true;
    case 5: if (end - p < 4) return false; p += 4; return true;
    default: return false;
  }
}

Result<std::vector<SpmPiece>> ParseUnguarded(std::string_view bytes, const std::string& origin, size_t max_pieces) {
  using R = Result<std::vector<SpmPiece>>;
  const auto* begin = reinterpret_cast<const uint8_t*>(bytes.data());
  auto bad = [&](const uint8_t* at) {
    return R::Error(StrCat(origin, ": not a SentencePiece model (damaged protobuf at byte ", at - begin, ")"));
  };
  std::vector<SpmPiece> out;
  const uint8_t* p = begin;
  const uint8_t* end = begin + bytes.size();
  while (p < end) {
    const uint8_t* at = p;
    uint64_t key;
    if (!ReadVarint(p, end, &key)) return bad(at);
    if ((key >> 3) != 1 || (key & 7) != 2) {  // not ModelProto.pieces
      if (!SkipField(p, end, key & 7)) return bad(at);
      continue;
    }
    uint64_t len;
    if (!ReadVarint(p, end, &len) || uint64_t(end - p) < len) return bad(at);
    const uint8_t* q = p;
    const uint8_t* qend = p + len;
    p = qend;
    SpmPiece piece;
    while (q < qend) {
      const uint8_t* qat = q;
      uint64_t k;
      if (!ReadVarint(q, qend, &k)) return bad(qat);
      const uint64_t field = k >> 3, wire = k & 7;
      if (field == 1 && wire == 2) {
        uint64_t n;
        if (!ReadVarint(q, qend, &n) || uint64_t(qend - q) < n) return bad(qat);
        piece.piece.assign(reinterpret_cast<const char*>(q), n);
        q += n;
      } else if (field == 2 && wire == 5) {
        if (qend - q < 4) return bad(qat);
        std::memcpy(&piece.score, q, 4);
        q += 4;
      } else if (field == 3 && wire == 0) {
        uint64_t t;
        if (!ReadVarint(q, qend, &t)) return bad(qat);
        const int32_t type = static_cast<int32_t>(static_cast<uint32_t>(t));  // an int32 enum
        if (type >= 1 && type <= 6) piece.type = type;
      } else if (!SkipField(q, qend, wire)) {
        return bad(qat);
      }
    }
    if (out.size() == max_pieces) {
      return R::Error(StrCat(origin, ": a SentencePiece model with more than ", max_pieces, " pieces"));
    }
    out.push_back(std::move(piece));
  }
  if (out.empty()) return R::Error(StrCat(origin, ": a SentencePiece model with no pieces"));
  return out;
}

}  // namespace

Result<std::vector<SpmPiece>> ParseSentencePieceModel(std::string_view bytes, const std::string& origin,
                                                      size_t max_pieces) {
  return GuardedParse(origin, [&] { return ParseUnguarded(bytes, origin, max_pieces); });
}

}  // namespace gk
