#include "model/lora_weights.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/packed_bf16.h"
#include "model/lora_source.h"

namespace gk {

std::shared_ptr<const LoraWeights> LoraWeights::Create(LoraAdapter adapter, const ModelConfig& config,
                                                      DType storage) {
  static std::atomic<uint64_t> next_id{1};
  auto w = std::make_shared<LoraWeights>();
  w->id_ = next_id.fetch_add(1);
  w->rank_ = adapter.rank();
  w->index_.assign(size_t(config.num_layers) * kNumLoraTargets, -1);
  const float scaling = adapter.scaling();
  const int64_t r = adapter.rank();
  const bool pack = storage == DType::kBF16 && ActiveIsa() == Isa::kAvx512 && CpuHasAvx512Bf16();
  for (LoraModule& m : adapter.modules()) {
    for (float& v : m.b) v *= scaling;
    Factors f;
    if (storage == DType::kF32) {
      w->f32_.push_back(std::move(m.a));
      w->f32_.push_back(std::move(m.b));
      f.a = MatrixView{DType::kF32, r, m.in, w->f32_[w->f32_.size() - 2].data()};
      f.b = MatrixView{DType::kF32, m.out, r, w->f32_.back().data()};
    } else {
      const int64_t rp = (r + 15) / 16 * 16;  // zero rows of A, zero columns of B
      std::vector<uint16_t> a(size_t(rp * m.in), 0), b(size_t(m.out * rp), 0);
      for (int64_t i = 0; i < r * m.in; ++i) a[size_t(i)] = F32ToBf16(m.a[size_t(i)]);
      for (int64_t o = 0; o < m.out; ++o) {
        for (int64_t k = 0; k < r; ++k) b[size_t(o * rp + k)] = F32ToBf16(m.b[size_t(o * r + k)]);
      }
      w->bf16_.push_back(std::move(a));
      w->bf16_.push_back(std::move(b));
      f.a = MatrixView{DType::kBF16, rp, m.in, w->bf16_[w->bf16_.size() - 2].data()};
      f.b = MatrixView{DType::kBF16, m.out, rp, w->bf16_.back().data()};
      for (MatrixView* v : {&f.a, &f.b}) {
        if (pack && CanPackBf16(*v)) PackBf16InPlace(v);
      }
    }
    w->bytes_ += uint64_t(f.a.bytes() + f.b.bytes());
    w->index_[size_t(m.layer) * kNumLoraTargets + size_t(m.target)] = int(w->factors_.size());
    w->factors_.push_back(f);
  }
  return w;
}

Result<LoraLocation> ParseLoraLocation(const std::string& text) {
  LoraLocation where;
  where.path = text;
  const size_t colon = text.rfind(":alpha=");
  if (colon != std::string::npos) {
    where.path = text.substr(0, colon);
    const std::string value = text.substr(colon + 7);
    char* end = nullptr;
    where.alpha = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || !(where.alpha > 0) || !std::isfinite(where.alpha)) {
      return Status::Error(StrCat("'", text, "': alpha must be a positive number, got '", value, "'"));
    }
  }
  if (where.path.empty()) return Status::Error(StrCat("'", text, "': the adapter path is empty"));
  return where;
}

Result<std::shared_ptr<const LoraWeights>> LoadLoraWeights(const LoraLocation& where, const std::string& base_dir,
                                                           const ModelConfig& config, const std::string& prefix,
                                                           int max_rank, DType storage) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(where.path, ec)) {
    return Status::Error(StrCat(where.path, ": no such adapter directory (a PEFT adapter or a Qwix Orbax item)"));
  }
  Result<LoraAdapter> adapter = Status::Error("");
  if (fs::exists(where.path + "/adapter_config.json", ec)) {
    if (where.alpha > 0) {
      return Status::Error(StrCat(where.path, ": alpha= is for Qwix items; a PEFT adapter has its own lora_alpha"));
    }
    adapter = LoraAdapter::LoadPeft(where.path, config, prefix);
  } else {
    // A step directory of a Tunix checkpoint holds the item as model_params.
    const std::string item = fs::is_directory(where.path + "/model_params", ec) ? where.path + "/model_params" : where.path;
    auto source = OpenQwixLoraSource(item, base_dir, where.alpha);
    if (!source.ok()) {
      return Status::Error(StrCat(where.path, ": neither a PEFT adapter (no adapter_config.json) nor a Qwix Orbax item (",
                                  source.message(), ")"));
    }
    adapter = LoraAdapter::FromSource(**source, config, prefix);
  }
  if (!adapter.ok()) return adapter.status();
  if (max_rank > 0 && adapter->rank() > max_rank) {
    return Status::Error(StrCat(where.path, ": the adapter's rank ", adapter->rank(), " is above --max-lora-rank ",
                                max_rank));
  }
  return LoraWeights::Create(std::move(*adapter), config, storage);
}

}  // namespace gk
