#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

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
  constexpr int64_t kMaxHalf = 1024;  // every Gemma head (H ≤ 512) stays on the stack
  float stack[2 * kMaxHalf];
  std::vector<float> heap;
  float* cos_sin = stack;
  if (H / 2 > kMaxHalf) {
    heap.resize(size_t(H));
    cos_sin = heap.data();
  }
  RopeCosSin(inv_freq, H / 2, pos, cos_sin);
  ApplyRopeCosSin(v, heads, H, cos_sin);
}

void RopeCosSin(const float* inv_freq, int64_t half, int64_t pos, float* cos_sin) {
  for (int64_t i = 0; i < half; ++i) {
    // Angles in double: positions reach 10^5 and float angles would lose the low bits. A zero
    // frequency (partial RoPE) is the identity: cos 1, sin 0.
    const double angle = double(pos) * double(inv_freq[i]);
    cos_sin[i] = inv_freq[i] == 0.f ? 1.f : float(std::cos(angle));
    cos_sin[half + i] = inv_freq[i] == 0.f ? 0.f : float(std::sin(angle));
  }
}

void ApplyRopeCosSin(float* v, int64_t heads, int64_t H, const float* cos_sin) {
  const int64_t half = H / 2;
  const float* c = cos_sin;
  const float* s = cos_sin + half;
  for (int64_t h = 0; h < heads; ++h) {
    float* x = v + h * H;
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[i], b = x[i + half];
      x[i] = a * c[i] - b * s[i];
      x[i + half] = b * c[i] + a * s[i];
    }
  }
}

}  // namespace gk
