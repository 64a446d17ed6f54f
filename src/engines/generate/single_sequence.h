// One sequence on any ModelRunner (generate, logprobs, bench model): a paged KV pool of its own,
// sized for max_tokens, whose block table is the identity on full-attention layers and a ring on
// sliding-window layers (window + one pass of blocks, reused as the window moves on). The CPU
// runner and the CUDA runner thus run the same single-sequence code as the serving engine.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/model_runner.h"
#include "util/result.h"

namespace gk {

class SingleSequence {
 public:
  // kv_dtype kUnknown: the runner's default. block_size: positions per block.
  static Result<SingleSequence> Create(ModelRunner& runner, int64_t max_tokens, DType kv_dtype = DType::kUnknown,
                                       int block_size = 128);

  int64_t num_tokens() const { return seq_.num_tokens; }
  int64_t max_tokens() const { return max_tokens_; }
  uint64_t kv_bytes() const { return pool_->bytes(); }

  // Appends tokens (any count: passes of at most max_chunk). logits: V floats per row, every
  // token's (kAll) or the last one's (kLast). Errors: more tokens than max_tokens, the runner's.
  // pick (kLast, a runner that picks tokens): the runner picks the next token so
  // (runner.picked_tokens()[0]) and may leave the row where it computed it.
  Status Forward(std::span<const int32_t> tokens, LogitsMode mode, float* logits, const TokenPick* pick = nullptr);
  // Forgets the tokens (the blocks are reused from position 0).
  void Clear() { seq_.num_tokens = 0; }

 private:
  SingleSequence() = default;

  ModelRunner* runner_ = nullptr;
  int64_t max_tokens_ = 0;
  std::unique_ptr<PagedKvPool> pool_;
  std::vector<int32_t> table_[2];  // per group: physical block of each logical block
  PagedSequence seq_;
};

}  // namespace gk
