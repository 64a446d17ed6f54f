// Where eval samples come from: the in-process serving engine (--model DIR: continuous
// batching, every sample of every problem in flight together) or any OpenAI-compatible server
// (--base-url: /v1/chat/completions, one request per sample, `concurrency` at once). Each
// sample has its own seed, so a run is reproducible where the backend honours seeds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engines/serve/engine.h"
#include "formats/chat_format.h"
#include "formats/tokenizer.h"
#include "util/result.h"

namespace gk::eval {

struct GenerationJob {
  std::string user_message;  // one user turn; the chat template is applied by the backend
  uint64_t seed = 0;
};

struct GenerationSettings {
  double temperature = 0.8;
  double top_p = 0.95;
  int max_tokens = 1024;
};

// Returns one response text per job, in order. progress(done, total) may be called from any thread.
using GenerateFn = std::function<Result<std::vector<std::string>>(
    const std::vector<GenerationJob>&, const GenerationSettings&, const std::function<void(int, int)>& progress)>;

// One user turn and the generation prompt, rendered by `format` (the model's chat template, as
// a server would render the same request) and tokenized injection-safe.
Result<std::vector<int32_t>> ChatPrompt(const ChatFormat& format, const Tokenizer& tokenizer, const std::string& user);

// The engine must outlive the returned function. Each prompt is ChatPrompt(format, ...); prompts
// longer than the engine's max_model_len (minus max_tokens) are an error naming the sample.
GenerateFn EngineGenerator(ServeEngine& engine, const Tokenizer& tokenizer, ChatFormat format,
                           std::vector<int32_t> stop_ids);

// model: the served name ("" : the first of GET /v1/models). api_key "" sends none.
GenerateFn ServerGenerator(const std::string& base_url, const std::string& model, const std::string& api_key,
                           int concurrency);

}  // namespace gk::eval
