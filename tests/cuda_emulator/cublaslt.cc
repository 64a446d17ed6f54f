// The CUDA emulator's cuBLASLt: the matmul subset gemmakit opens at run time
// (kernels/cuda/gemm.cc dlopens libcublasLt.so.13; the emulator's test binaries find this one
// first, by their run path). D = alpha·op(A)·op(B) + beta·C on column-major layouts, strided
// batches, f32/f16/bf16 inputs, f32 output and accumulation, as cuBLASLt computes with
// CUBLAS_COMPUTE_32F. What cuBLASLt would refuse, or silently get wrong, is checked: operand
// pointers below the alignment the heuristic was asked to assume, leading dimensions shorter
// than a column, operands that run past the end of their device allocation.
//
// Split-K, as cuBLASLt's heuristic picks it for products of few rows over a long sum: where the
// workspace and the preference's reduction-scheme mask allow, a product of at most kSplitKRows
// rows (B's columns) over K >= kSplitKMinK sums each half of K on its own and adds the halves,
// so that a row's bits depend on the row count there, as they may on a GPU.
#include <cublasLt.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

extern "C" void gk_emu_submit(cudaStream_t stream, std::function<void()>* op);
extern "C" int gk_emu_in_device(const void* p, size_t n);

namespace {

struct Desc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  int32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
};
struct Layout {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct Pref {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt's default assumption
  uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;  // every scheme allowed
};
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t));

// What the heuristic chose, inside the algorithm's opaque bytes: the alignments it assumed, and
// the parts K is summed in (1, or 2: split-K).
struct AlgoBits {
  uint32_t magic;
  uint32_t align[4];
  int32_t splits;
};
static_assert(sizeof(AlgoBits) <= sizeof(cublasLtMatmulAlgo_t));
constexpr uint32_t kMagic = 0x67656d6d;  // "gemm"
constexpr uint64_t kSplitKRows = 16, kSplitKMinK = 1024;

[[noreturn]] void Abort(const std::string& what) {
  std::fprintf(stderr, "cuda emulator (cuBLASLt): %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

size_t Bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

float Load(const void* base, cudaDataType_t t, size_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(base)[i]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return 0.f;
  }
}

// The bytes a layout spans from its first element: (cols - 1) columns of ld, one more column,
// per batch.
size_t Span(const Layout& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  const size_t one = (size_t(l.cols) - 1) * size_t(l.ld) + size_t(l.rows);
  return (size_t(l.batch - 1) * size_t(l.stride) + one) * Bytes(l.type);
}

// A new opaque object of cuBLASLt's (a fixed-size byte block) holding `value`.
template <class Opaque, class T>
Opaque* NewOpaque(const T& value) {
  auto* o = new Opaque{};
  std::memcpy(o, &value, sizeof value);
  return o;
}

template <class T>
void Set(T& field, const void* buf, size_t size) {
  if (size == sizeof(T)) std::memcpy(&field, buf, sizeof(T));
}

// `rows` runs of k elements, run r at base + r·ld: an operand read in place (f32 or bf16/f16
// widened as it is read), or gathered into f32 scratch.
struct Operand {
  const void* base;
  cudaDataType_t type;
  size_t ld;
};

// Run r of op(X): in place when the layout keeps it contiguous (`contiguous`), else gathered.
Operand Gather(const void* X, const Layout& l, size_t offset, int64_t rows, int64_t k, bool contiguous,
               std::vector<float>& scratch) {
  const size_t bytes = Bytes(l.type);
  if (contiguous) return {static_cast<const char*>(X) + offset * bytes, l.type, size_t(l.ld)};
  scratch.resize(size_t(rows) * size_t(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t p = 0; p < k; ++p) scratch[size_t(r * k + p)] = Load(X, l.type, offset + size_t(p) * size_t(l.ld) + size_t(r));
  }
  return {scratch.data(), CUDA_R_32F, size_t(k)};
}

template <class A, class B>
float DotOf(const A* a, const B* b, int64_t k) {
  auto widen = [](auto x) -> float {
    if constexpr (std::is_same_v<decltype(x), float>) return x;
    else if constexpr (std::is_same_v<decltype(x), __nv_bfloat16>) return __bfloat162float(x);
    else return __half2float(x);
  };
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t p = 0; p < k; ++p) s += widen(a[p]) * widen(b[p]);
  return s;
}

template <class A>
float DotWith(const A* a, const Operand& ob, int64_t j, int64_t k) {
  const size_t at = size_t(j) * ob.ld;
  switch (ob.type) {
    case CUDA_R_16BF: return DotOf(a, static_cast<const __nv_bfloat16*>(ob.base) + at, k);
    case CUDA_R_16F: return DotOf(a, static_cast<const __half*>(ob.base) + at, k);
    default: return DotOf(a, static_cast<const float*>(ob.base) + at, k);
  }
}

float Dot(const Operand& oa, int64_t i, const Operand& ob, int64_t j, int64_t k) {
  const size_t at = size_t(i) * oa.ld;
  switch (oa.type) {
    case CUDA_R_16BF: return DotWith(static_cast<const __nv_bfloat16*>(oa.base) + at, ob, j, k);
    case CUDA_R_16F: return DotWith(static_cast<const __half*>(oa.base) + at, ob, j, k);
    default: return DotWith(static_cast<const float*>(oa.base) + at, ob, j, k);
  }
}

// The workspace a split-K product takes: both halves' sums of every element of C, in f32.
uint64_t SplitKWorkspace(const Layout& c) { return 2 * c.rows * c.cols * uint64_t(c.batch) * sizeof(float); }

// Dot summed as split-K sums it: each half of k on its own, then the halves added.
float SplitDot(const Operand& oa, int64_t i, const Operand& ob, int64_t j, int64_t k) {
  const int64_t half = k / 2;
  const Operand ra{static_cast<const char*>(oa.base) + size_t(half) * Bytes(oa.type), oa.type, oa.ld};
  const Operand rb{static_cast<const char*>(ob.base) + size_t(half) * Bytes(ob.type), ob.type, ob.ld};
  return Dot(oa, i, ob, j, half) + Dot(ra, i, rb, j, k - half);
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = reinterpret_cast<cublasLtHandle_t>(new int(1));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete reinterpret_cast<int*>(h);
  return CUBLAS_STATUS_SUCCESS;
}
size_t cublasLtGetVersion() { return CUBLAS_VERSION; }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  Desc desc;
  desc.compute = compute;
  desc.scale = scale;
  *d = NewOpaque<cublasLtMatmulDescOpaque_t>(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  Desc* desc = reinterpret_cast<Desc*>(d);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: Set(desc->transa, buf, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: Set(desc->transb, buf, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: Set(desc->epilogue, buf, size); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (Bytes(type) == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (ld < int64_t(rows)) return CUBLAS_STATUS_INVALID_VALUE;  // column-major: ld covers a column
  Layout layout;
  layout.type = type;
  layout.rows = rows;
  layout.cols = cols;
  layout.ld = ld;
  *l = NewOpaque<cublasLtMatrixLayoutOpaque_t>(layout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  Layout* layout = reinterpret_cast<Layout*>(l);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: Set(layout->batch, buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: Set(layout->stride, buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: Set(layout->order, buf, size); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = NewOpaque<cublasLtMatmulPreferenceOpaque_t>(Pref{});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  Pref* pref = reinterpret_cast<Pref*>(p);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: Set(pref->max_workspace, buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: Set(pref->align[0], buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: Set(pref->align[1], buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: Set(pref->align[2], buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: Set(pref->align[3], buf, size); break;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: Set(pref->reduction_mask, buf, size); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  *found = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const Desc& desc = *reinterpret_cast<const Desc*>(d);
  const Layout &la = *reinterpret_cast<const Layout*>(a), &lb = *reinterpret_cast<const Layout*>(b),
               &lc = *reinterpret_cast<const Layout*>(c), &ld = *reinterpret_cast<const Layout*>(dl);
  if (desc.compute != CUBLAS_COMPUTE_32F || desc.scale != CUDA_R_32F || desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT ||
      la.type != lb.type || lc.type != CUDA_R_32F || ld.type != CUDA_R_32F || la.order != CUBLASLT_ORDER_COL ||
      lb.order != CUBLASLT_ORDER_COL || lc.order != CUBLASLT_ORDER_COL) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const uint64_t m = desc.transa == CUBLAS_OP_N ? la.rows : la.cols, ka = desc.transa == CUBLAS_OP_N ? la.cols : la.rows;
  const uint64_t kb = desc.transb == CUBLAS_OP_N ? lb.rows : lb.cols, n = desc.transb == CUBLAS_OP_N ? lb.cols : lb.rows;
  if (ka != kb || lc.rows != m || lc.cols != n || la.batch != lc.batch || lb.batch != lc.batch) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const Pref& pref = *reinterpret_cast<const Pref*>(p);
  cublasLtMatmulHeuristicResult_t r{};
  AlgoBits bits{kMagic, {pref.align[0], pref.align[1], pref.align[2], pref.align[3]}, 1};
  const uint64_t partials = SplitKWorkspace(lc);
  if (n <= kSplitKRows && ka >= kSplitKMinK && (pref.reduction_mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) != 0 &&
      pref.max_workspace >= partials) {
    bits.splits = 2;
  }
  std::memcpy(&r.algo, &bits, sizeof bits);
  r.workspaceSize = bits.splits > 1 ? partials : 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.f;
  results[0] = r;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// Whether `algo` runs this shape: any of the emulator's does (the alignments it assumed are
// checked at each call, as cuBLASLt leaves them to the caller).
cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t a,
                                       cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t,
                                       const cublasLtMatmulAlgo_t* algo, cublasLtMatmulHeuristicResult_t* result) {
  if (algo == nullptr || result == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  AlgoBits bits;
  std::memcpy(&bits, algo, sizeof bits);
  if (bits.magic != kMagic) return CUBLAS_STATUS_INVALID_VALUE;
  const Layout &la = *reinterpret_cast<const Layout*>(a), &lb = *reinterpret_cast<const Layout*>(b),
               &lc = *reinterpret_cast<const Layout*>(c);
  if (la.type != lb.type || lc.type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *result = cublasLtMatmulHeuristicResult_t{};
  result->algo = *algo;
  result->workspaceSize = bits.splits > 1 ? SplitKWorkspace(lc) : 0;
  result->state = CUBLAS_STATUS_SUCCESS;
  result->wavesCount = 1.f;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf, size_t size,
                                                    size_t* written) {
  AlgoBits bits;
  std::memcpy(&bits, algo, sizeof bits);
  if (bits.magic != kMagic) return CUBLAS_STATUS_INVALID_VALUE;
  int32_t value = 0;
  switch (attr) {
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM: value = bits.splits; break;
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME:
      value = bits.splits > 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_NONE;
      break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (written != nullptr) *written = sizeof value;
  if (size < sizeof value) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &value, sizeof value);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha_p, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta_p,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t stream) {
  if (algo == nullptr) return CUBLAS_STATUS_NOT_SUPPORTED;  // gemmakit always passes the heuristic's
  AlgoBits bits;
  std::memcpy(&bits, algo, sizeof bits);
  if (bits.magic != kMagic) return CUBLAS_STATUS_INVALID_VALUE;
  const Desc desc = *reinterpret_cast<const Desc*>(d);
  const Layout la = *reinterpret_cast<const Layout*>(a), lb = *reinterpret_cast<const Layout*>(b),
               lc = *reinterpret_cast<const Layout*>(c), ld = *reinterpret_cast<const Layout*>(dl);
  // The algorithm was chosen for operands aligned as the preference said (the heuristic saw
  // the leading dimensions and batch strides; the pointers it takes on trust).
  const void* ptrs[4] = {A, B, C, D};
  const Layout* lays[4] = {&la, &lb, &lc, &ld};
  for (int i = 0; i < 4; ++i) {
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % bits.align[i] != 0) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "operand %c at %p is not aligned to the %u bytes the algorithm was chosen for",
                    "ABCD"[i], ptrs[i], bits.align[i]);
      Abort(buf);
    }
    if (!gk_emu_in_device(ptrs[i], Span(*lays[i]))) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "operand %c: %zu bytes from %p are not inside one device allocation", "ABCD"[i],
                    Span(*lays[i]), ptrs[i]);
      Abort(buf);
    }
  }
  const float alpha = *static_cast<const float*>(alpha_p), beta = *static_cast<const float*>(beta_p);
  std::function<void()> op = [=] {
    const int64_t m = int64_t(lc.rows), n = int64_t(lc.cols);
    const int64_t k = int64_t(desc.transa == CUBLAS_OP_N ? la.cols : la.rows);
    // op(A)'s rows and op(B)'s columns as f32 runs over k: read in place where the layout
    // already has them (A transposed, B not: gemmakit's weight products), else gathered into
    // scratch that outlives the call (a fresh buffer per call would cost page faults).
    static thread_local std::vector<float> scratch_a, scratch_b;
    for (int32_t bi = 0; bi < lc.batch; ++bi) {
      const size_t a0 = size_t(bi) * size_t(la.stride), b0 = size_t(bi) * size_t(lb.stride);
      const Operand oa = Gather(A, la, a0, m, k, desc.transa == CUBLAS_OP_T, scratch_a);
      const Operand ob = Gather(B, lb, b0, n, k, desc.transb == CUBLAS_OP_N, scratch_b);
      const float* Cb = static_cast<const float*>(C) + size_t(bi) * size_t(lc.stride);
      float* Db = static_cast<float*>(D) + size_t(bi) * size_t(ld.stride);
      // op(A)'s rows in tiles of at most 128 KiB that stay in cache while a block of op(B)'s
      // columns passes over them: the weights are read from memory once per tile and column
      // block instead of once per column. Each element's sum is the same.
      const int64_t tile = std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, k));
      const int64_t col_block = 64;
      const int64_t tiles = (m + tile - 1) / tile, col_blocks = (n + col_block - 1) / col_block;
#pragma omp parallel for collapse(2) schedule(static) if (m * n * k > (1 << 20))
      for (int64_t t = 0; t < tiles; ++t) {
        for (int64_t cb = 0; cb < col_blocks; ++cb) {
          for (int64_t j = cb * col_block; j < std::min(n, (cb + 1) * col_block); ++j) {
            for (int64_t i = t * tile; i < std::min(m, (t + 1) * tile); ++i) {
              const float s = bits.splits == 1 ? Dot(oa, i, ob, j, k) : SplitDot(oa, i, ob, j, k);
              const float prior = beta != 0.f ? beta * Cb[size_t(j) * size_t(lc.ld) + size_t(i)] : 0.f;
              Db[size_t(j) * size_t(ld.ld) + size_t(i)] = alpha * s + prior;
            }
          }
        }
      }
    }
  };
  gk_emu_submit(stream, &op);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
