#include "tools/bench/cuda/gpu_train_bench.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/device_limits.h"
#include "model/cuda/cuda_training_model.h"
#include "model/presets.h"
#include "model/weights.h"
#include "tools/bench/train_bench.h"
#include "util/clock.h"
#include "util/format_bytes.h"

namespace gk {
namespace {

double GiB(double bytes) { return bytes / double(1 << 30); }

}  // namespace

Result<nlohmann::json> RunGpuTrainBench(const GpuTrainBenchOptions& o) {
  GK_RETURN_IF_ERROR(cuda::Check(cudaSetDevice(o.device), "cudaSetDevice"));
  GK_ASSIGN_OR_RETURN(const cuda::DeviceLimits limits, cuda::MeasureDeviceLimits());
  ModelConfig c;
  ModelWeights weights;
  if (!o.preset.empty()) {
    GK_ASSIGN_OR_RETURN(c, PresetConfig(o.preset, o.num_layers));
  } else {
    GK_ASSIGN_OR_RETURN(c, LoadModelConfig(o.model_dir));
    GK_ASSIGN_OR_RETURN(weights, LoadWeights(o.model_dir, c, WeightLoadMode::kMmap));
  }
  const int64_t T = int64_t(o.seq_len) * o.rows;
  const bool bf16 = o.precision == "bf16";
  LoraOptions lo;
  lo.rank = o.rank;
  lo.alpha = o.alpha;
  GK_ASSIGN_OR_RETURN(LoraAdapter adapter, LoraAdapter::Create(c, o.preset.empty() ? weights.prefix : "model.", lo));
  adapter.InitPeft(1);
  GK_RETURN_IF_ERROR(CheckCudaTrainingSupport(c, &adapter));
  CudaTrainingOptions to;
  to.device = o.device;
  to.max_tokens = T;
  to.precision = bf16 ? TrainPrecision::kBf16 : TrainPrecision::kF32;
  const double t0 = NowSeconds();
  std::unique_ptr<CudaTrainingModel> model;
  if (!o.preset.empty()) {
    GK_ASSIGN_OR_RETURN(model, CudaTrainingModel::CreateRandom(c, DType::kBF16, 1234, &adapter, to));
  } else {
    GK_ASSIGN_OR_RETURN(model, CudaTrainingModel::Create(c, weights, &adapter, to));
  }
  const double load_s = NowSeconds() - t0;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, c.vocab_size - 1);
  std::vector<std::vector<int32_t>> tokens(size_t(o.rows), std::vector<int32_t>(size_t(o.seq_len)));
  std::vector<uint8_t> mask(static_cast<size_t>(o.seq_len), 1);
  std::vector<TrainRowView> rows;
  for (auto& r : tokens) {
    for (int32_t& t : r) t = tok(rng);
    rows.push_back({r, mask});
  }
  std::vector<double> step_s, sync_s;
  double loss = 0;
  for (int s = 0; s <= o.steps; ++s) {  // step 0: the warm-up
    MicroBatchStats st;
    const double a = NowSeconds();
    GK_RETURN_IF_ERROR(model->ForwardBackward(rows, 1.f / float(std::max<int64_t>(1, T - o.rows)), uint64_t(s), &st));
    const double b = NowSeconds();
    GK_RETURN_IF_ERROR(model->GradientsToHost());  // the trainer's step around the host's optimizer
    GK_RETURN_IF_ERROR(model->FactorsChanged());
    const double e = NowSeconds();
    // A profiler started with --profile-from-start off (scripts/device_check.sh) sees the timed steps.
    if (s == 0) {
      cudaProfilerStart();
      continue;
    }
    step_s.push_back(e - a);
    sync_s.push_back(e - b);
    loss = st.loss_sum / double(std::max<int64_t>(1, st.targets));
  }
  cudaProfilerStop();
  const double step = Median(step_s);
  // Useful FLOPs per step (CountTrainFlops: one row; rows rows of seq_len each).
  const TrainFlops f = CountTrainFlops(c, &adapter, o.seq_len, /*remat=*/true);
  const double useful = f.useful * o.rows;
  return nlohmann::json{
      {"model", o.preset.empty() ? o.model_dir : std::string("preset ") + o.preset + " (random bf16 weights on the GPU)"},
      {"device", model->device()},
      {"layers", c.num_layers},
      {"params_b", double(c.ParameterCount()) / 1e9},
      {"trainable_m", double(adapter.ParameterCount()) / 1e6},
      {"rank", o.rank},
      {"precision", o.precision},
      {"load_seconds", load_s},
      {"gemm_bf16_tflops", limits.bf16_flop_per_s / 1e12},
      {"seq_len", o.seq_len},
      {"rows", o.rows},
      {"steps", o.steps},
      {"step_seconds", step},
      {"host_sync_seconds", Median(sync_s)},
      {"tokens_per_s", double(T) / step},
      {"loss", loss},
      {"useful_tflop_per_step", useful / 1e12},
      {"mfu", useful / step / limits.bf16_flop_per_s},
      {"device_peak_gib", GiB(double(model->peak_device_bytes()))},
      {"device_model_gib", GiB(double(model->device_bytes()))},
      {"plan_gib", GiB(model->planned_device_bytes())},  // the estimate it was checked against
  };
}

std::string FormatGpuTrainBench(const nlohmann::json& r) {
  char buf[2048];
  std::snprintf(buf, sizeof(buf),
                "model    %s: %d layers, %.2f B params on %s (made in %.1f s); LoRA rank %d, %.1f M trainable, %s\n"
                "device   cuBLASLt bf16 GEMM %.0f TFLOP/s (measured now)\n"
                "train    %d x %d tokens per step, remat: %.3f s per step (%.3f s of it the gradients and factors "
                "to and from the host) = %.0f tokens/s; loss %.3f\n"
                "mfu      %.1f useful TFLOP per step = %.2f of the GEMM rate\n"
                "memory   %.2f GiB in use on the device at its peak (this model's buffers %.2f GiB); plan %.2f GiB\n",
                r["model"].get<std::string>().c_str(), r["layers"].get<int>(), r["params_b"].get<double>(),
                r["device"].get<std::string>().c_str(), r["load_seconds"].get<double>(), r["rank"].get<int>(),
                r["trainable_m"].get<double>(), r["precision"].get<std::string>().c_str(),
                r["gemm_bf16_tflops"].get<double>(), r["rows"].get<int>(), r["seq_len"].get<int>(),
                r["step_seconds"].get<double>(), r["host_sync_seconds"].get<double>(), r["tokens_per_s"].get<double>(),
                r["loss"].get<double>(), r["useful_tflop_per_step"].get<double>(), r["mfu"].get<double>(),
                r["device_peak_gib"].get<double>(), r["device_model_gib"].get<double>(), r["plan_gib"].get<double>());
  return buf;
}

}  // namespace gk
