#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/isa.h"

namespace gk {
namespace {

inline bool UseAvx512() { return ActiveIsa() == Isa::kAvx512; }

}  // namespace

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  if (UseAvx512()) return RmsNormAvx512(x, w, n, eps, y);
  if (ActiveIsa() == Isa::kAvx2) return RmsNormAvx2(x, w, n, eps, y);
  double ss = 0;  // double: the mean of squares over thousands of values
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv;
  }
}

void RmsNormRows(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) RmsNorm(x + r * n, w, n, eps, y + r * n);
}

float GeluTanh(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.f + std::tanh(kC * (x + 0.044715f * x * x * x)));
}

void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) {
  if (UseAvx512()) return GeluTanhMulAvx512(gate, up, n, out);
  if (ActiveIsa() == Isa::kAvx2) return GeluTanhMulAvx2(gate, up, n, out);
  for (int64_t i = 0; i < n; ++i) out[i] = GeluTanh(gate[i]) * up[i];
}

void Softcap(float* x, int64_t n, float cap) {
  if (UseAvx512()) return SoftcapAvx512(x, n, cap);
  if (ActiveIsa() == Isa::kAvx2) return SoftcapAvx2(x, n, cap);
  const float inv = 1.f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void SoftmaxInPlace(float* x, int64_t n) {
  if (UseAvx512()) return SoftmaxInPlaceAvx512(x, n);
  if (ActiveIsa() == Isa::kAvx2) return SoftmaxInPlaceAvx2(x, n);
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  const float inv = 1.f / s;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

double LogSoftmaxAt(const float* x, int64_t n, int64_t index) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  return double(x[index]) - m - std::log(s);
}

int64_t ArgMax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

float Dot(const float* a, const float* b, int64_t n) {
  if (UseAvx512()) return DotAvx512(a, b, n);
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  if (UseAvx512()) return AxpyAvx512(a, x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void Scale(float* x, int64_t n, float s) {
  if (UseAvx512()) return ScaleAvx512(x, n, s);
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void Add(const float* a, float* y, int64_t n) {
  if (UseAvx512()) return AddAvx512(a, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] += a[i];
}

void ApplyRope(float* v, int64_t H, const float* inv_freq, int64_t pos) { ApplyRopeHeads(v, 1, H, inv_freq, pos); }

void ApplyRopeHeads(float* v, int64_t heads, int64_t H, const float* inv_freq, int64_t pos) {
  const int64_t half = H / 2;
  for (int64_t i = 0; i < half; ++i) {
    if (inv_freq[i] == 0.f) continue;
    // Angles in double: positions reach 10^5 and float angles would lose the low bits.
    const double angle = double(pos) * double(inv_freq[i]);
    const float c = float(std::cos(angle)), s = float(std::sin(angle));
    for (int64_t h = 0; h < heads; ++h) {
      float* x = v + h * H;
      const float a = x[i], b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = b * c + a * s;
    }
  }
}

}  // namespace gk
