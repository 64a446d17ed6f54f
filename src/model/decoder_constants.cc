#include "model/decoder_constants.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace gk {

std::vector<float> RopeInvFreq(const RopeParams& r, int H) {
  std::vector<float> f(size_t(H / 2), 0.f);
  const int rotated = int(r.partial_rotary_factor * float(H) / 2.f);
  for (int i = 0; i < rotated && i < H / 2; ++i) {
    f[size_t(i)] = float(1.0 / std::pow(double(r.theta), 2.0 * i / double(H)) / double(r.scaling_factor));
  }
  return f;
}

LayerRope MakeLayerRope(const ModelConfig& c) {
  LayerRope r;
  std::vector<std::pair<bool, int>> keys;  // per slot: (full, head dim)
  for (int l = 0; l < c.num_layers; ++l) {
    const std::pair<bool, int> key{c.IsFull(l), c.HeadDim(l)};
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      r.head_dim.push_back(key.second);
      r.inv_freq.push_back(RopeInvFreq(c.Rope(l), key.second));
      it = keys.end() - 1;
    }
    r.slot.push_back(int(it - keys.begin()));
  }
  return r;
}

float ScaleInDtype(int n, DType dt) {
  const float s = std::sqrt(float(n));
  if (dt == DType::kBF16) return RoundToBf16(s);
  if (dt == DType::kF16) return F16ToF32(F32ToF16(s));
  return s;
}

float AttentionScale(const ModelConfig& c) {
  return c.arch == Arch::kGemma3 ? 1.f / std::sqrt(c.query_pre_attn_scalar) : 1.f;
}

}  // namespace gk
