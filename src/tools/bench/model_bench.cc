#include "tools/bench/model_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "dist/communicator.h"
#include "model/gemma_model.h"

#include "util/clock.h"

namespace gk {
namespace {



// What a decode step streams, summed with `measure` (bytes or weights) over the matrices:
// every matrix, except that the per-layer embedding table is a row lookup and only top_k of
// the experts run.
template <class Measure>
double PerToken(const ModelConfig& c, const ModelWeights& w, Measure measure) {
  double total = 0, experts = 0;
  ForEachMatrix(w, [&](const MatrixView& m) { total += measure(m); });
  if (!w.ple_embed.empty()) total -= measure(w.ple_embed);
  for (const auto& l : w.layers) {
    for (const auto& m : l.expert_gate_up) experts += measure(m);
    for (const auto& m : l.expert_down) experts += measure(m);
  }
  if (c.enable_moe_block) total -= experts * (1.0 - double(c.top_k_experts) / c.num_experts);
  return total;
}

}  // namespace

namespace {

struct Speeds {
  double prefill_tok_s = 0, decode_tok_s = 0;
  int batch = 0;
  double batch_decode_tok_s = 0;
  double comm_bytes_per_decode_token = 0;
};

// Medians over o.repeats of a prompt's prefill and of decoding gen_len tokens one at a time;
// then, with batch, `batch` sequences decoded together.
Result<Speeds> MeasureSpeeds(GemmaModel& model, const ModelBenchOptions& o, bool with_batch) {
  const ModelConfig& c = model.config();
  const dist::Communicator* comm = model.tensor_parallel().comm;
  Speeds sp;
  std::mt19937 rng(1234);
  std::vector<int32_t> prompt(size_t(o.prompt_len));
  for (auto& t : prompt) t = int32_t(rng() % uint32_t(std::min(c.vocab_size, 256000)));
  prompt[0] = c.bos_token_id;
  std::vector<float> logits(size_t(c.vocab_size));
  std::vector<double> prefill, decode;
  int64_t comm_bytes = 0;
  for (int rep = 0; rep < o.repeats; ++rep) {
    KvCache cache = model.NewKvCache(o.prompt_len + o.gen_len);
    double s = NowSeconds();
    GK_RETURN_IF_ERROR(model.Forward(prompt, cache, LogitsMode::kLast, logits.data()));
    prefill.push_back(o.prompt_len / (NowSeconds() - s));
    const int64_t bytes0 = comm ? comm->bytes_communicated() : 0;
    s = NowSeconds();
    for (int i = 0; i < o.gen_len; ++i) {
      const int32_t next = int32_t(ArgMax(logits.data(), c.vocab_size));
      GK_RETURN_IF_ERROR(model.Forward({&next, 1}, cache, LogitsMode::kLast, logits.data()));
    }
    decode.push_back(o.gen_len / (NowSeconds() - s));
    if (comm) comm_bytes += comm->bytes_communicated() - bytes0;
  }
  sp.prefill_tok_s = Median(prefill);
  sp.decode_tok_s = Median(decode);
  sp.comm_bytes_per_decode_token = double(comm_bytes) / (double(o.repeats) * o.gen_len);
  if (with_batch && o.batch > 0) {
    // Continuous batching's steady state: `batch` sequences each decoding one token per pass.
    const int B = std::min(o.batch, model.max_chunk());
    const int warm = 16;
    std::vector<KvCache> caches;
    std::vector<int32_t> next(static_cast<size_t>(B));
    std::vector<BatchItem> items(static_cast<size_t>(B));
    std::vector<float> batch_logits(size_t(B) * size_t(c.vocab_size));
    for (int b = 0; b < B; ++b) caches.push_back(model.NewKvCache(warm + o.gen_len + 1));
    for (int b = 0; b < B; ++b) {
      GK_RETURN_IF_ERROR(model.Forward({prompt.data() + b, size_t(warm)}, caches[size_t(b)], LogitsMode::kLast,
                                       batch_logits.data() + size_t(b) * c.vocab_size));
    }
    std::vector<double> rates;
    for (int rep = 0; rep < o.repeats; ++rep) {
      double s = NowSeconds();
      const int steps = std::max(1, o.gen_len / o.repeats);
      for (int i = 0; i < steps; ++i) {
        for (int b = 0; b < B; ++b) {
          next[size_t(b)] = int32_t(ArgMax(batch_logits.data() + size_t(b) * c.vocab_size, c.vocab_size));
          items[size_t(b)] = BatchItem{{&next[size_t(b)], 1}, &caches[size_t(b)], LogitsMode::kLast};
        }
        GK_RETURN_IF_ERROR(model.ForwardBatch(items, batch_logits.data()));
      }
      rates.push_back(double(B) * steps / (NowSeconds() - s));
    }
    sp.batch = B;
    sp.batch_decode_tok_s = Median(rates);
  }
  return sp;
}

}  // namespace

Result<ModelBenchResult> RunModelBench(const ModelBenchOptions& o) {
  ThreadPool pool(o.threads);
  ModelBenchResult r;
  r.model_dir = o.model_dir;
  r.threads = pool.size();
  r.prompt_len = o.prompt_len;
  r.gen_len = o.gen_len;
  r.isa = std::string(IsaName(ActiveIsa()));
  r.load_mode = o.load_mode == WeightLoadMode::kMmap ? "mmap" : "anonymous memory";
  dist::Communicator* comm = o.tp.active() ? o.tp.comm : nullptr;
  if (comm) {  // the ranks probe the machine at the same time, as they then run
    r.tp = o.tp.size;
    r.comm_backend = comm->backend();
    GK_RETURN_IF_ERROR(comm->Barrier());
  }
  r.ceilings = MeasureCeilings(pool, o.bandwidth_buffer_bytes);

  ModelLoadOptions lo;
  lo.mode = o.load_mode;
  lo.quantize = o.quantize;
  lo.max_chunk = std::max(1, o.prompt_len);
  lo.tp = o.tp;
  const double t0 = NowSeconds();
  GK_ASSIGN_OR_RETURN(auto model, GemmaModel::Load(o.model_dir, &pool, lo));
  r.load_seconds = NowSeconds() - t0;
  const ModelConfig& c = model->config();
  r.arch = c.arch == Arch::kGemma4 ? "gemma4" : "gemma3";
  r.activations = ActiveBf16Activations() == Bf16Activations::kSplit ? "split" : "round";
  const MatrixView& probe = model->weights().layers.empty() ? model->weights().embed : model->weights().layers[0].gate;
  r.weight_format = probe.dtype == DType::kQ8_0 ? "q8_0"
                    : probe.packed              ? "bf16 packed"
                                                : std::string(probe.dtype == DType::kF32 ? "f32" : "bf16");
  r.weight_dtype = std::string(DTypeName(model->weights().embed.dtype));
  // The whole model's count also under tensor parallelism (c is then one rank's share).
  GK_ASSIGN_OR_RETURN(const ModelConfig whole, LoadModelConfig(o.model_dir));
  r.params_b = double(whole.ParameterCount()) / 1e9;
  r.bytes_per_token = PerToken(c, model->weights(), [](const MatrixView& m) { return double(m.bytes()); });
  // Prefill computes logits for the last position only: the tied head's V × D product runs
  // once per prompt, every other matrix once per token.
  const double head_weights = double(model->weights().embed.rows) * double(model->weights().embed.cols);
  const double weights_per_token =
      PerToken(c, model->weights(), [](const MatrixView& m) { return double(m.rows) * double(m.cols); });
  r.flops_per_token = 2.0 * (weights_per_token - head_weights) + 2.0 * head_weights / o.prompt_len;

  if (comm) GK_RETURN_IF_ERROR(comm->Barrier());
  GK_ASSIGN_OR_RETURN(Speeds sp, MeasureSpeeds(*model, o, /*with_batch=*/true));
  r.prefill_tok_s = sp.prefill_tok_s;
  r.decode_tok_s = sp.decode_tok_s;
  r.comm_bytes_per_decode_token = sp.comm_bytes_per_decode_token;
  if (sp.batch > 0) {
    r.batch = sp.batch;
    r.batch_decode_tok_s = sp.batch_decode_tok_s;
    r.batch_speedup = r.batch_decode_tok_s / r.decode_tok_s;
    const double peak = r.weight_format == "bf16 packed" && r.activations == "round" ? r.ceilings.bf16_gflops
                                                                                     : r.ceilings.fp32_gflops;
    // Every decoded token uses every weight, head included (each sequence needs its logits).
    if (peak > 0) r.batch_compute_ratio = r.batch_decode_tok_s * 2.0 * weights_per_token / 1e9 / peak;
  }
  if (comm && o.tp_baseline) {
    model.reset();  // rank 0 loads the whole model next: free the share first
    if (comm->rank() == 0) {  // the baseline: the whole model on rank 0 alone, the others waiting
      ModelLoadOptions whole = lo;
      whole.tp = {};
      GK_ASSIGN_OR_RETURN(auto alone, GemmaModel::Load(o.model_dir, &pool, whole));
      GK_ASSIGN_OR_RETURN(Speeds a, MeasureSpeeds(*alone, o, /*with_batch=*/false));
      r.alone_prefill_tok_s = a.prefill_tok_s;
      r.alone_decode_tok_s = a.decode_tok_s;
    }
    GK_RETURN_IF_ERROR(comm->Barrier());
  }
  // Each rank streams its share of the weights from its share of the bandwidth.
  r.decode_ratio = r.decode_tok_s * r.bytes_per_token / (r.ceilings.read_gbps * 1e9);
  const double prefill_gflops = r.prefill_tok_s * r.flops_per_token / 1e9;
  if (r.ceilings.fp32_gflops > 0) r.prefill_ratio_fp32 = prefill_gflops / r.ceilings.fp32_gflops;
  if (r.ceilings.bf16_gflops > 0) r.prefill_ratio_bf16 = prefill_gflops / r.ceilings.bf16_gflops;
  if (r.ceilings.sgemm_gflops > 0) r.prefill_ratio_sgemm = prefill_gflops / r.ceilings.sgemm_gflops;
  if (r.ceilings.onednn_bf16_gflops > 0) r.prefill_ratio_onednn = prefill_gflops / r.ceilings.onednn_bf16_gflops;
  return r;
}

std::string FormatModelBench(const ModelBenchResult& r) {
  char buf[2048], onednn_ceiling[96] = "", onednn_ratio[64] = "";
  const double prefill_gflops = r.prefill_tok_s * r.flops_per_token / 1e9;
  const double decode_gbps = r.decode_tok_s * r.bytes_per_token / 1e9;
  if (r.ceilings.onednn_bf16_gflops > 0) {  // AVX-512 BF16 CPUs: the bf16 matmul rate prefill is held to
    std::snprintf(onednn_ceiling, sizeof(onednn_ceiling), " | oneDNN bf16 matmul %.0f GFLOP/s",
                  r.ceilings.onednn_bf16_gflops);
    std::snprintf(onednn_ratio, sizeof(onednn_ratio), ", %.2f of oneDNN bf16 matmul", r.prefill_ratio_onednn);
  }
  std::snprintf(buf, sizeof(buf),
                "model    %s: %s, %.3f B params, %s weights in %s (loaded in %.2f s), %d threads, %s kernels\n"
                "machine  read bandwidth %.1f GB/s | fp32 FMA peak %.0f GFLOP/s | bf16 dot peak %.0f GFLOP/s | "
                "%s sgemm %.0f GFLOP/s%s\n"
                "prefill  %d tokens: %.1f tokens/s = %.1f GFLOP/s = %.2f of fp32 FMA peak, %.2f of bf16 peak, "
                "%.2f of sgemm%s\n"
                "decode   %d tokens: %.2f tokens/s x %.3f GB/token = %.1f GB/s = %.2f of read bandwidth\n"
                "batched  %d sequences: %.1f tokens/s = %.1fx single-sequence decode, %.2f of the FLOP peak\n"
                "kernels  weights %s, bf16 activations %s\n",
                r.model_dir.c_str(), r.arch.c_str(), r.params_b, r.weight_dtype.c_str(), r.load_mode.c_str(),
                r.load_seconds, r.threads, r.isa.c_str(), r.ceilings.read_gbps, r.ceilings.fp32_gflops,
                r.ceilings.bf16_gflops, SgemmLibrary(r.threads), r.ceilings.sgemm_gflops, onednn_ceiling, r.prompt_len, r.prefill_tok_s,
                prefill_gflops, r.prefill_ratio_fp32, r.prefill_ratio_bf16, r.prefill_ratio_sgemm, onednn_ratio, r.gen_len, r.decode_tok_s, r.bytes_per_token / 1e9, decode_gbps,
                r.decode_ratio, r.batch, r.batch_decode_tok_s, r.batch_speedup, r.batch_compute_ratio,
                r.weight_format.c_str(), r.activations.c_str());
  std::string out = buf;
  if (r.tp > 1) {
    std::snprintf(buf, sizeof(buf),
                  "tensor parallel  %d ranks (%s), figures per rank's share: %.1f KiB to collectives per decoded "
                  "token\n",
                  r.tp, r.comm_backend.c_str(), r.comm_bytes_per_decode_token / 1024.0);
    out += buf;
    if (r.alone_decode_tok_s > 0) {
      std::snprintf(buf, sizeof(buf),
                    "scaling  prefill %.1f tokens/s against %.1f for the whole model on rank 0 alone: %.2fx; "
                    "decode %.2f against %.2f: %.2fx (ideal %d)\n",
                    r.prefill_tok_s, r.alone_prefill_tok_s, r.prefill_tok_s / r.alone_prefill_tok_s, r.decode_tok_s,
                    r.alone_decode_tok_s, r.decode_tok_s / r.alone_decode_tok_s, r.tp);
      out += buf;
    }
  }
  return out;
}

nlohmann::json ModelBenchToJson(const ModelBenchResult& r) {
  return {{"model", r.model_dir}, {"arch", r.arch}, {"weight_dtype", r.weight_dtype}, {"isa", r.isa},
          {"load_mode", r.load_mode}, {"threads", r.threads}, {"prompt_len", r.prompt_len}, {"gen_len", r.gen_len},
          {"params_b", r.params_b}, {"load_seconds", r.load_seconds}, {"bytes_per_token", r.bytes_per_token},
          {"flops_per_token", r.flops_per_token}, {"prefill_tok_s", r.prefill_tok_s},
          {"decode_tok_s", r.decode_tok_s}, {"read_gbps", r.ceilings.read_gbps},
          {"fp32_gflops", r.ceilings.fp32_gflops}, {"bf16_gflops", r.ceilings.bf16_gflops},
          {"decode_ratio", r.decode_ratio}, {"prefill_ratio_fp32", r.prefill_ratio_fp32},
          {"prefill_ratio_bf16", r.prefill_ratio_bf16}, {"sgemm_gflops", r.ceilings.sgemm_gflops}, {"sgemm_library", SgemmLibrary(r.threads)},
          {"prefill_ratio_sgemm", r.prefill_ratio_sgemm}, {"onednn_bf16_gflops", r.ceilings.onednn_bf16_gflops},
          {"prefill_ratio_onednn", r.prefill_ratio_onednn}, {"activations", r.activations},
          {"weight_format", r.weight_format}, {"batch", r.batch}, {"batch_decode_tok_s", r.batch_decode_tok_s},
          {"batch_speedup", r.batch_speedup}, {"batch_compute_ratio", r.batch_compute_ratio}, {"tp", r.tp},
          {"comm_backend", r.comm_backend}, {"comm_bytes_per_decode_token", r.comm_bytes_per_decode_token},
          {"alone_prefill_tok_s", r.alone_prefill_tok_s}, {"alone_decode_tok_s", r.alone_decode_tok_s}};
}

}  // namespace gk
