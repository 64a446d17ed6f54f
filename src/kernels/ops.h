// Element-wise and row-wise operations of the decoder, in float32. These are O(T·D) against
// the matrix products' O(T·D²); still, at decode they run once per row between matrix
// products, so the hot ones have AVX-512 versions (kernels/cpu/ops_avx512.cc) chosen at run
// time like MatMul (GEMMAKIT_ISA=scalar forces the loops here). The vector versions agree
// with the scalar ones to a few ulp (tanh/exp ≤ 2 ulp, sums in a different order).
#pragma once

#include <cstdint>

namespace gk {

// y = x / sqrt(mean(x²) + eps) * w over n elements; w == nullptr is the weightless norm.
// In place is allowed (y == x).
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y);
// RmsNorm over `rows` consecutive rows of n.
void RmsNormRows(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y);
// out[i] = gelu_tanh(gate[i]) * up[i].
void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out);
float GeluTanh(float x);
// x = cap · tanh(x / cap).
void Softcap(float* x, int64_t n, float cap);
// Softmax in place over n scores.
void SoftmaxInPlace(float* x, int64_t n);
// Log-softmax value of x[index] over n logits.
double LogSoftmaxAt(const float* x, int64_t n, int64_t index);
int64_t ArgMax(const float* x, int64_t n);
float Dot(const float* a, const float* b, int64_t n);
// y += a · x
void Axpy(float a, const float* x, float* y, int64_t n);
void Scale(float* x, int64_t n, float s);
void Add(const float* a, float* y, int64_t n);  // y += a

// Rotate-half ("NeoX") RoPE of one head vector of dim H in place: dimension i pairs with
// i + H/2. inv_freq has H/2 entries (zeros leave their pair unrotated).
void ApplyRope(float* v, int64_t H, const float* inv_freq, int64_t pos);
// The same rotation on `heads` consecutive heads of one token (heads × H): each sin/cos pair is
// computed once for all of them (it was ~4 % of prefill, once per head).
void ApplyRopeHeads(float* v, int64_t heads, int64_t H, const float* inv_freq, int64_t pos);
// The same in two steps, for a forward pass that rotates q and k of every layer at the same
// positions: RopeCosSin writes one position's H/2 cosines then H/2 sines (angles in double),
// ApplyRopeCosSin rotates `heads` heads with them. The model computes each token's angles once
// per pass instead of twice per layer (sin/cos was ~4 % of prefill samples).
void RopeCosSin(const float* inv_freq, int64_t half, int64_t pos, float* cos_sin);
void ApplyRopeCosSin(float* v, int64_t heads, int64_t H, const float* cos_sin);

// AVX-512 versions, same contracts (called through the functions above).
void RmsNormAvx512(const float* x, const float* w, int64_t n, float eps, float* y);
void GeluTanhMulAvx512(const float* gate, const float* up, int64_t n, float* out);
void SoftcapAvx512(float* x, int64_t n, float cap);
void SoftcapAvx2(float* x, int64_t n, float cap);
void RmsNormAvx2(const float* x, const float* w, int64_t n, float eps, float* y);
void GeluTanhMulAvx2(const float* gate, const float* up, int64_t n, float* out);
void SoftmaxInPlaceAvx2(float* x, int64_t n);
void SoftmaxInPlaceAvx512(float* x, int64_t n);
float DotAvx512(const float* a, const float* b, int64_t n);
void AxpyAvx512(float a, const float* x, float* y, int64_t n);
void ScaleAvx512(float* x, int64_t n, float s);
void AddAvx512(const float* a, float* y, int64_t n);

}  // namespace gk
