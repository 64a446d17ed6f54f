#include "kernels/train_ops.h"

#include <cmath>

#include "kernels/isa.h"

namespace gk {

void RmsNormBackward(const float* x, const float* w, int64_t n, float eps, const float* dy, float* dx,
                     bool accumulate) {
  double ss = 0, gx = 0;
  for (int64_t i = 0; i < n; ++i) {
    ss += double(x[i]) * x[i];
    gx += double(dy[i]) * (w ? w[i] : 1.f) * x[i];
  }
  const double r = 1.0 / std::sqrt(ss / double(n) + double(eps));
  const float a = float(r), b = float(r * r * r * gx / double(n));
  for (int64_t i = 0; i < n; ++i) {
    const float g = dy[i] * (w ? w[i] : 1.f);
    const float v = a * g - b * x[i];
    dx[i] = accumulate ? dx[i] + v : v;
  }
}

float GeluTanhDerivative(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  const float x2 = x * x;
  const float t = std::tanh(kC * (x + 0.044715f * x * x2));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kC * (1.f + 3.f * 0.044715f * x2);
}

void GeluTanhMulBackward(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                         float* dup) {
  constexpr float kC = 0.7978845608028654f;
  const int64_t done = ActiveIsa() != Isa::kScalar ? GeluTanhMulBackwardAvx2(gate, up, dout, n, dgate, dup) : 0;
  for (int64_t i = done; i < n; ++i) {
    const float x = gate[i], x2 = x * x;
    const float t = std::tanh(kC * (x + 0.044715f * x * x2));
    const float gelu = 0.5f * x * (1.f + t);
    const float d = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kC * (1.f + 3.f * 0.044715f * x2);
    dgate[i] = dout[i] * up[i] * d;
    dup[i] = dout[i] * gelu;
  }
}

float RowMaxArg(const float* z, int64_t n, int64_t* arg) {
  if (ActiveIsa() != Isa::kScalar && n >= 16 && n < (int64_t(1) << 31)) return RowMaxArgAvx2(z, n, arg);
  float m = z[0];
  int64_t a = 0;
  for (int64_t j = 1; j < n; ++j) {
    if (z[j] > m) m = z[j], a = j;
  }
  *arg = a;
  return m;
}

double SumExpMinus(const float* z, int64_t n, float m) {
  if (ActiveIsa() != Isa::kScalar) return SumExpMinusAvx2(z, n, m);
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(double(z[j] - m));
  return s;
}

double SumExpMinusAndGradRow(float* z, int64_t n, float m, float cap) {
  if (ActiveIsa() != Isa::kScalar) return SumExpMinusAndGradRowAvx2(z, n, m, cap);
  const double s = SumExpMinus(z, n, m);
  CrossEntropyGradRow(z, n, m, -1, cap, 1.f);
  return s;
}

void CrossEntropyGradRow(float* z, int64_t n, float lse, int64_t target, float cap, float scale) {
  if (ActiveIsa() != Isa::kScalar) return CrossEntropyGradRowAvx2(z, n, lse, target, cap, scale);
  for (int64_t j = 0; j < n; ++j) {
    const float th = cap > 0.f ? z[j] / cap : 0.f;
    z[j] = (std::exp(z[j] - lse) - (j == target ? 1.f : 0.f)) * (1.f - th * th) * scale;
  }
}

uint64_t MixKey(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace gk
