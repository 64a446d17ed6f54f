// libFuzzer target for POST /v1/completions bodies (src/server/openai_request.h): the input is
// the body. Text prompts of a body that parses are encoded (a small fixed tokenizer) and the
// context-length check runs; a rejected body must be a 400 with a message that serialises.
#include <cstdint>

#include "fuzz_util.h"
#include "server/openai_request.h"

using namespace gk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  server::OpenAIRequest r;
  if (auto e = server::ParseOpenAIRequest(fuzz::AsText(data, size), server::ApiKind::kCompletion, &r)) {
    fuzz::Check(e->status == 400 && !e->message.empty());
    (void)e->Body();
    return 0;
  }
  fuzz::Check(!r.prompts.empty() && r.n >= 1);
  for (const server::PromptInput& p : r.prompts) {
    const int64_t n = p.is_tokens ? int64_t(p.tokens.size()) : int64_t(fuzz::SmallTokenizer().Encode(p.text).size());
    int64_t max_tokens = 0;
    if (auto e = server::CheckContextLength(r, n, 4096, &max_tokens)) {
      (void)e->Body();
    } else {
      fuzz::Check(max_tokens >= 1 && max_tokens <= 4096 - n);
    }
  }
  return 0;
}
