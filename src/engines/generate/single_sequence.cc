#include "engines/generate/single_sequence.h"

#include <algorithm>

namespace gk {

Result<SingleSequence> SingleSequence::Create(ModelRunner& runner, int64_t max_tokens, DType kv_dtype, int block_size) {
  const ModelConfig& c = runner.config();
  if (max_tokens < 1) return Status::Error(StrCat("a sequence needs room for at least 1 token, got ", max_tokens));
  SingleSequence s;
  s.runner_ = &runner;
  s.max_tokens_ = max_tokens;
  const int64_t bs = block_size, logical = (max_tokens + bs - 1) / bs;
  // A pass of T tokens from position p reads positions p - window + 1 .. p + T - 1 on sliding
  // layers: at most window + T - 1 positions, over that many blocks plus one partial block.
  const int64_t ring = std::min(logical, (c.sliding_window + runner.max_chunk() - 1 + bs - 1) / bs + 1);
  PagedKvOptions o;
  o.block_size = block_size;
  o.dtype = kv_dtype == DType::kUnknown ? runner.default_kv_dtype() : kv_dtype;
  o.num_blocks[int(KvGroup::kFull)] = logical;
  o.num_blocks[int(KvGroup::kSliding)] = std::max<int64_t>(ring, 1);
  GK_ASSIGN_OR_RETURN(s.pool_, runner.NewPagedKvPool(o));
  for (int g = 0; g < 2; ++g) {
    s.table_[g].resize(size_t(logical));
    const int64_t n = o.num_blocks[g];
    for (int64_t i = 0; i < logical; ++i) s.table_[g][size_t(i)] = int32_t(i % n);
  }
  return s;
}

Status SingleSequence::Forward(std::span<const int32_t> tokens, LogitsMode mode, float* logits, const TokenPick* pick) {
  const int64_t n = int64_t(tokens.size()), V = runner_->config().vocab_size, chunk = runner_->max_chunk();
  if (seq_.num_tokens + n > max_tokens_) {
    return Status::Error(StrCat("sequence of ", seq_.num_tokens + n, " tokens exceeds the context of ", max_tokens_,
                                " tokens; shorten the prompt or raise the context length"));
  }
  for (int g = 0; g < 2; ++g) seq_.blocks[g] = table_[g];
  for (int64_t b = 0; b < n; b += chunk) {
    const int64_t T = std::min(chunk, n - b);
    PagedBatchItem item;
    item.tokens = tokens.subspan(size_t(b), size_t(T));
    item.seq = &seq_;
    item.logits = mode == LogitsMode::kAll ? LogitsMode::kAll
                  : mode == LogitsMode::kLast && b + T == n ? LogitsMode::kLast
                                                            : LogitsMode::kNone;
    if (pick != nullptr && item.logits == LogitsMode::kLast) {
      item.token_only = true;
      item.pick = *pick;
    }
    GK_RETURN_IF_ERROR(runner_->ForwardPaged({&item, 1}, *pool_, mode == LogitsMode::kAll ? logits + b * V : logits));
    seq_.num_tokens += T;
  }
  return Status::Ok();
}

}  // namespace gk
