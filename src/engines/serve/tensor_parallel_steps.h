// Tensor-parallel serving (`mpirun -np N gemmakit serve --tp N`): rank 0 runs HTTP, the
// scheduler and the block manager; before each forward pass its engine sends the pass's batch
// (tokens, positions, block tables, which rows want logits) to the other ranks, which run the
// same pass on their shares of the model and of the KV cache (same block ids, their own heads).
// The collectives inside the pass then line up on every rank.
#pragma once

#include <span>

#include "model/gemma_model.h"
#include "model/paged_kv.h"
#include "util/result.h"

namespace gk {

namespace dist {
class Communicator;
}

// Rank 0: sends one forward pass's batch to every rank.
Status SendPagedBatch(dist::Communicator& comm, std::span<const PagedBatchItem> items);
// Rank 0: tells the other ranks that serving ended (FollowPagedBatches returns).
Status SendServingEnd(dist::Communicator& comm);

// Ranks > 0: runs every batch rank 0 sends through model and pool until SendServingEnd.
Status FollowPagedBatches(dist::Communicator& comm, GemmaModel& model, PagedKvPool& pool);

}  // namespace gk
