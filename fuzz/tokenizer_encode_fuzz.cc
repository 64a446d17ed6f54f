// libFuzzer target for encoding and decoding (src/formats/tokenizer.h) with a small fixed
// tokenizer: byte 0 picks the mode, the rest is the text. Valid UTF-8 without U+2581 (the
// metaspace, which decodes to a space) must come back unchanged from Decode(Encode(text)) when
// special-token spellings stay text; a streaming decode must equal the whole decode. The
// bytes are also decoded as a list of ids.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "server/openai_request.h"  // IsValidUtf8

using namespace gk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Tokenizer& tok = fuzz::SmallTokenizer();
  const bool as_text = data[0] & 1, skip_special = data[0] & 2;
  const std::string_view text = fuzz::AsText(data + 1, size - 1);
  const std::vector<int32_t> ids = tok.Encode(text, as_text ? SpecialTokenText::kAsText : SpecialTokenText::kParse);
  for (int32_t id : ids) fuzz::Check(id >= 0 && id < tok.vocab_size());
  const std::string decoded = tok.Decode(ids, skip_special);
  if (as_text && !skip_special && server::IsValidUtf8(text) && text.find("\xe2\x96\x81") == std::string_view::npos) {
    fuzz::Check(decoded == text);
  }
  StreamingDecoder stream(tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.Add(id);
  streamed += stream.Flush();
  fuzz::Check(streamed == decoded);
  // The raw bytes as ids (4 bytes each): unknown and negative ids decode to nothing.
  std::vector<int32_t> raw((size - 1) / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data + 1, raw.size() * 4);
  (void)tok.Decode(raw, skip_special);
  return 0;
}
