#include "tools/bench/train_bench.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "kernels/gemm_bf16.h"
#include "kernels/isa.h"
#include "model/tensor_parallel.h"
#include "model/train/lora_tensor_parallel.h"
#include "model/train/training_model.h"
#include "model/weights.h"
#include "tensor/thread_pool.h"
#include "tools/bench/ceilings.h"
#include "util/clock.h"
#include "util/host_info.h"

namespace gk {
namespace {

// training_attention.cc's query block.
constexpr int64_t kAttentionBlock = 64;

double MiB(double bytes) { return bytes / double(1 << 20); }

}  // namespace

int64_t VisiblePairs(int64_t T, bool full, int64_t window) {
  if (full || window <= 0 || window >= T) return T * (T + 1) / 2;
  // Positions 0..W-1 see p + 1 keys, the rest W each.
  return window * (window + 1) / 2 + (T - window) * window;
}

int64_t AttentionBlockEntries(int64_t T, bool full, int64_t window) {
  int64_t n = 0;
  for (int64_t i0 = 0; i0 < T; i0 += kAttentionBlock) {
    const int64_t bq = std::min(kAttentionBlock, T - i0);
    const int64_t j0 = full ? 0 : std::max<int64_t>(0, i0 - window + 1);
    n += bq * (i0 + bq - j0);
  }
  return n;
}

TrainFlops CountTrainFlops(const ModelConfig& c, const LoraAdapter* adapter, int64_t T, bool remat, bool full) {
  TrainFlops f;
  f.tokens = T;
  f.loss_rows = T - 1;  // the mask is all ones: every token but the first is a target
  const double D = c.hidden_size, N = c.num_heads, P = c.hidden_size_per_layer_input;
  for (int l = 0; l < c.num_layers; ++l) {
    const double H = c.HeadDim(l), K = c.KvHeads(l), F = c.MlpWidth(l);
    const double q = D * N * H, kv = c.IsKvShared(l) ? 0 : D * K * H, o = N * H * D, mlp = 3 * D * F;
    f.frozen_layer_params += q + kv * (c.KEqV(l) ? 1 : 2) + o + mlp;
    f.frozen_layer_params += 2 * D * P;  // PLE gate and projection
    if (c.enable_moe_block) {  // the router and the top_k experts a token runs through
      f.frozen_layer_params += double(c.num_experts) * D + 3.0 * c.top_k_experts * D * c.moe_intermediate_size;
    }
    const bool full = c.IsFull(l);
    f.attention_nh_pairs += N * H * double(VisiblePairs(T, full, c.sliding_window));
    f.attention_nh_entries += N * H * double(AttentionBlockEntries(T, full, c.sliding_window));
  }
  f.head_params = double(c.vocab_size) * D;
  f.ple_projection_params = D * c.num_layers * P;
  f.lora_params = adapter ? double(adapter->ParameterCount()) : 0;
  const double t = double(T), r = double(f.loss_rows);
  // Full fine-tuning adds every matrix's weight gradient (2·P·T); the PLE projection then needs
  // its input and weight gradients too.
  const double passes = full ? 6 : 4;
  f.frozen_useful = passes * (f.frozen_layer_params + f.head_params) * t + (full ? 6 : 2) * f.ple_projection_params * t;
  f.lora_useful = 6 * f.lora_params * t;
  f.attention_useful = (4 + 2.5 * 4) * f.attention_nh_pairs;
  f.useful = f.frozen_useful + f.lora_useful + f.attention_useful;
  f.layers_executed = (passes + (remat ? 2 : 0)) * f.frozen_layer_params * t + (full ? 6 : 2) * f.ple_projection_params * t;
  // The loss head's products over the target rows: LoRA computes each chunk's logits once and
  // accumulates the hidden gradient in the same pass (2); full fine-tuning recomputes them and
  // adds the tied head's gradient (4).
  f.head_executed = (full ? 4 : 2) * 2 * f.head_params * r;
  f.lora_executed = (remat ? 8 : 6) * f.lora_params * t;
  f.attention_executed = ((remat ? 8 : 4) + 10) * f.attention_nh_entries;
  f.executed = f.layers_executed + f.head_executed + f.lora_executed + f.attention_executed;
  return f;
}

Result<std::vector<std::string>> LoraTargetNames(const std::vector<std::string>& targets) {
  static const char* kShort[] = {"q", "k", "v", "o", "gate", "up", "down"};
  std::vector<std::string> out;
  for (const std::string& t : targets) {
    std::string name;
    for (const char* s : kShort) {
      if (t == s || t == std::string(s) + "_proj") name = std::string(s) + "_proj";
    }
    if (name.empty()) {
      return Status::Error(StrCat("--targets: unknown projection '", t, "' (choose from q,k,v,o,gate,up,down)"));
    }
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  if (out.empty()) return Status::Error("--targets: no projection given");
  return out;
}

namespace {

// The step's gradients, one buffer each (LoRA factors, or every weight when full).
std::vector<std::span<float>> Gradients(LoraAdapter& adapter, TrainingModel& model) {
  std::vector<std::span<float>> g;
  if (FullParams* fp = model.full_params()) {
    for (FullParam& p : fp->params()) g.emplace_back(p.grad);
  } else {
    for (LoraModule& m : adapter.modules()) {
      g.emplace_back(m.grad_a);
      g.emplace_back(m.grad_b);
    }
  }
  return g;
}

// comm: null, or the data-parallel ranks (each step ends with the gradients' all-reduce).
// tp: a tensor-parallel group training the row together (comm then null).
Result<TrainBenchRun> RunOnce(const TrainBenchOptions& o, const ModelConfig& c, const std::vector<std::string>& names,
                              const std::vector<int32_t>& tokens, const std::vector<uint8_t>& mask, bool remat,
                              ThreadPool& pool, dist::Communicator* comm, const TensorParallel& tp,
                              TrainBenchResult* meta) {
  TrainBenchRun run;
  run.remat = remat;
  const double t0 = NowSeconds();
  GK_ASSIGN_OR_RETURN(const ModelConfig local, ShardModelConfig(c, tp.size));
  GK_ASSIGN_OR_RETURN(ModelWeights weights, LoadWeights(o.model_dir, c, WeightLoadMode::kCopy, tp));
  run.load_seconds = NowSeconds() - t0;
  meta->weight_dtype = std::string(DTypeName(weights.embed.dtype));
  LoraOptions lo;
  lo.rank = o.rank;
  lo.alpha = o.alpha;
  lo.target_list = names;
  GK_ASSIGN_OR_RETURN(LoraAdapter adapter, LoraAdapter::Create(c, weights.prefix, lo));
  adapter.InitPeft(o.seed);
  // B = 0 (PEFT's initialisation) would leave the A gradients zero; a trained adapter has B ≠ 0.
  std::mt19937_64 rng(o.seed + 1);
  std::normal_distribution<float> nd(0.f, 0.05f);
  for (LoraModule& m : adapter.modules()) {
    for (float& v : m.b) v = nd(rng);
  }
  meta->lora_modules = o.full ? 0 : int(adapter.modules().size());
  const LoraAdapter whole = tp.active() ? adapter : LoraAdapter();  // for the FLOP count
  if (tp.active()) {  // this rank's share of the same adapter
    GK_ASSIGN_OR_RETURN(LoraAdapter share, LoraAdapter::Create(local, weights.prefix, lo));
    GK_RETURN_IF_ERROR(SliceLoraAdapter(whole, c, tp, &share));
    adapter = std::move(share);
  }
  TrainingModelOptions to;
  to.remat = remat;
  to.precision = o.precision == "f32" ? TrainPrecision::kF32 : TrainPrecision::kBf16;
  to.max_tokens = std::max<int64_t>(2, int64_t(tokens.size()));
  to.tp = tp;
  if (o.full) to.full_finetune_from = o.model_dir;
  GK_ASSIGN_OR_RETURN(auto model,
                      TrainingModel::Create(local, std::move(weights), o.full ? nullptr : &adapter, &pool, to));
  const bool bf16 = model->precision() == TrainPrecision::kBf16;
  meta->precision = bf16 ? "bf16" : "f32";
  meta->bf16_route = !bf16 ? "" : Bf16ProductsAvailable(model->weights().embed) ? "oneDNN" : "emulated";
  if (o.full) meta->trainable_params = model->full_params()->ParameterCount();
  else meta->trainable_params = (tp.active() ? whole : adapter).ParameterCount();
  const TrainRowView row{tokens, mask};
  const int64_t T = int64_t(tokens.size());
  const float loss_scale = 1.f / float(T - 1);
  const std::vector<std::span<float>> grads = Gradients(adapter, *model);
  std::vector<float> flat;
  for (std::span<float> g : grads) meta->allreduce_bytes_per_step += comm ? int64_t(g.size_bytes()) : 0;
  for (int s = 0; s < 1 + o.steps; ++s) {  // step 0 warms up (buffers, page faults, sgemm threads)
    for (LoraModule& m : adapter.modules()) {
      std::fill(m.grad_a.begin(), m.grad_a.end(), 0.f);
      std::fill(m.grad_b.begin(), m.grad_b.end(), 0.f);
    }
    if (FullParams* fp = model->full_params()) fp->ZeroGrads();
    meta->fp32_peak_probes.push_back(MeasureFp32Peak(pool, o.peak_repeats));  // ~0.1 s, outside the timing
    MicroBatchStats st;
    if (comm) GK_RETURN_IF_ERROR(comm->Barrier());  // the ranks start each step together
    if (tp.active()) GK_RETURN_IF_ERROR(tp.comm->Barrier());
    const int64_t bytes0 = tp.active() ? tp.comm->bytes_communicated() : 0;
    const double s0 = NowSeconds();
    GK_RETURN_IF_ERROR(model->ForwardBackward({&row, 1}, loss_scale, uint64_t(s), &st));
    if (comm) GK_RETURN_IF_ERROR(dist::AllReduceSumAll(*comm, grads, &flat));  // as the trainer
    if (tp.active()) GK_RETURN_IF_ERROR(ReduceLoraGradsOverTp(adapter, c, tp));
    const double dt = NowSeconds() - s0;
    if (s > 0) {
      run.step_seconds.push_back(dt);
      const TrainingModel::PassSeconds& p = model->pass_seconds();
      run.forward_s += p.forward / o.steps;
      run.loss_head_s += p.loss_head / o.steps;
      run.backward_s += p.backward / o.steps;
    }
    if (tp.active()) meta->tp_bytes_per_step = tp.comm->bytes_communicated() - bytes0;
    run.loss = st.targets > 0 ? st.loss_sum / double(st.targets) : 0;
  }
  run.activation_bytes = model->activation_bytes();
  run.peak_rss_bytes = PeakRssBytes();
  run.mean_step_s = std::accumulate(run.step_seconds.begin(), run.step_seconds.end(), 0.0) / run.step_seconds.size();
  run.median_step_s = Median(run.step_seconds);
  run.min_step_s = *std::min_element(run.step_seconds.begin(), run.step_seconds.end());
  const double ranks = comm ? double(comm->size()) : 1.0;  // each rank trained a row per step
  run.tokens_per_s = ranks * double(T) / run.mean_step_s;
  run.flops = CountTrainFlops(c, o.full ? nullptr : (tp.active() ? &whole : &adapter), T, remat, o.full);
  run.useful_gflops = ranks * run.flops.useful / run.mean_step_s / 1e9;
  run.executed_gflops = ranks * run.flops.executed / run.mean_step_s / 1e9;
  return run;
}

}  // namespace

Result<TrainBenchResult> RunTrainBench(const TrainBenchOptions& o) {
  if (o.seq_len < 2) return Status::Error(StrCat("--seq-len must be at least 2, got ", o.seq_len));
  if (o.steps < 1) return Status::Error(StrCat("--steps must be at least 1, got ", o.steps));
  if (o.precision != "bf16" && o.precision != "f32") {
    return Status::Error(StrCat("--precision must be bf16 or f32, got \"", o.precision, "\""));
  }
  GK_ASSIGN_OR_RETURN(std::vector<std::string> names, LoraTargetNames(o.targets));
  GK_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(o.model_dir));
  ThreadPool pool(o.threads);
  TrainBenchResult r;
  r.model_dir = o.model_dir;
  r.arch = c.arch == Arch::kGemma4 ? "gemma4" : "gemma3";
  r.cpu = CpuModelName();
  r.isa = std::string(IsaName(ActiveIsa()));
  r.threads = pool.size();
  r.seq_len = o.seq_len;
  r.rank = o.rank;
  r.alpha = o.alpha;
  r.steps = o.steps;
  r.targets = names;
  r.full = o.full;
  r.fp32_peak_probes.push_back(MeasureFp32Peak(pool, o.peak_repeats));
  r.bf16_peak_probes.push_back(MeasureBf16Peak(pool, o.peak_repeats));

  // One row: BOS, then uniform ids (as bench/train_torch_eager.py: [2] + U[3, V)), every
  // token a target.
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> tokens(size_t(o.seq_len));
  tokens[0] = c.bos_token_id;
  for (size_t i = 1; i < tokens.size(); ++i) tokens[i] = int32_t(3 + rng() % uint64_t(std::max(1, c.vocab_size - 3)));
  const std::vector<uint8_t> mask(tokens.size(), 1);

  dist::Communicator* comm = o.comm && o.comm->size() > 1 ? o.comm : nullptr;
  TensorParallel tp;
  if (o.tp > 1) {
    if (!comm || comm->size() != o.tp) {
      return Status::Error(StrCat("--tp ", o.tp, " needs exactly ", o.tp, " ranks (mpirun -np ", o.tp, ")"));
    }
    if (o.full) return Status::Error("--tp: tensor-parallel training benchmarks LoRA (not --full)");
    tp = TensorParallel{comm, comm->rank(), comm->size()};
    r.tp = o.tp;
  }
  if (comm) {
    if (o.compare_remat) return Status::Error("--compare-remat runs in one process (not under mpirun)");
    r.ranks = comm->size();
    r.comm_backend = comm->backend();
    if (comm->rank() == 0) {  // the baseline: rank 0 alone, while the others wait in the barrier
      TrainBenchResult alone;
      GK_ASSIGN_OR_RETURN(TrainBenchRun run, RunOnce(o, c, names, tokens, mask, o.remat, pool, nullptr, {}, &alone));
      r.one_rank_tokens_per_s = run.tokens_per_s;
    }
    GK_RETURN_IF_ERROR(comm->Barrier());
  }
  // With compare_remat the remat run goes first, so that each run's peak RSS is its own.
  std::vector<bool> order = o.compare_remat ? std::vector<bool>{true, false} : std::vector<bool>{o.remat};
  for (bool remat : order) {
    // Tensor parallel: the ranks share one row (no data-parallel all-reduce).
    GK_ASSIGN_OR_RETURN(TrainBenchRun run,
                        RunOnce(o, c, names, tokens, mask, remat, pool, tp.active() ? nullptr : comm, tp, &r));
    r.runs.push_back(std::move(run));
  }
  r.fp32_peak_probes.push_back(MeasureFp32Peak(pool, o.peak_repeats));
  r.bf16_peak_probes.push_back(MeasureBf16Peak(pool, o.peak_repeats));
  r.fp32_peak_gflops = *std::max_element(r.fp32_peak_probes.begin(), r.fp32_peak_probes.end());
  r.bf16_peak_gflops = *std::max_element(r.bf16_peak_probes.begin(), r.bf16_peak_probes.end());
  if (comm) {  // the ranks probed at the same time: the machine's peak is their sum
    double peaks[2] = {r.fp32_peak_gflops, r.bf16_peak_gflops};
    GK_RETURN_IF_ERROR(comm->AllReduceSum(std::span<double>(peaks, 2)));
    r.fp32_peak_gflops = peaks[0];
    r.bf16_peak_gflops = peaks[1];
  }
  for (TrainBenchRun& run : r.runs) {
    if (r.fp32_peak_gflops > 0) {
      run.useful_ratio = run.useful_gflops / r.fp32_peak_gflops;
      run.executed_ratio = run.executed_gflops / r.fp32_peak_gflops;
    }
    if (r.bf16_peak_gflops > 0) run.useful_ratio_bf16 = run.useful_gflops / r.bf16_peak_gflops;
  }
  return r;
}

std::string FormatTrainBench(const TrainBenchResult& r) {
  std::string out;
  char buf[1024];
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof(buf), fmt, args...);
    out += buf;
  };
  std::string targets;
  for (const std::string& t : r.targets) targets += (targets.empty() ? "" : ",") + t;
  const TrainFlops& f0 = r.runs.front().flops;
  line("model    %s: %s, %s weights, %.1f M frozen matrix parameters (layers %.1f M + head %.1f M)\n",
       r.model_dir.c_str(), r.arch.c_str(), r.weight_dtype.c_str(), (f0.frozen_layer_params + f0.head_params) / 1e6,
       f0.frozen_layer_params / 1e6, f0.head_params / 1e6);
  if (r.full) {
    line("full     every matrix and norm, %.2f M parameters\n", double(r.trainable_params) / 1e6);
  } else {
    line("lora     r=%d alpha=%g on %d projections (%s), %.2f M parameters\n", r.rank, r.alpha, r.lora_modules,
         targets.c_str(), f0.lora_params / 1e6);
  }
  const double lowest = r.fp32_peak_probes.empty()
                            ? 0
                            : *std::min_element(r.fp32_peak_probes.begin(), r.fp32_peak_probes.end());
  line("machine  %s, %d threads, %s kernels, fp32 FMA peak %.0f GFLOP/s (highest of %zu probes, lowest %.0f)",
       r.cpu.c_str(), r.threads, r.isa.c_str(), r.fp32_peak_gflops, r.fp32_peak_probes.size(), lowest);
  if (r.bf16_peak_gflops > 0) line(", bf16 dot peak %.0f GFLOP/s", r.bf16_peak_gflops);
  line("\n");
  if (r.precision == "bf16") {
    line("products bf16 activations against the bf16 weights, f32 accumulation (%s); LoRA, attention, "
         "gradients f32\n", r.bf16_route == "oneDNN" ? "oneDNN's bf16 matmul" : "emulated: no AVX-512 BF16");
  } else {
    line("products f32 (%s)\n", r.weight_dtype == "F32" ? "f32 weights" : r.full ? "full fine-tuning" : "--precision f32");
  }
  line("step     one row of %d tokens, loss on %lld targets; 1 warm-up + %d timed steps\n", r.seq_len,
       (long long)f0.loss_rows, r.steps);
  if (r.ranks > 1) {
    const double tps = r.runs.front().tokens_per_s;
    if (r.tp > 1) {
      line("ranks    %d tensor-parallel ranks (%s) training one row together, %.2f MiB to collectives per step "
           "and rank\n", r.ranks, r.comm_backend.c_str(), MiB(double(r.tp_bytes_per_step)));
    } else {
      line("ranks    %d data-parallel ranks (%s), a row each per step, %.2f MiB of gradients all-reduced per step "
           "and rank\n", r.ranks, r.comm_backend.c_str(), MiB(double(r.allreduce_bytes_per_step)));
    }
    line("scaling  %.1f tokens/s on %d ranks against %.1f tokens/s for rank 0 alone: %.2fx (ideal %d)\n", tps,
         r.ranks, r.one_rank_tokens_per_s, tps / std::max(r.one_rank_tokens_per_s, 1e-9), r.ranks);
  }
  for (const TrainBenchRun& run : r.runs) {
    const TrainFlops& f = run.flops;
    line("[remat %s]\n", run.remat ? "on" : "off");
    line("  time      step mean %.3f s (median %.3f, best %.3f) = %.1f tokens/s, loss %.4f\n", run.mean_step_s,
         run.median_step_s, run.min_step_s, run.tokens_per_s, run.loss);
    line("  passes    layers forward %.3f s, loss head %.3f s, layers backward %.3f s%s\n", run.forward_s,
         run.loss_head_s, run.backward_s, run.remat ? " (with the recomputed forward passes)" : "");
    line("  useful    %.1f GFLOP/step = frozen 4*P*T %.1f + LoRA 6*Pl*T %.2f + attention 14*N*H*pairs %.2f\n",
         f.useful / 1e9, f.frozen_useful / 1e9, f.lora_useful / 1e9, f.attention_useful / 1e9);
    line("            %.1f GFLOP/s = %.2f of the fp32 FMA peak", run.useful_gflops, run.useful_ratio);
    if (r.bf16_peak_gflops > 0) line(", %.2f of the bf16 dot peak", run.useful_ratio_bf16);
    line("\n");
    line("  executed  %.1f GFLOP/step = layers %d*P*T %.1f + head %d*V*D*R %.1f + LoRA %d*Pl*T %.2f + attention "
         "%d*N*H*entries %.2f\n",
         f.executed / 1e9, run.remat ? 6 : 4, f.layers_executed / 1e9, r.full ? 8 : 4, f.head_executed / 1e9,
         run.remat ? 8 : 6,
         f.lora_executed / 1e9, run.remat ? 18 : 14, f.attention_executed / 1e9);
    line("            %.1f GFLOP/s = %.2f of the fp32 FMA peak\n", run.executed_gflops, run.executed_ratio);
    line("  memory    activations kept for backward %.1f MiB, peak RSS %.1f MiB (weights loaded in %.2f s)\n",
         MiB(double(run.activation_bytes)), MiB(double(run.peak_rss_bytes)), run.load_seconds);
  }
  if (r.runs.size() == 2) {
    const TrainBenchRun& on = r.runs[0];
    const TrainBenchRun& off = r.runs[1];
    line("remat    activations %.1f MiB -> %.1f MiB (%.1fx less, saves %.1f MiB); peak RSS %.1f -> %.1f MiB; "
         "step %.3f s -> %.3f s (%.2fx)\n",
         MiB(double(off.activation_bytes)), MiB(double(on.activation_bytes)),
         double(off.activation_bytes) / double(std::max<int64_t>(1, on.activation_bytes)),
         MiB(double(off.activation_bytes - on.activation_bytes)), MiB(double(off.peak_rss_bytes)),
         MiB(double(on.peak_rss_bytes)), off.mean_step_s, on.mean_step_s, on.mean_step_s / off.mean_step_s);
  }
  return out;
}

nlohmann::json TrainBenchToJson(const TrainBenchResult& r) {
  nlohmann::json runs = nlohmann::json::array();
  for (const TrainBenchRun& run : r.runs) {
    const TrainFlops& f = run.flops;
    runs.push_back({{"remat", run.remat},
                    {"step_times_s", run.step_seconds},
                    {"mean_step_s", run.mean_step_s},
                    {"median_step_s", run.median_step_s},
                    {"min_step_s", run.min_step_s},
                    {"pass_seconds", {{"forward", run.forward_s}, {"loss_head", run.loss_head_s},
                                      {"backward", run.backward_s}}},
                    {"tokens_per_s", run.tokens_per_s},
                    {"loss", run.loss},
                    {"activation_bytes", run.activation_bytes},
                    {"peak_rss_bytes", run.peak_rss_bytes},
                    {"load_seconds", run.load_seconds},
                    {"useful_flops", f.useful},
                    {"executed_flops", f.executed},
                    {"useful_gflops", run.useful_gflops},
                    {"executed_gflops", run.executed_gflops},
                    {"useful_ratio_fp32", run.useful_ratio},
                    {"useful_ratio_bf16", run.useful_ratio_bf16},
                    {"executed_ratio_fp32", run.executed_ratio},
                    {"flops",
                     {{"tokens", f.tokens},
                      {"loss_rows", f.loss_rows},
                      {"frozen_layer_params", f.frozen_layer_params},
                      {"head_params", f.head_params},
                      {"lora_params", f.lora_params},
                      {"attention_nh_pairs", f.attention_nh_pairs},
                      {"attention_nh_entries", f.attention_nh_entries},
                      {"frozen_useful", f.frozen_useful},
                      {"lora_useful", f.lora_useful},
                      {"attention_useful", f.attention_useful},
                      {"layers_executed", f.layers_executed},
                      {"head_executed", f.head_executed},
                      {"lora_executed", f.lora_executed},
                      {"attention_executed", f.attention_executed},
                      {"formula_useful", "4*(P_layers+V*D)*T + 6*Pl*T + 14*N*H*pairs"},
                      {"formula_executed", run.remat ? "6*P_layers*T + 6*V*D*(T-1) + 8*Pl*T + 18*N*H*entries"
                                                     : "4*P_layers*T + 6*V*D*(T-1) + 6*Pl*T + 14*N*H*entries"}}}});
  }
  nlohmann::json j = {{"model", r.model_dir}, {"arch", r.arch}, {"weight_dtype", r.weight_dtype}, {"cpu", r.cpu},
                      {"isa", r.isa}, {"threads", r.threads}, {"seq_len", r.seq_len}, {"rank", r.rank},
                      {"alpha", r.alpha}, {"targets", r.targets}, {"lora_modules", r.lora_modules},
                      {"full_finetune", r.full}, {"trainable_params", r.trainable_params},
                      {"steps", r.steps}, {"fp32_gflops", r.fp32_peak_gflops},
                      {"fp32_gflops_probes", r.fp32_peak_probes},
                      {"bf16_gflops", r.bf16_peak_gflops}, {"bf16_gflops_probes", r.bf16_peak_probes},
                      {"precision", r.precision}, {"bf16_route", r.bf16_route},
                      {"runs", runs}};
  if (r.ranks > 1) {
    j[r.tp > 1 ? "tensor_parallel" : "data_parallel"] = {{"ranks", r.ranks},
                          {"tp_bytes_per_step", r.tp_bytes_per_step},
                          {"backend", r.comm_backend},
                          {"one_rank_tokens_per_s", r.one_rank_tokens_per_s},
                          {"scaling", r.runs.front().tokens_per_s / std::max(r.one_rank_tokens_per_s, 1e-9)},
                          {"allreduce_bytes_per_step", r.allreduce_bytes_per_step}};
  }
  if (r.runs.size() == 2) {
    const int64_t on = r.runs[0].activation_bytes, off = r.runs[1].activation_bytes;
    j["remat_saving"] = {{"activation_bytes_remat", on},
                         {"activation_bytes_no_remat", off},
                         {"saved_bytes", off - on},
                         {"factor", double(off) / double(std::max<int64_t>(1, on))},
                         {"step_time_factor", r.runs[0].mean_step_s / r.runs[1].mean_step_s}};
  }
  return j;
}

}  // namespace gk
