// gemmakit plan (--model DIR | --preset NAME) --mesh fsdp=F,tp=T --hardware NAME
//   [--train --seq-len N --micro-batch B (--lora-rank R | --full) --remat] [--serve --max-model-len N
//   --kv-cache-dtype bf16|fp8 --batch B] [--project] [--catalog FILE]
// A sharding plan and the memory per device for training and/or serving a Gemma 4 model on a
// catalog machine; --project adds roofline step/TTFT/TPOT projections (docs/COST.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "cli/common.h"
#include "model/presets.h"
#include "tools/cost/cost_model.h"
#include "tools/cost/hardware_catalog.h"
#include "tools/plan/memory_plan.h"
#include "tools/plan/reference_case.h"
#include "tools/plan/roofline.h"
#include "tools/plan/sharding.h"

namespace gk::cli {
namespace {

struct PlanArgs {
  std::string model, preset, mesh, hardware, catalog;
  bool train = false, serve = false, project = false, remat = false, full = false, lora_rank_given = false;
  int64_t seq_len = 3072, max_model_len = 16384;
  int micro_batch = 1, lora_rank = 64, batch = 1;
  std::string kv_dtype = "bf16";
};

std::string GiB(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  return buf;
}
std::string Shape(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += StrCat(i ? ", " : "", s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}
std::string Num(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// The tp values up to `limit` for which every base tensor shards.
std::string WorkingTps(const ModelConfig& c, int fsdp, int limit) {
  std::string out;
  for (int tp = 1; tp <= limit; ++tp) {
    auto base = plan::BaseTensors(c);
    if (plan::CheckBaseSharding(base, {fsdp, tp}).ok()) out += StrCat(out.empty() ? "" : ", ", tp);
  }
  return out;
}

int FirstFullLayer(const ModelConfig& c) {
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.IsFull(l)) return l;
  }
  return 0;
}

bool IsReferenceModel(const ModelConfig& c) {
  auto ref = PresetConfig("31b");
  return ref.ok() && ref->ParameterCount() == c.ParameterCount() && ref->num_layers == c.num_layers;
}

void PrintSpecs(const char* title, const std::vector<plan::TensorGroup>& ts, const plan::Mesh& m, bool show_declared) {
  std::printf("%s\n  %-62s %-22s %4s  %-44s %s\n", title, "tensor", "shape", "×n", show_declared ? "spec (inherited → used)" : "spec",
              "per device");
  for (const plan::TensorGroup& t : ts) {
    std::vector<int64_t> local = t.shape;
    for (size_t i = 0; i < local.size(); ++i) {
      const plan::Axis a = t.effective[i];
      local[i] /= a == plan::Axis::kFsdp ? m.fsdp : a == plan::Axis::kTp ? m.tp : 1;
    }
    std::string spec = plan::SpecText(t.effective);
    if (show_declared && plan::SpecText(t.spec) != spec) spec = plan::SpecText(t.spec) + " → " + spec;
    std::printf("  %-62s %-22s %4d  %-44s %s\n", t.name.c_str(), Shape(t.shape).c_str(), t.count, spec.c_str(),
                Shape(local).c_str());
  }
}

int PlanTraining(const PlanArgs& a, const ModelConfig& c, const cost::Machine& hw, const plan::Mesh& m,
                 std::vector<plan::TensorGroup>& base) {
  plan::TrainPlanOptions o;
  o.seq_len = a.seq_len;
  o.micro_batch = a.micro_batch;
  o.lora_rank = a.lora_rank;
  o.remat = a.remat;
  o.activation_elem_bytes = hw.measured ? 4 : 2;  // `cpu`: gemmakit's own trainer keeps f32
  PrintSpecs("\nsharding of the base weights (Tunix layout, Tunix default partition specs):", base, m, false);
  if (a.lora_rank > 0) {
    auto lora = plan::LoraTensors(c, a.lora_rank);
    plan::FilterInheritedSpecs(lora, m);
    PrintSpecs(StrCat("\nLoRA factors, rank ", a.lora_rank,
                      " (Qwix layout, the reference TPU run's targets: no k_einsum on K=V layers; the base spec inherited,\n"
                      "then: rank differs → replicated, axis not divisible → replicated; AdamW m, v and gradients use the "
                      "same specs):").c_str(),
               lora, m, true);
  }
  const plan::TrainMemory mem = plan::TrainingMemory(c, base, m, o);
  const double cap = hw.chip.MemoryBytes();
  std::printf("\ntraining memory per device (%s, T = %lld × micro-batch %d, %s):\n",
              a.lora_rank > 0 ? StrCat("LoRA rank ", a.lora_rank, ", ", Num("%.1f", mem.trainable / 1e6), " M trainable").c_str()
                              : "full fine-tuning",
              (long long)a.seq_len, a.micro_batch, a.remat ? "remat per decoder layer" : "no remat");
  for (const plan::MemoryLine& l : mem.lines) std::printf("  %-44s %12s   %s\n", l.what.c_str(), GiB(l.bytes).c_str(), l.how.c_str());
  std::printf("  %-44s %12s   of %s per %s: %s\n", "total", GiB(mem.total).c_str(), GiB(cap).c_str(), hw.chip.name.c_str(),
              mem.total <= cap ? StrCat("FITS (", GiB(cap - mem.total), " free)").c_str()
                               : StrCat("DOES NOT FIT (", GiB(mem.total - cap), " over)").c_str());
  std::printf("  activations: %s without remat, %s with remat per layer\n", GiB(mem.activations_no_remat).c_str(),
              GiB(mem.activations_remat).c_str());
  if (a.lora_rank > 0 && m.Size() == 1 && !hw.measured) {
    // gemmakit's own GPU trainer keeps f32 factors, gradients, moments and activations: its layout, not Tunix's.
    const GpuLoraMemory g =
        EstimateGpuLoraTraining(c, {.tokens = a.seq_len * a.micro_batch, .rank = a.lora_rank, .remat = a.remat});
    std::printf("\ngemmakit's GPU trainer on one %s (LoRA rank %d, %.1f M trainable; docs/TRAIN.md \"On a GPU\": "
                "the layout `train --device cuda` allocates):\n",
                hw.chip.name.c_str(), a.lora_rank, double(g.trainable) / 1e6);
    for (const MemoryItem& i : g.items) std::printf("  %-44s %12s   %s\n", i.what.c_str(), GiB(i.bytes).c_str(), i.how.c_str());
    std::printf("  %-44s %12s   of %s: %s\n", "total", GiB(g.total).c_str(), GiB(cap).c_str(),
                g.total <= cap ? StrCat("FITS (", GiB(cap - g.total), " free)").c_str()
                               : StrCat("DOES NOT FIT (", GiB(g.total - cap), " over)").c_str());
  }
  if (!a.project) return 0;
  const plan::TrainProjection p = plan::ProjectTraining(c, hw, m, a.seq_len, a.micro_batch, a.lora_rank, a.remat);
  std::printf("\nroofline projection, training (%d × %.3g TFLOP/s bf16, %.0f GB/s HBM, %.0f GB/s interconnect per chip):\n",
              m.Size(), hw.chip.bf16_tflops, hw.chip.memory_bandwidth_gb_s, hw.chip.interconnect_gb_s);
  std::printf("  FLOPs per token %.3g (%s; N = %.3g matmul params, attention at seq %lld)\n", p.flops_per_token,
              p.formula.c_str(), plan::MatmulParams(c), (long long)a.seq_len);
  std::printf("  step of %.0f tokens: compute %.3f s, HBM weight reads %.3f s, communication %.3f s → %.3f s (the largest)\n",
              p.tokens_per_step, p.t_compute, p.t_memory, p.t_comm, p.step_s);
  // $ per 1M tokens trained at a rate: an hour of the machine buys rate × 3600 tokens.
  auto per_m = [&](double tok_s) { return cost::Dollars(cost::TrainingCostOf(1.0, tok_s * 3600, hw.price_per_hour).cost_per_m_tokens); };
  std::printf("  projected %.0f tok/s%s\n", p.tokens_per_s,
              hw.price_per_hour > 0 ? StrCat(": ", per_m(p.tokens_per_s), " per 1M tokens trained at $",
                                             Num("%.2f", hw.price_per_hour), "/h").c_str()
                                    : "");
  if (IsReferenceModel(c)) {
    for (const plan::MeasuredTraining& r : plan::ReferenceTraining()) {
      if (hw.name != r.machine) continue;
      std::printf("  reference case measured %.0f tok/s on %s (%s, mesh %s): measured is %.3f of this projection; "
                  "%s per 1M tokens at the measured rate\n",
                  r.tokens_per_s, r.machine, r.source, r.mesh, r.tokens_per_s / p.tokens_per_s, per_m(r.tokens_per_s).c_str());
    }
  }
  return 0;
}

int PlanServing(const PlanArgs& a, const ModelConfig& c, const cost::Machine& hw, const plan::Mesh& m) {
  Status tp_ok = plan::CheckServeTp(c, m.tp);
  if (!tp_ok.ok()) return Fail(StrCat("plan --serve: mesh ", m.Text(), ": ", tp_ok.message()));
  const int kv_bytes = a.kv_dtype == "fp8" ? 1 : 2;
  const plan::ServeMemory s = plan::ServingMemory(c, m.tp, hw.chip.MemoryBytes(), a.max_model_len);
  std::printf("\nserving (vLLM-style: weights split over tp=%d%s, max_model_len %lld, gpu_memory_utilization %.2f):\n", m.tp,
              m.fsdp > 1 ? StrCat(", ", m.fsdp, " data-parallel replicas").c_str() : "", (long long)a.max_model_len,
              s.utilization);
  std::vector<int> noted;
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.KvHeads(l) < m.tp && std::find(noted.begin(), noted.end(), c.KvHeads(l)) == noted.end()) {
      noted.push_back(c.KvHeads(l));
      std::printf("  note: %s=%d < tp=%d: each kv head is replicated on %d devices\n",
                  c.KEqV(l) ? "num_global_key_value_heads" : "num_key_value_heads", c.KvHeads(l), m.tp, m.tp / c.KvHeads(l));
    }
  }
  std::printf("  weights (bf16) per device   %12s\n  activation reserve          %12s   (one %lld-token prefill)\n"
              "  KV cache budget per device  %12s   (%s × %.2f − weights − reserve)%s\n",
              GiB(s.weights).c_str(), GiB(s.activation_reserve).c_str(), (long long)a.max_model_len, GiB(s.budget).c_str(),
              GiB(hw.chip.MemoryBytes()).c_str(), s.utilization, s.fits ? "" : "  DOES NOT FIT");
  if (!s.fits) return 0;
  // Bytes per token per device for each layer type.
  int64_t full_tok[2] = {0, 0}, slide_tok[2] = {0, 0};
  for (int l = 0; l < c.num_layers; ++l) {
    for (int b = 0; b < 2; ++b) (c.IsFull(l) ? full_tok : slide_tok)[b] = plan::KvBytesPerTokenLayer(c, l, m.tp, b + 1);
  }
  std::printf("  KV per token per layer per device: sliding %lld B bf16 / %lld B fp8 (at most %d positions), full %lld B / %lld B\n",
              (long long)slide_tok[1], (long long)slide_tok[0], c.sliding_window, (long long)full_tok[1], (long long)full_tok[0]);
  std::printf("  %-10s %16s %16s %14s %14s\n", "context", "KV/seq bf16", "KV/seq fp8", "requests bf16", "requests fp8");
  std::vector<int64_t> contexts;
  for (int64_t ctx : {1024, 4096, 8192, 16384}) {
    if (ctx < a.max_model_len) contexts.push_back(ctx);
  }
  contexts.push_back(a.max_model_len);
  for (int64_t ctx : contexts) {
    const double b16 = double(plan::KvBytesPerSequence(c, ctx, m.tp, 2)), b8 = double(plan::KvBytesPerSequence(c, ctx, m.tp, 1));
    std::printf("  %-10lld %16s %16s %14.0f %14.0f\n", (long long)ctx, GiB(b16).c_str(), GiB(b8).c_str(),
                std::floor(s.budget / b16), std::floor(s.budget / b8));
  }
  const double per_token_all = double(plan::KvBytesPerSequence(c, a.max_model_len, m.tp, kv_bytes)) / double(a.max_model_len);
  std::printf("  KV capacity (%s): %.0f tokens in %lld-token sequences (requests × context; sliding layers hold only the window)\n",
              a.kv_dtype.c_str(), s.budget / per_token_all, (long long)a.max_model_len);
  if (!a.project) return 0;
  std::printf("\nroofline projection, serving (%s KV, tp=%d; TPOT at context = input + output/2):\n", a.kv_dtype.c_str(), m.tp);
  std::printf("  %-14s %12s %12s %14s %14s   %s\n", "input/output", "TTFT", "TPOT b=1", StrCat("TPOT b=", a.batch).c_str(),
              "measured TPOT", "measured / projected (b=1)");
  const bool ref = IsReferenceModel(c);
  for (const plan::MeasuredDecode& d : plan::ReferenceDecode()) {
    if (ref && (hw.name != d.machine || a.kv_dtype != d.kv_cache_dtype)) continue;
    if (!ref && d.machine != plan::ReferenceDecode()[0].machine) continue;  // the same contexts, no measurement
    const int64_t ctx = d.input_len + d.output_len / 2;
    const plan::ServeProjection p1 = plan::ProjectServing(c, hw, m.tp, d.input_len, ctx, 1, kv_bytes);
    const plan::ServeProjection pb = plan::ProjectServing(c, hw, m.tp, d.input_len, ctx, a.batch, kv_bytes);
    std::printf("  %-14s %9.1f ms %9.2f ms %11.2f ms", StrCat(d.input_len, "/", d.output_len).c_str(), p1.ttft_s * 1e3,
                p1.tpot_s * 1e3, pb.tpot_s * 1e3);
    if (ref) {
      const double tpot_ratio = d.median_tpot_ms / (p1.tpot_s * 1e3), ttft_ratio = d.median_ttft_ms / (p1.ttft_s * 1e3);
      std::printf(" %11.1f ms   TPOT %.2f×%s (TTFT measured %.0f ms = %.2f×%s)\n", d.median_tpot_ms, tpot_ratio,
                  tpot_ratio < 1 ? " BELOW THE BOUND" : "", d.median_ttft_ms, ttft_ratio, ttft_ratio < 1 ? " BELOW THE BOUND" : "");
    } else {
      std::printf(" %14s\n", "-");
    }
  }
  if (ref) {
    std::printf("  (measured: the reference case at 4 requests/s, FACTS §5; its concurrency is not reported, so the\n"
                "   projection is shown at batch 1 and at --batch; a ratio > 1 means slower than the roofline. A measured\n"
                "   time below the bound means the work was not what the row says: e.g. prompts served from a\n"
                "   prefix cache, or shorter than the stated length)\n");
  }
  return 0;
}

}  // namespace

int RunPlan(int argc, char** argv) {
  CLI::App app{"Sharding plan, memory per device and (--project) roofline projections for training and serving (docs/COST.md)."};
  PlanArgs a;
  app.add_option("--model", a.model, "model directory (config.json)");
  app.add_option("--preset", a.preset, "a named shape instead of --model: 31b, 26b-a4b, e4b, e2b, tiny, ...");
  app.add_option("--mesh", a.mesh, "device mesh fsdp=F,tp=T; F × T must equal the machine's chips")->required();
  app.add_option("--hardware", a.hardware, "machine type or chip of the catalog, or cpu (this machine, measured)")->required();
  app.add_option("--catalog", a.catalog, "hardware catalog TOML (default: the built-in data/hardware.toml)");
  app.add_flag("--train", a.train, "plan LoRA / full fine-tuning");
  app.add_option("--seq-len", a.seq_len, "training: tokens per sequence (default 3072)")->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  app.add_option("--micro-batch", a.micro_batch, "training: sequences per data-parallel group per step (default 1)")->check(CLI::Range(1, 1 << 16));
  auto* rank_opt = app.add_option("--lora-rank", a.lora_rank, "training: LoRA rank, 0 = full fine-tuning (default 64)")
                       ->check(CLI::Range(0, 1 << 16));
  app.add_flag("--full", a.full, "training: full fine-tuning (every weight; f32 masters, gradients and AdamW moments)");
  app.add_flag("--remat", a.remat, "training: recompute each decoder layer in the backward pass");
  app.add_flag("--serve", a.serve, "plan vLLM-style serving: weights, KV cache, concurrent requests");
  app.add_option("--max-model-len", a.max_model_len, "serving: longest context (default 16384)")->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  app.add_option("--kv-cache-dtype", a.kv_dtype, "serving: bf16 or fp8 (default bf16)")->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--batch", a.batch, "serving --project: concurrent sequences per decode step (default 1)")->check(CLI::Range(1, 1 << 16));
  app.add_flag("--project", a.project, "add roofline projections (training step, TTFT, TPOT) beside the reference case's measurements");
  CLI11_PARSE(app, argc, argv);
  a.lora_rank_given = rank_opt->count() > 0;
  if (a.model.empty() == a.preset.empty()) return Fail("plan: give exactly one of --model DIR or --preset NAME");
  if (!a.train && !a.serve) return Fail("plan: give --train and/or --serve");
  auto cfg = a.preset.empty() ? LoadModelConfig(a.model) : PresetConfig(a.preset);
  if (!cfg.ok()) return Fail(cfg.status());
  const ModelConfig& c = *cfg;
  if (c.arch != Arch::kGemma4) return Fail("plan: only Gemma 4 models are modelled (this is Gemma 3)");
  if (a.full) {
    if (a.lora_rank_given && a.lora_rank != 0) return Fail("plan: --full trains every weight; drop --lora-rank");
    a.lora_rank = 0;
  }
  auto mesh = plan::ParseMesh(a.mesh);
  if (!mesh.ok()) return Fail(mesh.status());
  const plan::Mesh m = *mesh;
  auto catalog = cost::HardwareCatalog::Load(a.catalog);
  if (!catalog.ok()) return Fail(catalog.status());
  auto hw = catalog->Find(a.hardware);
  if (!hw.ok()) return Fail(hw.status());
  const std::string chips_note = m.Size() != hw->chips ? StrCat("mesh ", m.Text(), " has ", m.Size(), " devices but ", hw->name,
                                                                " has ", hw->chips, " chip", hw->chips > 1 ? "s" : "")
                                                       : "";
  auto base = plan::BaseTensors(c);
  if (a.train) {
    Status s = plan::CheckBaseSharding(base, m);
    if (!s.ok()) {
      return Fail(StrCat("plan --train: mesh ", m.Text(), " cannot shard ", a.preset.empty() ? a.model : a.preset, ": ",
                         s.message(), " (tp values that shard every weight: ", WorkingTps(c, m.fsdp, 64), ")",
                         chips_note.empty() ? "" : "; besides, " + chips_note));
    }
  }
  if (!chips_note.empty()) return Fail(StrCat("plan: ", chips_note, " (fsdp × tp must equal the chips)"));
  std::printf("model %s: Gemma 4, %.2f B parameters, %d layers (%d full-attention), hidden %d, heads %d, kv heads %d sliding / %d full\n",
              a.preset.empty() ? a.model.c_str() : a.preset.c_str(), c.ParameterCount() / 1e9, c.num_layers,
              int(std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::kFull)), c.hidden_size, c.num_heads,
              c.num_kv_heads, c.KvHeads(FirstFullLayer(c)));
  if (c.hidden_size_per_layer_input > 0 || c.num_kv_shared_layers > 0) {
    std::printf("  per-layer embeddings: %d per layer and token (table %.2f B parameters, a lookup); the last %d layers "
                "read earlier layers' KV cache%s\n",
                c.hidden_size_per_layer_input,
                double(c.vocab_size_per_layer_input) * c.num_layers * c.hidden_size_per_layer_input / 1e9,
                c.num_kv_shared_layers, c.use_double_wide_mlp ? " and have a double-wide MLP" : "");
  }
  if (c.enable_moe_block) {
    std::printf("  mixture of experts: %d experts of width %d beside a dense MLP of %d, top %d per token: %.2f B "
                "parameters active per token\n",
                c.num_experts, c.moe_intermediate_size, c.intermediate_size, c.top_k_experts,
                (double(c.ParameterCount()) - c.num_layers * plan::ExpertParamsPerLayer(c) * (1.0 - double(c.top_k_experts) / c.num_experts)) / 1e9);
  }
  std::printf("hardware %s: %d × %s (%s, %.3g TFLOP/s bf16, %.0f GB/s)%s, mesh %s\n", hw->name.c_str(), hw->chips,
              hw->chip.name.c_str(), GiB(hw->chip.MemoryBytes()).c_str(), hw->chip.bf16_tflops, hw->chip.memory_bandwidth_gb_s,
              hw->price_per_hour > 0 ? StrCat(", $", Num("%.2f", hw->price_per_hour), "/h").c_str() : "", m.Text().c_str());
  int rc = 0;
  if (a.train) rc = PlanTraining(a, c, *hw, m, base);
  if (rc == 0 && a.serve) rc = PlanServing(a, c, *hw, m);
  return rc;
}

}  // namespace gk::cli
