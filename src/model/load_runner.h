// A model runner for `--device`: GemmaModel on the CPU, CudaModel on cuda:N (when the CUDA
// backend is built in). The commands load models through this, and the engines above it never
// learn which device runs.
#pragma once

#include <memory>
#include <string>

#include "kernels/device.h"
#include "model/gemma_model.h"
#include "model/model_runner.h"

namespace gk {

struct RunnerOptions {
  DeviceSpec device;
  ModelLoadOptions cpu;                 // max_chunk applies to every device; the rest to the CPU
  double gpu_memory_utilization = 0.9;  // cuda: the share of the device's memory weights + KV may take
  bool cuda_graphs = true;              // cuda: decode steps replayed as CUDA graphs (false: --enforce-eager)
  bool batch_invariant = false;         // cuda: CudaModelOptions::batch_invariant (--batch-invariant)
};

// Errors: the checkpoint's (as GemmaModel::Load), CPU-only options on a GPU (--quantize, --tp),
// the device's (not built in, absent, too small, a model it does not run).
Result<std::unique_ptr<ModelRunner>> LoadModelRunner(const std::string& dir, ThreadPool* pool, const RunnerOptions& o);

// A model of config's shape with random bf16 weights made on the device (serve and bench
// --preset: no checkpoint). GPUs only: on the CPU, `gemmakit init --preset` writes one.
Result<std::unique_ptr<ModelRunner>> RandomModelRunner(const ModelConfig& config, const RunnerOptions& o);

}  // namespace gk
