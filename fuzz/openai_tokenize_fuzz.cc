// libFuzzer target for POST /tokenize and /detokenize bodies (src/server/openai_request.h): the
// input is a body, given to both parsers. What parses is tokenized (text or chat template) or
// detokenized with a small fixed tokenizer, as the server would.
#include <cstdint>

#include "formats/chat_format.h"
#include "fuzz_util.h"
#include "server/openai_request.h"

using namespace gk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body = fuzz::AsText(data, size);
  const Tokenizer& tok = fuzz::SmallTokenizer();
  server::TokenizeRequest t;
  if (auto e = server::ParseTokenizeRequest(body, &t)) {
    fuzz::Check(e->status == 400 && !e->message.empty());
    (void)e->Body();
  } else if (t.is_chat) {
    fuzz::CheckRendered(fuzz::InitChatFormat().Apply(tok, t.chat));
    fuzz::CheckRendered(ChatFormat::Builtin(BuiltinChat::kGemma4).Apply(tok, t.chat));
  } else {
    (void)tok.Encode(t.prompt);
  }
  server::DetokenizeRequest d;
  if (auto e = server::ParseDetokenizeRequest(body, &d)) {
    fuzz::Check(e->status == 400 && !e->message.empty());
    (void)e->Body();
  } else {
    (void)tok.Decode(d.tokens);
    (void)tok.Decode(d.tokens, /*skip_special=*/true);
  }
  return 0;
}
