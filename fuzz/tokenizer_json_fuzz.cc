// libFuzzer target for tokenizer.json loading (src/formats/tokenizer.h): the input is the file.
// A tokenizer that loads must encode and decode (text with added-token spellings, invalid
// UTF-8, every id and a few past the vocabulary) without a crash.
#include <cstdint>
#include <vector>

#include "fuzz_util.h"

using namespace gk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tok = Tokenizer::FromJson(fuzz::AsText(data, size), "fuzz.json");
  if (!tok.ok()) {
    fuzz::Check(!tok.message().empty());
    return 0;
  }
  for (const char* text : {"hello world", " <bos>a\n\nb ", "\xff\xfe x\xe2\x96", ""}) {
    const std::vector<int32_t> ids = tok->Encode(text);
    (void)tok->Encode(text, SpecialTokenText::kAsText);
    (void)tok->Decode(ids);
  }
  std::vector<int32_t> all;
  for (int32_t id = -1; id < std::min<int32_t>(tok->vocab_size() + 2, 4096); ++id) all.push_back(id);
  (void)tok->Decode(all);
  (void)tok->Decode(all, /*skip_special=*/true);
  StreamingDecoder stream(*tok);
  for (int32_t id : all) (void)stream.Add(id);
  (void)stream.Flush();
  return 0;
}
