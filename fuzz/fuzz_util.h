// Shared helpers of the libFuzzer targets (fuzz/*_fuzz.cc): files for parsers that read paths,
// inputs split into parts, and a small fixed tokenizer for the targets that need one.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/chat_format.h"
#include "formats/gemma4_tokens.h"
#include "formats/tokenizer.h"

namespace gk::fuzz {

// Aborts (a crash libFuzzer reports) when an invariant the target checks is broken.
inline void Check(bool cond) {
  if (!cond) std::abort();
}

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A directory of this process's own under /tmp, emptied on each call and removed at exit.
inline const std::string& FreshDir(const char* name) {
  static const std::string dir = [&] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all("/tmp/gk_fuzz_" + std::to_string(::getpid()), ec);
    });
    return "/tmp/gk_fuzz_" + std::to_string(::getpid()) + "/" + name;
  }();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  return dir;
}

inline void WriteBytes(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  Check(f != nullptr);
  if (!bytes.empty()) Check(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  Check(std::fclose(f) == 0);
}

// Splits at NUL bytes into at most `n` parts (the last part keeps any further NULs).
inline std::vector<std::string_view> SplitNul(std::string_view s, size_t n) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < n) {
    const size_t p = s.find('\0');
    if (p == std::string_view::npos) break;
    parts.push_back(s.substr(0, p));
    s.remove_prefix(p + 1);
  }
  parts.push_back(s);
  return parts;
}

// A small Gemma-like tokenizer.json: <pad> <eos> <bos> <unk>, the 256 byte pieces, a few
// merges, Gemma 4 chat control tokens as special added tokens, and the metaspace pipeline.
inline std::string SmallTokenizerJson() {
  using json = nlohmann::json;
  const std::string meta = "\xe2\x96\x81";  // U+2581
  json vocab = json::object();
  int id = 0;
  for (const char* p : {"<pad>", "<eos>", "<bos>", "<unk>"}) vocab[p] = id++;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = id++;
  }
  for (const std::string& p : {meta, std::string("a"), std::string("b"), std::string("h"), std::string("e"),
                               std::string("l"), std::string("o"), std::string("\n"), std::string("he"),
                               std::string("ll"), std::string("hell"), std::string("hello"), meta + "hello",
                               std::string("ab"), meta + meta, std::string("user"), std::string("model")}) {
    vocab[p] = id++;
  }
  const json merges = json::array({"l l", "h e", "he ll", json::array({"hell", "o"}), json::array({meta, "hello"}),
                                   "a b", json::array({meta, meta})});
  json added = json::array();
  auto add = [&](int tid, const std::string& content, bool special) {
    added.push_back({{"id", tid}, {"content", content}, {"special", special}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"single_word", false}});
  };
  for (const char* p : {"<pad>", "<eos>", "<bos>", "<unk>"}) add(vocab[p].get<int>(), p, true);
  int extra = 1000;
  for (const char* p : {"<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>"}) add(extra++, p, true);
  add(extra++, "\n\n", false);
  return json{{"version", "1.0"},
              {"added_tokens", added},
              {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}},
              {"pre_tokenizer",
               {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"},
                {"invert", false}}},
              {"decoder",
               {{"type", "Sequence"},
                {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}},
                                          {{"type", "ByteFallback"}},
                                          {{"type", "Fuse"}}})}}},
              {"model",
               {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true},
                {"vocab", vocab}, {"merges", merges}}}}
      .dump();
}

// The Gemma 4 template `gemmakit init` writes (tools, tool calls, thinking), parsed once.
inline const ChatFormat& InitChatFormat() {
  static const ChatFormat* format = [] {
    auto f = ChatFormat::FromSource({std::string(Gemma4InitChatTemplate()), "init template"});
    Check(f.ok());
    return new ChatFormat(std::move(f).value());
  }();
  return *format;
}

// A rendering either succeeds with ids or fails with a message (a template's raise_exception,
// a reserved chat_template_kwargs key, a tool call the built-in renderer cannot write).
inline void CheckRendered(const Result<std::vector<int32_t>>& ids) {
  Check(ids.ok() ? !ids->empty() : !ids.message().empty());
}

inline const Tokenizer& SmallTokenizer() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::FromJson(SmallTokenizerJson(), "fuzz tokenizer.json");
    Check(t.ok());
    return new Tokenizer(std::move(t).value());
  }();
  return *tok;
}

}  // namespace gk::fuzz
