// Test support (included by *_test.cc only): a small tokenizer.json with Gemma's control-token
// layout, so chat templates and the server can be tested without the 262k-entry real file.
// Ids 0-3 <pad> <eos> <bos> <unk>; the Gemma control tokens at their slots (<|turn> 105,
// <turn|> 106, ...) under Gemma 4 or Gemma 3 names; "\n" 107; byte tokens <0x00>.. from 108;
// then "▁" and single letters. No merges: text falls back to single characters and bytes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/gemma4_tokens.h"
#include "formats/tokenizer.h"

namespace gk {

inline Tokenizer LayoutTokenizer(bool gemma4_names) {
  using json = nlohmann::json;
  json vocab = json::object();
  json added = json::array();
  auto add = [&](int id, const std::string& piece, bool special) {
    vocab[piece] = id;
    added.push_back({{"id", id}, {"content", piece}, {"special", special}});
  };
  const char* names[] = {"<pad>", "<eos>", "<bos>", "<unk>"};
  for (int id = 0; id < 4; ++id) add(id, names[id], true);
  const auto controls = Gemma4ControlTokens();
  for (int id = 4; id < 107; ++id) {
    std::string piece = "<unused" + std::to_string(id - 6) + ">";
    bool special = false;
    if (auto t = std::find_if(controls.begin(), controls.end(), [&](const Gemma4ControlToken& c) { return c.id == id; });
        t != controls.end()) {
      piece = std::string(gemma4_names ? t->gemma4_name : t->gemma3_name);
      special = gemma4_names || id >= 105;  // Gemma 3 files mark only the turn markers special
    }
    add(id, piece, special);
  }
  add(107, "\n", false);
  int id = 108;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = id++;
  }
  for (const char* p : {"\xE2\x96\x81", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n",
                        "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "H", "<", ">", "|", "!", "."}) {
    vocab[p] = id++;
  }
  const json j = {
      {"added_tokens", added},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"vocab", vocab},
                 {"merges", json::array()}}},
  };
  auto tok = Tokenizer::FromJson(j.dump(), "layout.json");
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

}  // namespace gk
