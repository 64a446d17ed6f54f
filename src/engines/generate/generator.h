// The decode loop for one sequence: prefill the prompt, then sample and feed back one token
// at a time until a stop id, the token limit or the context end, on any runner (SingleSequence).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engines/generate/sampler.h"
#include "model/model_runner.h"

namespace gk {

struct GenerateOptions {
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these (not passed to on_token)
  int64_t context = 0;            // KV cache positions; 0: prompt + max_tokens
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;
  int64_t decode_steps = 0;       // single-token forward passes (decode tokens/s = steps / seconds)
  double decode_seconds = 0;
  bool stopped_by_stop_id = false;
};

// on_token is called with each generated token; returning false stops generation.
Result<GenerateStats> Generate(ModelRunner& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                               const std::function<bool(int32_t)>& on_token);

}  // namespace gk
