// The CUDA emulator's warp matrix functions (nvcuda::wmma), for kernels that include <mma.h>.
// Every lane holds the whole tile (the hardware spreads it over the warp; the layout is opaque
// to the kernel, so only the results can be compared). The checks are the programming guide's:
// 16-bit operands only for m16n16k16, pointers 256-bit aligned, ldm a multiple of 16 bytes.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda_emulator.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K>
struct TileShape;
template <int M, int N, int K>
struct TileShape<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct TileShape<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct TileShape<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has the m16n16k16 shape only");
  static_assert(std::is_same_v<Use, accumulator> ? (std::is_same_v<T, float> || std::is_same_v<T, __half>)
                                                 : (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>),
                "m16n16k16 takes f16 or bf16 operands and an f32 or f16 accumulator");
  static constexpr int rows = TileShape<Use, M, N, K>::rows, cols = TileShape<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];  // row-major: x[r * cols + c]
};

namespace detail {
template <class T>
void CheckOperand(const T* p, unsigned ldm) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) ::gk_emu::Fail("wmma: the tile's pointer is not 256-bit aligned");
  if ((size_t(ldm) * sizeof(T)) % 16 != 0) ::gk_emu::Fail("wmma: ldm is not a multiple of 16 bytes");
}
}  // namespace detail

template <class T>
void fill_fragment(fragment<accumulator, 16, 16, 16, T>& f, T v) {
  for (T& e : f.x) e = v;
}
template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  detail::CheckOperand(p, ldm);
  using F = fragment<Use, 16, 16, 16, T, Layout>;
  for (int r = 0; r < F::rows; ++r) {
    for (int c = 0; c < F::cols; ++c) {
      f.x[r * F::cols + c] = std::is_same_v<Layout, row_major> ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
    }
  }
}
template <class T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm, layout_t layout) {
  detail::CheckOperand(p, ldm);
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.x[r * 16 + c] = layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
    }
  }
}
template <class T>
void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm, layout_t layout) {
  detail::CheckOperand(p, ldm);
  ::gk_emu::SyncWarp(0xffffffffu);  // every lane has read its operands before any lane writes
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      (layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r]) = f.x[r * 16 + c];
    }
  }
  ::gk_emu::SyncWarp(0xffffffffu);
}
// d = a·b + c, products exact and sums in f32 (as the tensor cores accumulate), each sum over k
// in order. The operands are widened once, not per product: the 16-bit types' conversions are
// function calls here, and every lane computes the whole tile.
template <class T, class LA, class LB, class C>
void mma_sync(fragment<accumulator, 16, 16, 16, C>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, C>& c) {
  float fa[256], fb[256], s[256];
  for (int i = 0; i < 256; ++i) fa[i] = float(a.x[i]), fb[i] = float(b.x[i]), s[i] = float(c.x[i]);
  for (int i = 0; i < 16; ++i) {
    for (int k = 0; k < 16; ++k) {
      const float aik = fa[i * 16 + k];
      for (int j = 0; j < 16; ++j) s[i * 16 + j] += aik * fb[k * 16 + j];
    }
  }
  for (int i = 0; i < 256; ++i) d.x[i] = C(s[i]);
}

}  // namespace nvcuda::wmma
