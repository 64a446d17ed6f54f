// The GPU trainer's LoRA gradients against the independent PyTorch oracle directly
// (tests/oracle/train_ref.py), the same cases and bounds as the CPU's training_oracle_test.cc:
// per tensor within 1e-4 of the tensor's largest entry in f32, the oracle's bf16 spread in bf16.
// Label cuda: skipped without a GPU (and without Debian's python3-torch); run on the CPU by
// the CUDA emulator.
#include <gtest/gtest.h>

#include "kernels/cuda/cuda_test_util.h"
#include "model/cuda/cuda_training_model.h"
#include "model/train/training_oracle_test_util.h"

namespace gk {
namespace {

using namespace oracle_test;

Result<std::unique_ptr<TrainRunner>> GpuRunner(const ModelConfig& config, ModelWeights weights, LoraAdapter* adapter,
                                               TrainPrecision precision) {
  CudaTrainingOptions go;
  go.precision = precision;
  go.max_tokens = 128;
  GK_ASSIGN_OR_RETURN(auto tm, CudaTrainingModel::Create(config, weights, adapter, go));
  return std::unique_ptr<TrainRunner>(std::move(tm));
}

void Check(const std::string& preset, DType dtype, bool all_tokens, bool rslora, bool bf16_precision = false) {
  SKIP_WITHOUT_GPU();
  CheckAgainstOracle(preset, dtype, all_tokens, rslora, bf16_precision, GpuRunner, "cuda_");
}

TEST(CudaTrainingOracle, Gemma4AssistantLossF32) { Check("tiny", DType::kF32, false, false); }
TEST(CudaTrainingOracle, Gemma4AllTokensF32) { Check("tiny", DType::kF32, true, false); }
TEST(CudaTrainingOracle, Gemma4AssistantLossBf16Base) { Check("tiny", DType::kBF16, false, true); }
TEST(CudaTrainingOracle, Gemma4PleKvSharingF32) { Check("tiny-e2b", DType::kF32, false, false); }
TEST(CudaTrainingOracle, Gemma4MoeF32) { Check("tiny-moe", DType::kF32, true, false); }
TEST(CudaTrainingOracle, Gemma3AllTokensF32) { Check("gemma3-270m", DType::kF32, true, false); }
TEST(CudaTrainingOracle, Gemma4Bf16Precision) { Check("tiny", DType::kBF16, false, false, true); }
TEST(CudaTrainingOracle, Gemma4MoeBf16Precision) { Check("tiny-moe", DType::kBF16, true, false, true); }

}  // namespace
}  // namespace gk
