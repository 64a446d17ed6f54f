// Test driver for tests/bridge/sentencepiece_model_oracle_test.py: parses one tokenizer.model
// with gk::ParseSentencePieceModel and prints what it read as JSON:
//   {"pieces": [["<unk>", 0.0, 2], ["▁the", -3.25, 1], ...]}   (piece bytes as latin-1 code points)
//   {"error": "tokenizer.model: not a SentencePiece model (...)"}
// Scores print with 9 significant digits, enough to give back the same float.
//
//   spm_pieces TOKENIZER_MODEL
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "formats/sentencepiece_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: spm_pieces TOKENIZER_MODEL\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "spm_pieces: cannot read %s\n", argv[1]);
    return 2;
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  auto pieces = gk::ParseSentencePieceModel(bytes.str(), "tokenizer.model");
  nlohmann::json out;
  if (!pieces.ok()) {
    out["error"] = pieces.message();
  } else {
    out["pieces"] = nlohmann::json::array();
    for (const gk::SpmPiece& p : *pieces) {
      std::string latin1;  // any bytes, JSON-safe: each byte as the code point of the same value
      for (unsigned char c : p.piece) {
        if (c < 0x80) {
          latin1 += char(c);
        } else {
          latin1 += char(0xC0 | (c >> 6));
          latin1 += char(0x80 | (c & 0x3F));
        }
      }
      char score[32];
      std::snprintf(score, sizeof score, "%.9g", double(p.score));
      out["pieces"].push_back({latin1, score, p.type});
    }
  }
  std::cout << out.dump() << "\n";
  return 0;
}
