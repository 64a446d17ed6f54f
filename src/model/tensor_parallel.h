// Tensor parallelism (Megatron-style) for the inference decoder: what part of the model one rank
// of a tensor-parallel group holds. q/k/v and gate/up are split by output rows (heads, MLP
// columns), o and down by input columns, so each rank's partial o/down products sum to the whole
// over the group (one all-reduce each); the embedding and the tied head are split by vocabulary
// rows. Where the group is larger than a layer's KV heads, each KV head is replicated on
// tp / K ranks, as vLLM does (and as `plan --serve` counts).
//
// A rank's model is an ordinary GemmaModel over its local config (ShardModelConfig): local
// query heads, KV heads and MLP widths; the vocabulary stays whole in the config (the logits
// the engines see are whole rows) and VocabShard says which embedding rows the rank holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "util/result.h"

namespace gk {

namespace dist {
class Communicator;
}

struct TensorParallel {
  dist::Communicator* comm = nullptr;  // the group (null: one process holds everything)
  int rank = 0;
  int size = 1;
  bool active() const { return size > 1; }
};

// KV heads a rank holds of a layer with `kv_heads`: kv_heads / tp, or 1 (replicated) when tp is
// a multiple of kv_heads.
int LocalKvHeads(int kv_heads, int tp);
// The first of those heads on `rank`.
int FirstKvHead(int kv_heads, int tp, int rank);

// The config of one rank's share; an error names the dimension tp does not divide (query heads,
// MLP width, expert width) or a KV head count that neither divides nor is divided by tp.
Result<ModelConfig> ShardModelConfig(const ModelConfig& c, int tp);

// A contiguous range of vocabulary rows: ceil(V / tp) per rank, the last rank's possibly fewer.
struct VocabRange {
  int64_t begin = 0, rows = 0;
  int64_t per_rank = 0;  // ceil(V / tp): the padded width of a rank's logits block
};
VocabRange VocabShard(int64_t vocab, int tp, int rank);

// How one checkpoint tensor is cut for a rank: whole, a range of rows (of each expert's matrix
// for expert stacks; gate_up stacks take the range from both halves), or a range of columns.
struct TensorSlice {
  enum class Kind { kWhole, kRows, kCols, kExpertGateUpRows, kExpertCols };
  Kind kind = Kind::kWhole;
  int64_t begin = 0, count = 0;  // rows or columns (per half for kExpertGateUpRows)
};

// The slice of the tensor `name` (a WeightSlots name, prefix included) of `full` that `rank`
// holds under tp; full_shape is its checkpoint shape.
TensorSlice SliceForRank(const std::string& name, const std::vector<int64_t>& full_shape, const ModelConfig& full,
                         int tp, int rank);

}  // namespace gk
