// LoRA factors under tensor parallelism: each rank holds its layer share's part of the adapter
// (model/tensor_parallel.h), made from the same config's local shapes (LoraAdapter::Create
// over ShardModelConfig). Column-parallel projections (q, k, v, gate, up) keep A whole and the
// rows of B that match the rank's heads or MLP slice; row-parallel ones (o, down) keep the
// columns of A that match the rank's input slice and B whole. Where KV heads are replicated,
// so are the matching rows of k/v's B.
#pragma once

#include "model/config.h"
#include "model/tensor_parallel.h"
#include "model/train/lora.h"
#include "util/result.h"

namespace gk {

// Copies this rank's part of every factor of `whole` (and of its gradients, when it has them)
// into `local`, an adapter of the rank's shapes with the same modules.
Status SliceLoraAdapter(const LoraAdapter& whole, const ModelConfig& full, const TensorParallel& tp, LoraAdapter* local);

// The inverse, collective over the group: every rank adds its share of `local`'s factors into
// `whole` (an adapter of the whole model's shapes, same modules; each replicated part from one
// rank only) and the group sums them, so that every rank ends with the whole factors.
Status GatherLoraAdapter(const LoraAdapter& local, const ModelConfig& full, const TensorParallel& tp, LoraAdapter* whole);

// After the backward passes of a step, on every rank of the group: sums the gradients that each
// rank holds only partially, A of the column-parallel projections (every rank's heads add to it)
// and, where KV heads are replicated, B of k and v over the ranks sharing a head. One
// all-reduce. The other gradients are whole (B of o and down: the same on every rank) or the
// rank's own slice.
Status ReduceLoraGradsOverTp(LoraAdapter& local, const ModelConfig& full, const TensorParallel& tp);

// Σ of the squared gradients of the whole adapter, from the shares after ReduceLoraGradsOverTp
// (each replicated part counted once), on every rank of the group: the global norm's square.
Result<double> LoraGradSquaredNorm(const LoraAdapter& local, const ModelConfig& full, const TensorParallel& tp);

}  // namespace gk
