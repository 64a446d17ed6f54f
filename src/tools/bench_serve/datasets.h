// The prompts of a benchmark run.
//
// Random (vLLM's RandomDataset, vllm/benchmarks/datasets/random.py; shared/spec/serving.md §1.5):
//  1. L = input_len - tokens the tokenizer adds (1 for Gemma: <bos>, when the tokenizer has one).
//  2. Per request: an input length uniform in [floor(L(1-r)), ceil(L(1+r))], an output length
//     uniform in [max(1, floor(O(1-r))), max(1, ceil(O(1+r)))], an offset uniform in [0, vocab).
//  3. allowed = ids [0, vocab) minus special tokens; a prefix of prefix_len random allowed ids,
//     drawn once and shared by all requests.
//  4. Body of request i: allowed[(offset_i + i + j) mod |allowed|], j = 0..len_i-1.
//  5. Decode prefix + body to text and re-encode; truncate, or pad with random allowed ids, and
//     repeat (at most 10 rounds) until the text encodes to exactly the target length.
//     prompt_len = prefix_len + len_i + the added tokens (what the server will count).
// The generator is std::mt19937_64(seed), not numpy's: the same seed gives other prompts than
// vLLM, drawn from the same distribution.
//
// JSONL: one JSON object per line with "prompt" (a string) and optionally "output_len" (or
// "max_tokens"); blank lines are skipped. prompt_len is counted with the tokenizer when one is
// given (plus the added tokens), else 0 and the server's usage.prompt_tokens fills it in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/tokenizer.h"
#include "util/result.h"

namespace gk::bench {

struct SampleRequest {
  std::string prompt;
  int prompt_len = 0;           // tokens the server will see, including <bos>
  int expected_output_len = 0;  // max_tokens to ask for
};

struct RandomDatasetOptions {
  int num_prompts = 1000;
  int input_len = 1024;
  int output_len = 128;
  double range_ratio = 0.0;  // in [0, 1)
  int prefix_len = 0;
  uint64_t seed = 0;
};

// Tokens a server adds in front of a completion prompt: 1 when the tokenizer has <bos>.
int NumSpecialTokensToAdd(const Tokenizer& tokenizer);

// Errors: range_ratio outside [0, 1), input_len smaller than the added tokens + 1,
// num_prompts < 1, a tokenizer with no non-special ids.
Result<std::vector<SampleRequest>> SampleRandom(const RandomDatasetOptions& options, const Tokenizer& tokenizer);

// default_output_len is used where a line has neither "output_len" nor "max_tokens".
// num_prompts > 0 takes the first num_prompts lines (cycling when the file has fewer).
// Errors name the file and line: not JSON, no "prompt" string, a bad output length, empty file.
Result<std::vector<SampleRequest>> LoadJsonl(const std::string& path, int default_output_len, int num_prompts,
                                             const Tokenizer* tokenizer);

}  // namespace gk::bench
