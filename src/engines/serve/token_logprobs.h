// Log-probabilities of a token and of the k most likely tokens under softmax(logits), as the
// OpenAI `logprobs` fields report them (from the model's own distribution, before temperature,
// top-k or top-p: vLLM's default "raw" logprobs).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace gk {

struct LogprobResult {
  float logprob = 0.f;                          // of the chosen token
  std::vector<std::pair<int32_t, float>> top;   // k best (token, logprob), most likely first
};

LogprobResult TokenLogprobs(const float* logits, int64_t n, int32_t token, int k);

}  // namespace gk
