// libFuzzer target for POST /v1/chat/completions bodies (src/server/openai_request.h): the input
// is the body. A body that parses goes on as in the server: the chat template (the one `init`
// writes, through the Jinja engine, and the built-in ones) over its messages, tools and kwargs
// (a small fixed tokenizer) and the context-length check. A rejected body must be a
// 400 with a message that serialises (error messages quote input verbatim: the HTTP body
// escapes a newline, the CLI prints every message through OneLine).
#include <cstdint>

#include "formats/chat_format.h"
#include "fuzz_util.h"
#include "server/openai_request.h"

using namespace gk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  server::OpenAIRequest r;
  if (auto e = server::ParseOpenAIRequest(fuzz::AsText(data, size), server::ApiKind::kChat, &r)) {
    fuzz::Check(e->status == 400 && !e->message.empty());
    (void)e->Body();
    return 0;
  }
  const auto ids = fuzz::InitChatFormat().Apply(fuzz::SmallTokenizer(), r.chat);
  fuzz::CheckRendered(ids);
  fuzz::CheckRendered(ChatFormat::Builtin(BuiltinChat::kGemma4).Apply(fuzz::SmallTokenizer(), r.chat));
  fuzz::CheckRendered(ChatFormat::Builtin(BuiltinChat::kGemma3).Apply(fuzz::SmallTokenizer(), r.chat));
  if (!ids.ok()) return 0;
  int64_t max_tokens = 0;
  if (auto e = server::CheckContextLength(r, int64_t(ids->size()), 4096, &max_tokens)) (void)e->Body();
  return 0;
}
