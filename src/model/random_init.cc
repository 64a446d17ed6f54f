#include "model/random_init.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "model/weights.h"
#include "util/atomic_file.h"

namespace gk {
namespace {

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Values of one tensor: uniform on [center - half, center + half].
struct Distribution {
  float center = 0.f;
  float half = 0.f;
};

Distribution DistributionFor(const WeightSlot& w, Arch arch) {
  switch (w.kind) {
    case WeightKind::kMatrix:
    case WeightKind::kExperts: {
      const float std_dev = 1.f / std::sqrt(float(w.shape.back()));  // unit-variance outputs
      return {0.f, std::sqrt(3.f) * std_dev};
    }
    case WeightKind::kNorm: return {arch == Arch::kGemma3 ? 0.f : 1.f, 0.1f};
    case WeightKind::kScale: return {1.f, 0.1f};
    case WeightKind::kScalar: return {1.f, 0.2f};
  }
  return {};
}

void Fill(const WeightSlot& w, Arch arch, uint64_t seed, DType dtype, uint8_t* dst, size_t nbytes) {
  const Distribution d = DistributionFor(w, arch);
  uint64_t state = seed ^ HashName(w.name);
  const size_t n = nbytes / DTypeSize(dtype);
  for (size_t i = 0; i < n; ++i) {
    const float u = float(SplitMix(state) >> 40) * (1.f / float(1 << 24));  // [0, 1)
    const float v = d.center + (2.f * u - 1.f) * d.half;
    if (dtype == DType::kBF16) {
      const uint16_t b = F32ToBf16(v);
      std::memcpy(dst + 2 * i, &b, 2);
    } else {
      std::memcpy(dst + 4 * i, &v, 4);
    }
  }
}

}  // namespace

Status WriteRandomModel(const ModelConfig& c, const std::string& dir, const RandomModelOptions& o) {
  if (o.dtype != DType::kBF16 && o.dtype != DType::kF32) {
    return Status::Error("init writes bf16 or f32 weights");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error(StrCat("cannot create ", dir, ": ", ec.message()));
  ModelConfig written = c;
  written.torch_dtype = o.dtype == DType::kBF16 ? "bfloat16" : "float32";
  GK_RETURN_IF_ERROR(WriteFileAtomic(dir + "/config.json", ModelConfigToJson(written).dump(2) + "\n"));
  nlohmann::json gen = {{"bos_token_id", c.bos_token_id}, {"pad_token_id", c.pad_token_id},
                        {"eos_token_id", c.eos_token_ids}, {"do_sample", true},
                        {"temperature", 1.0}, {"top_k", 64}, {"top_p", 0.95}};
  if (c.arch == Arch::kGemma4) gen["eos_token_id"] = {1, 106, 50};
  GK_RETURN_IF_ERROR(WriteFileAtomic(dir + "/generation_config.json", gen.dump(2) + "\n"));
  if (!o.write_weights) return Status::Ok();

  std::vector<TensorSpec> specs;
  for (const WeightSlot& w : WeightSlots(c, "model.")) {
    TensorSpec s;
    s.name = w.name;
    s.shape = w.shape;
    s.dtype = o.dtype;
    const Arch arch = c.arch;
    const uint64_t seed = o.seed;
    const DType dtype = o.dtype;
    s.fill = [w, arch, seed, dtype](uint8_t* dst, size_t nbytes) {
      Fill(w, arch, seed, dtype, dst, nbytes);
      return Status::Ok();
    };
    specs.push_back(std::move(s));
  }
  return WriteSafetensorsDir(dir, specs, o.max_shard_bytes, {{"format", "pt"}});
}

}  // namespace gk
