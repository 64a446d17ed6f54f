// Picking a row's next token where its logits are: the GPU's kernels/cuda/token_pick.h, and
// this file's reference on the CPU. At temperature 0 the argmax; else a draw from the softmax
// of logits / temperature, cut to the top_k most likely tokens and then to the top_p nucleus
// (Sampler's rules). The draw is a race: token i scores (x_i − max)/T − log(−log u_i), with u_i
// uniform from Philox4x32-10 keyed by the row's key at counter i, and the best survivor wins.
// That is a Gumbel-max draw: it needs no sort and no prefix sum over the vocabulary, and the
// same logits and key give the same token on any device. vLLM's GPU sampler races the same
// way, with exponential noise. The engines draw each row's key from the request's seeded
// generator on the host, so a seed still reproduces a run.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/host_device.h"


namespace gk {

struct TokenPick {
  float temperature = 0.f;  // <= 0: greedy (top_k and top_p then do not apply, as in Sampler)
  int32_t top_k = 0;        // 0: no limit
  float top_p = 1.f;        // 1: no limit
  uint64_t key = 0;         // the race's random key
};

// Order of likelihood: by logit, the lower index first among equal logits. This key orders
// floats as their values do (larger key: larger float; −0 and +0 equal).
GK_HOST_DEVICE inline uint32_t LogitOrderKey(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  if (b == 0x80000000u) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
GK_HOST_DEVICE inline float LogitOfOrderKey(uint32_t k) {
  const uint32_t b = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
}

// Philox4x32-10 (Salmon et al., SC'11), as Random123 and cuRAND define it.
GK_HOST_DEVICE inline void Philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Token i's uniform draw in (0, 1): 23 random bits, centred, exact in float.
GK_HOST_DEVICE inline float RaceUniform(uint64_t key, int64_t i) {
  const uint32_t counter[4] = {uint32_t(uint64_t(i)), uint32_t(uint64_t(i) >> 32), 0u, 0u};
  const uint32_t k[2] = {uint32_t(key), uint32_t(key >> 32)};
  uint32_t out[4];
  Philox4x32_10(counter, k, out);
  return (float(out[0] >> 9) + 0.5f) * 0x1p-23f;
}

// (x − max) · (1/T) in f32, rounded after each step on both devices (no fused multiply-add).
GK_HOST_DEVICE inline float ScaledLogit(float x, float max, float inv_t) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(__fsub_rn(x, max), inv_t);
#else
  return (x - max) * inv_t;
#endif
}
// The unnormalised probability top_p measures: exp((x − max)/T), as Sampler computes it.
GK_HOST_DEVICE inline float RaceWeight(float x, float max, float inv_t) { return expf(ScaledLogit(x, max, inv_t)); }
// Token i's score in the race: its scaled logit plus Gumbel noise −log(−log u_i).
GK_HOST_DEVICE inline float RaceScore(float x, float max, float inv_t, uint64_t key, int64_t i) {
  const float e = -logf(RaceUniform(key, i));
#if defined(__CUDA_ARCH__)
  return __fsub_rn(ScaledLogit(x, max, inv_t), logf(e));
#else
  return ScaledLogit(x, max, inv_t) - logf(e);
#endif
}

// The CPU reference (the GPU's tests check PickTokens against it). At temperature > 0: the
// tokens that take part in the race, most likely first: the top_k most likely, then of those
// the shortest run whose weights reach top_p of theirs (at least one).
std::vector<int32_t> TokenPickSurvivors(const float* logits, int64_t n, const TokenPick& p);
// The token p picks from n logits.
int32_t PickTokenReference(const float* logits, int64_t n, const TokenPick& p);

}  // namespace gk
