#include "model/load_runner.h"

#ifdef GK_HAVE_CUDA
#include "model/cuda/cuda_model.h"
#endif

namespace gk {

#ifdef GK_HAVE_CUDA
namespace {

CudaModelOptions CudaOptions(const RunnerOptions& o) {
  CudaModelOptions co;
  co.device = o.device.index;
  co.max_chunk = o.cpu.max_chunk;
  co.gpu_memory_utilization = o.gpu_memory_utilization;
  co.cuda_graphs = o.cuda_graphs;
  co.batch_invariant = o.batch_invariant;
  return co;
}

}  // namespace
#endif

Result<std::unique_ptr<ModelRunner>> LoadModelRunner(const std::string& dir, ThreadPool* pool, const RunnerOptions& o) {
  if (o.device.kind == DeviceKind::kCpu) {
    GK_ASSIGN_OR_RETURN(std::unique_ptr<GemmaModel> m, GemmaModel::Load(dir, pool, o.cpu));
    return std::unique_ptr<ModelRunner>(std::move(m));
  }
  const std::string name = o.device.ToString();
  if (o.cpu.quantize != QuantType::kNone) {
    return Status::Error(StrCat("--quantize runs on the CPU only; --device ", name, " takes bf16 or f32 weights"));
  }
  if (o.cpu.tp.active()) return Status::Error(StrCat("--tp runs on CPUs only; --device ", name, " runs on one GPU"));
  GK_RETURN_IF_ERROR(CheckDeviceAvailable(o.device));
#ifdef GK_HAVE_CUDA
  GK_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> m, CudaModel::Load(dir, CudaOptions(o)));
  return std::unique_ptr<ModelRunner>(std::move(m));
#else
  return Status::Error(StrCat("--device ", name, ": this gemmakit was built without the CUDA backend"));
#endif
}

Result<std::unique_ptr<ModelRunner>> RandomModelRunner(const ModelConfig& config, const RunnerOptions& o) {
  if (o.device.kind == DeviceKind::kCpu) {
    return Status::Error("--preset runs on --device cuda only; for the CPU write the model first: gemmakit init --preset NAME --out DIR");
  }
  GK_RETURN_IF_ERROR(CheckDeviceAvailable(o.device));
#ifdef GK_HAVE_CUDA
  GK_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> m, CudaModel::CreateRandom(config, DType::kBF16, 1234, CudaOptions(o)));
  return std::unique_ptr<ModelRunner>(std::move(m));
#else
  (void)config;
  return Status::Error(StrCat("--device ", o.device.ToString(), ": this gemmakit was built without the CUDA backend"));
#endif
}

}  // namespace gk
