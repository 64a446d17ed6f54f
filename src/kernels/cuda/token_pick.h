// Each logit row's next token, picked on the GPU as kernels/token_pick.h defines it: the argmax
// at temperature 0, else the race among the top_k / top_p survivors. Only the token crosses
// to the host, not the row's 262,144 logits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/token_pick.h"
#include "util/result.h"

namespace gk::cuda {

// tokens[r] = the token picks[r] picks from row r of `rows` rows of n logits. logits, picks and
// tokens are device memory; one kernel on `stream`.
Status PickTokens(const float* logits, int64_t rows, int64_t n, const TokenPick* picks, int32_t* tokens,
                  cudaStream_t stream);

}  // namespace gk::cuda
