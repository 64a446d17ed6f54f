// Weight products on the GPU through cuBLASLt: y (T × rows) = x (T × cols) · Wᵀ, the CUDA twin
// of kernels/matmul.h. W is row-major (PyTorch's (out, in)), bf16 or f32; y is f32.
//   bf16 W: x goes in as bf16 (rounded once, as vLLM's bf16 models compute), or, in the split
//           mode of kernels/matmul.h (Bf16Activations::kSplit), as hi + lo, two bf16 products
//           summed (x to ~2^-17, as the CPU's split computes), or, with set_exact_split, as three
//           (x exactly: an f32 product up to the order of its sums). f32 accumulation.
//   f32 W:  f32 throughout, TF32 off (CUBLAS_COMPUTE_32F), so f32 models stay f32-exact.
// libcublasLt is opened at run time (dlopen), the first time a GemmRunner is made: the binary
// starts on machines without it, and only the CUDA runner needs the 500 MB library.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "kernels/cuda/bf16_staging.h"
#include "kernels/cuda/cuda_memory.h"
#include "tensor/dtype.h"
#include "util/result.h"

namespace gk::cuda {

// A weight matrix in device memory.
struct DeviceMatrix {
  DType dtype = DType::kBF16;  // kBF16 or kF32
  int64_t rows = 0;            // out features
  int64_t cols = 0;            // in features
  const void* data = nullptr;
  bool empty() const { return data == nullptr; }
};

// Strided batched products, every matrix row-major: for b < batch,
//   y_b (M × N, row stride ldy) = alpha · x_b (M × K, row stride ldx) · w_bᵀ (w_b: N × K, row stride ldw)
//                                 + beta · y_b
// with x_b = x + b·stride_x elements (likewise w, y). x and w are both bf16, f16 or f32; y is f32.
// x_trans: x_b is stored K × M (its transpose is the operand); w_trans: w_b is stored K × N and
// the product is x_b · w_b. The backward pass's products take these: input gradients dx = dy·W
// (w_trans), weight gradients dW = dyᵀ·x (x_trans). Attention's score and value products use it
// too (kernels/cuda/attention_prefill.h).
struct BatchedProduct {
  DType dtype = DType::kBF16;
  int64_t M = 0, N = 0, K = 0;
  const void* x = nullptr;
  int64_t ldx = 0, stride_x = 0;
  const void* w = nullptr;
  int64_t ldw = 0, stride_w = 0;
  float* y = nullptr;
  int64_t ldy = 0, stride_y = 0;
  int batch = 1;
  float alpha = 1.f;
  float beta = 0.f;
  bool x_trans = false, w_trans = false;
};

class GemmRunner {
 public:
  // Opens cuBLASLt (once per process) and makes a handle and workspace for `stream`.
  // Errors: the library is missing or too old, out of device memory.
  static Result<std::unique_ptr<GemmRunner>> Create(cudaStream_t stream);
  ~GemmRunner();

  // y = x · Wᵀ (beta 0) or y += x · Wᵀ (accumulate). x: T rows of W.cols f32 (device). For bf16
  // W, x is first converted into this runner's staging buffer. Queued on the stream.
  Status Run(const DeviceMatrix& w, const float* x, int64_t T, float* y, bool accumulate = false);
  // Products that share an input, converted once by the kernel that makes it: StagingFor(n)
  // gives the bf16 buffers of n activations in the active mode (Bf16Staging: 1, 2 or 3 terms),
  // which that kernel fills beside its f32 output; RunStaged then runs y = x · Wᵀ on them (x_f32,
  // the f32 output, for f32 W), as Run would. The buffers hold until the next Run, RunInputGrad
  // or StagingFor.
  Result<Bf16Staging> StagingFor(size_t n);
  Status RunStaged(const DeviceMatrix& w, const float* x_f32, int64_t T, float* y);
  // y = x · Wᵀ + beta · y with x already in W's dtype (T rows of W.cols).
  Status RunPrepared(const DeviceMatrix& w, const void* x, int64_t T, float* y, float beta);
  // The backward pass's input gradient dx = dy · W (dx += with accumulate): dy is T rows of
  // W.rows f32, dx T rows of W.cols. For bf16 W, dy goes in as bf16 as x does in Run (rounded,
  // or hi + lo in split mode).
  Status RunInputGrad(const DeviceMatrix& w, const float* dy, int64_t T, float* dx, bool accumulate = false);
  // A strided batch of products (BatchedProduct). Queued on the stream.
  Status RunBatched(const BatchedProduct& p);
  // Counts the times the bf16 staging buffers moved (grew): a CUDA graph that captured products
  // of bf16 weights reads them, and is stale once this changes.
  uint64_t staging_moves() const { return staging_moves_; }
  // The split mode in three bf16 terms instead of two (1.5× its products): f32-exact products
  // against bf16 weights, which the trainer's f32 precision promises (TrainingModel widens the
  // weights). Two terms leave ~2^-17 of each activation, which the toy models amplify to ~1e-4
  // of a gradient tensor; inference keeps two, as the CPU does.
  void set_exact_split(bool on) { exact_split_ = on; }
  // Run and RunStaged of bf16 weights on at most `max_tokens` rows of x through the GEMV kernel
  // (kernels/cuda/gemv.h) instead of cuBLASLt; 0 (the default): cuBLASLt always.
  void set_small_batch_gemv(int max_tokens) { gemv_max_tokens_ = max_tokens; }
  // Batch-invariant products (vLLM's VLLM_BATCH_INVARIANT): a row of y has the same bits whatever
  // the number of rows T beside it. cuBLASLt's heuristic picks an algorithm per shape, and for
  // few rows one that splits the sum over K (split-K, reduced after): the same row then sums in
  // another order at batch 1 than at batch 16. On, every product of a weight shape takes one
  // algorithm, chosen for kPinnedRows rows among those without split-K, and checked
  // (cublasLtMatmulAlgoCheck) for each T it meets; the GEMV kernel is not used. Products whose x
  // is stored transposed (the trainer's weight gradients) keep the per-shape choice.
  void set_batch_invariant(bool on);
  static constexpr int64_t kPinnedRows = 128;
  // The product shapes whose descriptors and algorithm are kept: at most kMaxCachedShapes, as a
  // server meets a new T at every batch size and a new attention product at every context
  // length; past it the cache starts again (each shape costs one heuristic query, ~10 µs).
  static constexpr size_t kMaxCachedShapes = 4096;
  size_t cached_shapes() const { return algos_.size(); }

 private:
  GemmRunner() = default;
  struct Algo;
  // The descriptors and algorithm of one product shape (a BatchedProduct's, pointers aside).
  Result<const Algo*> FindAlgo(const BatchedProduct& p);
  Result<const Algo*> FindAlgo(const DeviceMatrix& w, int64_t T);
  // The product's descriptors (algorithm aside).
  Status Describe(const BatchedProduct& p, Algo& a) const;
  // The heuristic's algorithms for a's shape, best first: its best; or, with no_split_k, up to
  // eight that sum each element in one pass over K.
  Result<std::vector<cublasLtMatmulAlgo_t>> Heuristic(const Algo& a, const BatchedProduct& p, bool no_split_k) const;
  // Whether `algo` runs a's shape with the runner's workspace (cublasLtMatmulAlgoCheck).
  Status CheckAlgo(const Algo& a, const cublasLtMatmulAlgo_t& algo) const;
  // The batch-invariant algorithm of p's shape whatever p.M (set_batch_invariant).
  Result<cublasLtMatmulAlgo_t> PinnedAlgo(const BatchedProduct& p);
  Status Matmul(const Algo& a, const BatchedProduct& p, float beta);
  // Staging for `terms` bf16 copies of `elements` activations.
  Status Ensure(size_t elements, int terms);
  // Converts x (n floats) into the staging buffers: 1 term in the round mode, 2 or 3 in split.
  Result<int> Stage(const float* x, size_t n);
  // The terms the active mode takes: 1 (round), 2 (split) or 3 (exact split).
  int Terms() const;
  // Whether a product of W on T rows of x goes through the GEMV kernel.
  bool TakesGemv(const DeviceMatrix& w, const float* x, int64_t T) const;

  cudaStream_t stream_ = nullptr;
  void* handle_ = nullptr;  // cublasLtHandle_t
  DeviceBuffer<std::byte> workspace_;
  std::array<DeviceBuffer<uint16_t>, 3> staging_;  // x as bf16 (and its remainders, split mode)
  uint64_t staging_moves_ = 0;
  int staged_terms_ = 0;  // what the last StagingFor asked for (RunStaged)
  bool exact_split_ = false;
  int gemv_max_tokens_ = 0;
  bool batch_invariant_ = false;
  // Keyed by (dtype, M, N, K, ldx, ldw, ldy, stride_x, stride_w, stride_y, batch, x_trans, w_trans).
  std::map<std::array<int64_t, 13>, std::unique_ptr<Algo>> algos_;
  std::map<std::array<int64_t, 13>, cublasLtMatmulAlgo_t> pinned_;  // the same key with M = 0
};

// y (M × N, row stride ldy) = alpha · op(x) · op(w) + beta · y, all f32 (TF32 off): LoRA's
// products, whose factors are f32. op(x) is x (M × K) or, with x_trans, the transpose of x
// stored K × M; op(w) is wᵀ (w: N × K) or, with w_trans, w stored K × N.
inline Status F32Product(GemmRunner& gemm, int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, bool x_trans,
                         const float* w, int64_t ldw, bool w_trans, float* y, int64_t ldy, float alpha, float beta) {
  BatchedProduct p;
  p.dtype = DType::kF32;
  p.M = M, p.N = N, p.K = K;
  p.x = x, p.ldx = ldx, p.x_trans = x_trans;
  p.w = w, p.ldw = ldw, p.w_trans = w_trans;
  p.y = y, p.ldy = ldy;
  p.alpha = alpha, p.beta = beta;
  return gemm.RunBatched(p);
}

// x (n floats) as bf16 rounded to nearest even (hi), and optionally the remainder x - hi as
// bf16 (lo): kernels/matmul.cc's ToBf16Pairs on the GPU; with lo2 (needs lo) also what lo
// leaves, so that hi + lo + lo2 == x exactly.
Status SplitToBf16(const float* x, int64_t n, uint16_t* hi, uint16_t* lo, uint16_t* lo2, cudaStream_t stream);

}  // namespace gk::cuda
