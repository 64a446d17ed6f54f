#include "tools/bench/cuda/gpu_model_bench.h"

#include <cuda_profiler_api.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "engines/generate/single_sequence.h"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/gemv.h"
#include "kernels/ops.h"
#include "model/cuda/cuda_model.h"
#include "model/presets.h"
#include "tensor/dtype.h"
#include "tools/bench/burst_ceiling.h"
#include "util/clock.h"

namespace gk {
namespace {

std::vector<int32_t> RandomTokens(const ModelConfig& c, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint32_t(c.vocab_size));
  t[0] = c.bos_token_id;
  return t;
}

// B sequences in one pool: their prompts prefilled (passes of at most max_chunk tokens), then
// gen_len decode steps of all B together. Returns (seconds of the prefills, seconds of the decodes).
Result<std::pair<double, double>> RunBatch(ModelRunner& m, int B, int prompt, int gen) {
  const ModelConfig& c = m.config();
  const int bs = 16;
  const int64_t per_seq = (prompt + gen + bs - 1) / bs;
  PagedKvOptions po;
  po.block_size = bs;
  po.dtype = m.default_kv_dtype();
  po.num_blocks[0] = po.num_blocks[1] = per_seq * B;
  GK_ASSIGN_OR_RETURN(auto pool, m.NewPagedKvPool(po));
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(B)), prompts;
  std::vector<PagedSequence> seqs(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    for (int64_t i = 0; i < per_seq; ++i) tables[size_t(b)].push_back(int32_t(b * per_seq + i));
    seqs[size_t(b)].blocks[0] = seqs[size_t(b)].blocks[1] = tables[size_t(b)];
    prompts.push_back(RandomTokens(c, prompt, uint32_t(100 + b)));
  }
  const int64_t V = c.vocab_size;
  std::vector<float> logits(size_t(B) * size_t(V));
  std::vector<int32_t> next(static_cast<size_t>(B));
  const double t0 = NowSeconds();
  // Prefill: whole prompts side by side, as many as fit a pass.
  for (int b = 0; b < B;) {
    std::vector<PagedBatchItem> items;
    int64_t tokens = 0;
    const int first = b;
    while (b < B && (items.empty() || tokens + prompt <= m.max_chunk())) {
      items.push_back({prompts[size_t(b)], &seqs[size_t(b)], LogitsMode::kLast, nullptr});
      tokens += prompt;
      ++b;
    }
    GK_RETURN_IF_ERROR(m.ForwardPaged(items, *pool, logits.data() + size_t(first) * size_t(V)));
    for (int i = first; i < b; ++i) seqs[size_t(i)].num_tokens = prompt;
  }
  const double t1 = NowSeconds();
  for (int b = 0; b < B; ++b) next[size_t(b)] = int32_t(ArgMax(logits.data() + size_t(b) * size_t(V), V));
  // Greedy decoding as the serving engine runs it: the runner's picks, no logits to the host.
  std::vector<PagedBatchItem> items(static_cast<size_t>(B));
  for (int step = 0; step < gen; ++step) {
    for (int b = 0; b < B; ++b) {
      items[size_t(b)] = {{&next[size_t(b)], 1}, &seqs[size_t(b)], LogitsMode::kLast, nullptr, /*token_only=*/true};
    }
    GK_RETURN_IF_ERROR(m.ForwardPaged(items, *pool, logits.data()));
    const int32_t* picked = m.picked_tokens();
    for (int b = 0; b < B; ++b) {
      next[size_t(b)] = picked ? picked[b] : int32_t(ArgMax(logits.data() + size_t(b) * size_t(V), V));
      ++seqs[size_t(b)].num_tokens;
    }
  }
  return std::make_pair(t1 - t0, NowSeconds() - t1);
}

}  // namespace

Result<nlohmann::json> RunGpuModelBench(const GpuModelBenchOptions& o) {
  GK_ASSIGN_OR_RETURN(const cuda::DeviceLimits limits, cuda::MeasureDeviceLimits());
  CudaModelOptions co;
  co.device = o.device;
  co.max_chunk = std::max({o.prompt_len, o.batch, o.batch_prompt, 1});  // one pass holds a batched prompt too
  co.gpu_memory_utilization = o.gpu_memory_utilization;
  co.cuda_graphs = o.cuda_graphs;
  if (o.flash_prefill) co.prefill_attention = CudaModelOptions::PrefillAttention::kFlash;
  if (o.gemv_decode) co.gemv_max_tokens = cuda::kGemvMaxTokens;
  co.batch_invariant = o.batch_invariant;
  const double t0 = NowSeconds();
  std::unique_ptr<CudaModel> model;
  if (!o.preset.empty()) {
    GK_ASSIGN_OR_RETURN(const ModelConfig c, PresetConfig(o.preset, o.num_layers));
    GK_ASSIGN_OR_RETURN(model, CudaModel::CreateRandom(c, DType::kBF16, 1234, co));
  } else {
    GK_ASSIGN_OR_RETURN(model, CudaModel::Load(o.model_dir, co));
  }
  const double load_s = NowSeconds() - t0;
  // A profiler started with --profile-from-start off (ncu, nsys: scripts/device_check.sh's
  // profile steps) sees the model's kernels from here on, not the ceilings' or the weights' fill.
  cudaProfilerStart();
  const ModelConfig& c = model->config();
  const double bytes_per_token = double(model->decode_bytes_per_token());
  const double weights_per_token = bytes_per_token / 2.0;  // bf16
  const double head = double(c.vocab_size) * double(c.hidden_size);
  // Prefill computes the head for the last position only; a batched decode step for every row.
  const double prefill_flops = 2.0 * (weights_per_token - head) + 2.0 * head / o.prompt_len;
  const int kv_elem = int(DTypeSize(model->default_kv_dtype()));
  const DeviceRoofline roofline{limits.copy_bytes_per_s, limits.bf16_flop_per_s};

  const auto prompt = RandomTokens(c, o.prompt_len, 7);
  GK_ASSIGN_OR_RETURN(SingleSequence seq, SingleSequence::Create(*model, o.prompt_len + o.gen_len));
  std::vector<float> logits(size_t(c.vocab_size));
  std::vector<double> prefill, decode;
  const TokenPick greedy;  // picked on the GPU: no logits cross to the host, as `generate` decodes
  for (int rep = 0; rep < o.repeats; ++rep) {
    seq.Clear();
    double s = NowSeconds();
    GK_RETURN_IF_ERROR(seq.Forward(prompt, LogitsMode::kLast, logits.data(), &greedy));
    prefill.push_back(o.prompt_len / (NowSeconds() - s));
    int32_t next = model->picked_tokens()[0];
    s = NowSeconds();
    for (int i = 0; i < o.gen_len; ++i) {
      GK_RETURN_IF_ERROR(seq.Forward({&next, 1}, LogitsMode::kLast, logits.data(), &greedy));
      next = model->picked_tokens()[0];
    }
    decode.push_back(o.gen_len / (NowSeconds() - s));
  }
  nlohmann::json r = {
      {"model", o.preset.empty() ? o.model_dir : "preset " + o.preset + " (random bf16 weights on the GPU)"},
      {"device", model->device()},
      {"layers", c.num_layers},
      {"params_b", double(c.ParameterCount()) / 1e9},
      {"weight_gb", double(model->weight_bytes()) / 1e9},
      {"load_seconds", load_s},
      {"copy_gbps", limits.copy_bytes_per_s / 1e9},
      {"gemm_bf16_tflops", limits.bf16_flop_per_s / 1e12},
      {"bytes_per_token", bytes_per_token},
      {"prompt_len", o.prompt_len},
      {"prefill_attention", o.flash_prefill ? "flash" : "products"},
      {"prefill_tok_s", Median(prefill)},
      {"gen_len", o.gen_len},
      {"decode_products", o.gemv_decode ? "gemv" : "cublaslt"},
      {"decode_tok_s", Median(decode)},
  };
  r["decode_ratio"] = r["decode_tok_s"].get<double>() * bytes_per_token / limits.copy_bytes_per_s;
  r["prefill_ratio"] = r["prefill_tok_s"].get<double>() * prefill_flops / limits.bf16_flop_per_s;
  // Whether the reference case's burst goal can be reached on this GPU at all: the least time
  // of 64 prompts of 128 tokens and 255 decode steps after them (256 tokens out each), with this
  // model's KV dtype and with fp8 KV.
  for (const auto& [key, elem] : {std::pair{"reference_burst_ceiling_tok_s", kv_elem},
                                  std::pair{"reference_burst_ceiling_fp8kv_tok_s", 1}}) {
    const BurstCeiling least = BurstCeilingOf(c, bytes_per_token, weights_per_token, head, elem, {64, 128, 255, 0}, roofline);
    r[key] = 64.0 * 256 / (least.prefill_s + least.decode_s);
  }
  r["kv_dtype"] = DTypeName(model->default_kv_dtype());
  if (o.batch > 0) {
    // The batch's KV (64 × 256 positions of the 31B shape: 14 GB) may not fit beside the
    // weights on a smaller GPU: then the single-sequence figures stand alone, with the reason.
    std::vector<double> rates, burst;
    Status batch_status = Status::Ok();
    for (int rep = 0; rep < o.repeats && batch_status.ok(); ++rep) {
      auto t = RunBatch(*model, o.batch, o.batch_prompt, o.gen_len);
      if (!t.ok()) {
        batch_status = t.status();
        break;
      }
      rates.push_back(double(o.batch) * o.gen_len / t->second);
      burst.push_back(double(o.batch) * o.gen_len / (t->first + t->second));
    }
    r["batch"] = o.batch;
    r["batch_prompt"] = o.batch_prompt;
    if (batch_status.ok()) {
      // Held to the least time the same passes can take (tools/bench/burst_ceiling.h): the
      // weights and every row's KV at the copy bandwidth or the products at the GEMM rate,
      // whichever is slower, step by step.
      const BurstCeiling least = BurstCeilingOf(c, bytes_per_token, weights_per_token, head, kv_elem,
                                                {o.batch, o.batch_prompt, o.gen_len, model->max_chunk()}, roofline);
      const double tokens = double(o.batch) * o.gen_len;
      r["batch_decode_tok_s"] = Median(rates);
      r["batch_ceiling_tok_s"] = tokens / least.decode_s;
      r["batch_ratio"] = Median(rates) / (tokens / least.decode_s);
      r["batch_kv_gb_first_step"] = least.kv_bytes_first_step / 1e9;
      r["batch_kv_gb_last_step"] = least.kv_bytes_last_step / 1e9;
      r["burst_output_tok_s"] = Median(burst);
      r["burst_ceiling_tok_s"] = tokens / (least.prefill_s + least.decode_s);
      r["burst_ratio"] = Median(burst) / (tokens / (least.prefill_s + least.decode_s));
    } else {
      r["batch_error"] = batch_status.message();
    }
  }
  cudaProfilerStop();
  const CudaGraphStats graphs = model->graph_stats();
  r["cuda_graphs"] = o.cuda_graphs;
  r["batch_invariant"] = o.batch_invariant;
  r["graphs_captured"] = graphs.captured;
  r["moe"] = c.enable_moe_block;
  r["graph_replays"] = graphs.replayed;
  r["graph_nodes"] = graphs.nodes;
  return r;
}

std::string FormatGpuModelBench(const nlohmann::json& r) {
  char buf[2048];
  std::snprintf(buf, sizeof(buf),
                "model    %s: %d layers, %.2f B params, %.1f GB of weights on %s (made in %.1f s)\n"
                "device   copy bandwidth %.0f GB/s | cuBLASLt bf16 GEMM %.0f TFLOP/s (measured now)\n"
                "prefill  %d tokens (attention: %s): %.0f tokens/s = %.2f of the GEMM rate\n"
                "decode   %d tokens (products: %s): %.2f tokens/s x %.2f GB/token = %.0f GB/s = %.2f of copy bandwidth\n",
                r["model"].get<std::string>().c_str(), r["layers"].get<int>(), r["params_b"].get<double>(),
                r["weight_gb"].get<double>(), r["device"].get<std::string>().c_str(), r["load_seconds"].get<double>(),
                r["copy_gbps"].get<double>(), r["gemm_bf16_tflops"].get<double>(), r["prompt_len"].get<int>(),
                r["prefill_attention"].get<std::string>().c_str(),
                r["prefill_tok_s"].get<double>(), r["prefill_ratio"].get<double>(), r["gen_len"].get<int>(),
                r["decode_products"].get<std::string>().c_str(),
                r["decode_tok_s"].get<double>(), r["bytes_per_token"].get<double>() / 1e9,
                r["decode_tok_s"].get<double>() * r["bytes_per_token"].get<double>() / 1e9, r["decode_ratio"].get<double>());
  std::string out = buf;
  if (r.contains("batch_error")) {
    out += "batched  " + std::to_string(r["batch"].get<int>()) + " sequences: not run: " +
           r["batch_error"].get<std::string>() + "\n";
  } else if (r.contains("batch")) {
    std::snprintf(buf, sizeof(buf),
                  "batched  %d sequences: %.0f tokens/s = %.2f of the ceiling's %.0f (weights + %.1f-%.1f GB of KV "
                  "per step at copy bandwidth, or the GEMM rate)\n"
                  "burst    %d prompts of %d tokens, %d out each, all at once: %.0f output tokens/s = %.2f of the "
                  "ceiling's %.0f\n",
                  r["batch"].get<int>(), r["batch_decode_tok_s"].get<double>(), r["batch_ratio"].get<double>(),
                  r["batch_ceiling_tok_s"].get<double>(), r["batch_kv_gb_first_step"].get<double>(),
                  r["batch_kv_gb_last_step"].get<double>(), r["batch"].get<int>(), r["batch_prompt"].get<int>(),
                  r["gen_len"].get<int>(), r["burst_output_tok_s"].get<double>(), r["burst_ratio"].get<double>(),
                  r["burst_ceiling_tok_s"].get<double>());
    out += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "ceiling  the reference's burst (64 x 128 in / 256 out) here: at most %.0f output tokens/s with %s "
                "KV, %.0f with fp8 KV (vLLM on 2xH100: 3,158)\n",
                r["reference_burst_ceiling_tok_s"].get<double>(), r["kv_dtype"].get<std::string>().c_str(),
                r["reference_burst_ceiling_fp8kv_tok_s"].get<double>());
  out += buf;
  if (r["cuda_graphs"].get<bool>() && r["graphs_captured"].get<int64_t>() == 0 && r["moe"].get<bool>()) {
    out += "graphs   none: MoE decode steps route on the host between kernels, and run eagerly\n";
  } else if (r["cuda_graphs"].get<bool>()) {
    out += "graphs   decode steps as CUDA graphs: " + std::to_string(r["graphs_captured"].get<int64_t>()) + " captured, " +
           std::to_string(r["graph_replays"].get<int64_t>()) + " steps replayed, " +
           std::to_string(r["graph_nodes"].get<int64_t>()) + " operations (kernels, copies) per step over " +
           std::to_string(r["layers"].get<int>()) + " layers\n";
  } else {
    out += "graphs   none: every step launched eagerly (--enforce-eager)\n";
  }
  if (r.value("batch_invariant", false)) {
    out += "mode     batch-invariant (--batch-invariant): pinned cuBLASLt algorithms, attention through the paged kernel\n";
  }
  return out;
}

}  // namespace gk
