// LoRA adapters in the Hugging Face PEFT layout (../shared/spec/gemma4.md §5.1):
//   y = W x + scaling · B (A dropout(x)),   scaling = alpha / r  (alpha / sqrt(r) with rsLoRA)
// A is (r, in), B is (out, r), both float32; the frozen W stays in the checkpoint's dtype.
// Module names are Hugging Face module paths (`model.language_model.layers.3.self_attn.q_proj`),
// tensor keys `base_model.model.<module>.lora_{A,B}.weight`, as PEFT saves them and vLLM loads them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "util/result.h"

namespace gk {

class LoraSource;  // model/lora_source.h

// The projections of a decoder layer that can carry a LoRA.
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;
const char* LoraTargetModule(LoraTarget t);  // "self_attn.q_proj", ..., "mlp.down_proj"

// A longer target_modules regex is refused: std::regex compiles and matches recursively, so a
// crafted pattern thousands of groups deep would overflow the stack (real ones are < 200 bytes).
inline constexpr size_t kMaxTargetRegexBytes = 1024;

struct LoraOptions {
  int rank = 8;
  double alpha = 16;
  bool use_rslora = false;
  double dropout = 0.0;
  // PEFT's target_modules: a regex (re.fullmatch over module names) or, when `target_list` is
  // non-empty, a list of names matched exactly or as a ".<name>" suffix.
  std::string target_regex = R"(.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj))";
  std::vector<std::string> target_list;
};

struct LoraModule {
  std::string name;  // Hugging Face module path
  int layer = 0;
  LoraTarget target = LoraTarget::kQ;
  int64_t in = 0, out = 0;
  std::vector<float> a;       // (rank, in)
  std::vector<float> b;       // (out, rank)
  std::vector<float> grad_a;  // gradients, same shapes (the trainer zeroes them per step)
  std::vector<float> grad_b;
};

class LoraAdapter {
 public:
  // One module per projection of the config whose name matches the options (PEFT's rule).
  // `prefix` is the checkpoint's tensor prefix (ModelWeights::prefix). Errors: no module
  // matches, rank < 1, an invalid regex.
  static Result<LoraAdapter> Create(const ModelConfig& config, const std::string& prefix, LoraOptions options);

  // PEFT's default initialisation: A ~ kaiming_uniform(a = √5) = U(−1/√in, 1/√in), B = 0, from
  // a std::mt19937_64 seeded with `seed` (module order, row-major).
  void InitPeft(uint64_t seed);

  // Reads a PEFT adapter directory (adapter_config.json + adapter_model.safetensors; factors
  // F32, BF16 or F16). Every tensor must belong to a projection of this model with the right
  // shape; errors name the key.
  static Result<LoraAdapter> LoadPeft(const std::string& dir, const ModelConfig& config, const std::string& prefix);
  // The factors of any LoraSource (the Qwix factors of a Tunix Orbax item: model/lora_source.h),
  // checked as LoadPeft checks a file: every module a projection of this model, one rank,
  // shapes (r, in) and (out, r). The scaling is the source's.
  static Result<LoraAdapter> FromSource(const LoraSource& source, const ModelConfig& config, const std::string& prefix);
  // Writes DIR/adapter_config.json and DIR/adapter_model.safetensors (F32), each atomically.
  Status SavePeft(const std::string& dir, const std::string& base_model) const;
  nlohmann::json PeftConfigJson(const std::string& base_model) const;

  const LoraOptions& options() const { return options_; }
  float scaling() const { return scaling_; }
  int rank() const { return options_.rank; }
  std::vector<LoraModule>& modules() { return modules_; }
  const std::vector<LoraModule>& modules() const { return modules_; }
  // The module of (layer, target), or null when that projection has none.
  LoraModule* Find(int layer, LoraTarget t);
  const LoraModule* Find(int layer, LoraTarget t) const;
  int64_t ParameterCount() const;
  // Tensor keys of module i.
  static std::string KeyA(const LoraModule& m) { return "base_model.model." + m.name + ".lora_A.weight"; }
  static std::string KeyB(const LoraModule& m) { return "base_model.model." + m.name + ".lora_B.weight"; }

 private:
  static Result<LoraAdapter> LoadPeftUnguarded(const std::string& dir, const ModelConfig& config,
                                               const std::string& prefix);  // LoadPeft without GuardedParse
  LoraOptions options_;
  float scaling_ = 1.f;
  std::vector<LoraModule> modules_;
  std::vector<int> index_;  // layer * kNumLoraTargets + target -> module index, -1 for none
};

}  // namespace gk
