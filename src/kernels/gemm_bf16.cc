#include "kernels/gemm_bf16.h"

#include <dnnl.hpp>
#include <immintrin.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "tensor/dtype.h"

namespace gk {
namespace {

using dnnl::memory;

// One matmul primitive per (M, N, K, weights transposed, accumulate): built once (oneDNN JITs
// it), reused while the shape recurs.
struct Primitives {
  std::mutex mu;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, dnnl::matmul> cache;
};

Primitives& Shared() {
  static Primitives* p = new Primitives();  // never destroyed: outlives static destructors' calls
  return *p;
}

// C (M×N, f32) = bf16(A) (M×K) · B, B = W (K×N view of the N×K matrix, transposed) or W itself
// (K×N); += when accumulate.
void Run(const uint16_t* a, const uint16_t* w, float* c, int64_t M, int64_t N, int64_t K, bool w_transposed,
         bool accumulate) {
  Primitives& p = Shared();
  std::lock_guard<std::mutex> lock(p.mu);
  const memory::desc a_md({M, K}, memory::data_type::bf16, memory::format_tag::ab);
  const memory::desc w_md({K, N}, memory::data_type::bf16, w_transposed ? memory::format_tag::ba : memory::format_tag::ab);
  const memory::desc c_md({M, N}, memory::data_type::f32, memory::format_tag::ab);
  auto key = std::make_tuple(M, N, K, w_transposed, accumulate);
  auto it = p.cache.find(key);
  if (it == p.cache.end()) {
    // Micro-batches of varying length make new shapes: bound what the cache holds (a JIT of a
    // shape costs about a millisecond).
    if (p.cache.size() >= 512) p.cache.clear();
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_md, c_md), attr, p.eng);
    it = p.cache.emplace(key, dnnl::matmul(pd)).first;
  }
  dnnl::stream stream(p.eng);
  memory am(a_md, p.eng, const_cast<uint16_t*>(a)), wm(w_md, p.eng, const_cast<uint16_t*>(w)), cm(c_md, p.eng, c);
  it->second.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, cm}});
  stream.wait();
}

std::vector<uint16_t>& Scratch(size_t n) {
  thread_local std::vector<uint16_t> s;
  if (s.size() < n) s.resize(n);
  return s;
}

// 32 values per vcvtne2ps2bf16 (round to nearest even, as F32ToBf16; only reached where the CPU
// has AVX-512 BF16): a scalar loop took 0.2 s of a 2.8 s step at 270M.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void RoundRange(const float* x, int64_t b, int64_t e,
                                                                        uint16_t* out) {
  int64_t i = b;
  for (; i + 32 <= e; i += 32) {
    const __m512 lo = _mm512_loadu_ps(x + i), hi = _mm512_loadu_ps(x + i + 16);
    _mm512_storeu_si512(out + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
  for (; i < e; ++i) out[i] = F32ToBf16(x[i]);
}

const uint16_t* Rounded(const float* x, int64_t n, ThreadPool& pool) {
  uint16_t* out = Scratch(size_t(n)).data();
  pool.ParallelFor(n, [&](int64_t b, int64_t e, int) { RoundRange(x, b, e, out); });
  return out;
}

// x rounded to bf16 and widened back: the emulated route's operand.
const float* RoundedF32(const float* x, int64_t n, ThreadPool& pool) {
  thread_local std::vector<float> s;
  if (s.size() < size_t(n)) s.resize(size_t(n));
  float* out = s.data();
  pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) out[i] = RoundToBf16(x[i]);
  });
  return out;
}

}  // namespace

bool Bf16ProductsAvailable(const MatrixView& w) {
  return w.dtype == DType::kBF16 && !w.packed && CpuHasAvx512Bf16() && ActiveIsa() == Isa::kAvx512;
}

void Bf16WeightMatMulEmulated(const MatrixView& w, const float* x, int64_t T, float* y, bool accumulate,
                              ThreadPool& pool) {
  WeightMatMul(w, RoundedF32(x, T * w.cols, pool), T, y, accumulate, pool);
}

void Bf16WeightMatMulTEmulated(const MatrixView& w, const float* dy, int64_t T, float* dx, bool accumulate,
                               ThreadPool& pool) {
  WeightMatMulT(w, RoundedF32(dy, T * w.rows, pool), T, dx, accumulate, pool);
}

void Bf16WeightMatMul(const MatrixView& w, const float* x, int64_t T, float* y, bool accumulate, ThreadPool& pool) {
  if (!Bf16ProductsAvailable(w)) return Bf16WeightMatMulEmulated(w, x, T, y, accumulate, pool);
  omp_set_num_threads(pool.size());  // this thread's next OpenMP team: oneDNN's threads
  Run(Rounded(x, T * w.cols, pool), static_cast<const uint16_t*>(w.data), y, T, w.rows, w.cols, true, accumulate);
}

void Bf16WeightMatMulT(const MatrixView& w, const float* dy, int64_t T, float* dx, bool accumulate, ThreadPool& pool) {
  if (!Bf16ProductsAvailable(w)) return Bf16WeightMatMulTEmulated(w, dy, T, dx, accumulate, pool);
  omp_set_num_threads(pool.size());
  Run(Rounded(dy, T * w.rows, pool), static_cast<const uint16_t*>(w.data), dx, T, w.cols, w.rows, false, accumulate);
}

}  // namespace gk
