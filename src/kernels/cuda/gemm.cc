#include "kernels/cuda/gemm.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <mutex>

#include "kernels/cuda/gemv.h"
#include "kernels/matmul.h"

namespace gk::cuda {
namespace {

// The cuBLASLt entry points the runner uses, from the library opened at run time.
struct LtApi {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtGetVersion) version;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmulAlgoCheck) check;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) config_get;
  decltype(&cublasLtMatmul) matmul;
};

Result<const LtApi*> OpenCublasLt() {
  static std::once_flag once;
  static LtApi api;
  static Status status = Status::Ok();
  std::call_once(once, [] {
    void* lib = nullptr;
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) {
      status = Status::Error("cannot open libcublasLt (CUDA 12 or 13's cuBLAS): install it or add its folder to LD_LIBRARY_PATH");
      return;
    }
    bool ok = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr && ok) {
        ok = false;
        status = Status::Error(StrCat("libcublasLt has no ", name, ": it is too old"));
      }
    };
    get(api.create, "cublasLtCreate");
    get(api.destroy, "cublasLtDestroy");
    get(api.version, "cublasLtGetVersion");
    get(api.desc_create, "cublasLtMatmulDescCreate");
    get(api.desc_destroy, "cublasLtMatmulDescDestroy");
    get(api.desc_set, "cublasLtMatmulDescSetAttribute");
    get(api.layout_create, "cublasLtMatrixLayoutCreate");
    get(api.layout_destroy, "cublasLtMatrixLayoutDestroy");
    get(api.layout_set, "cublasLtMatrixLayoutSetAttribute");
    get(api.pref_create, "cublasLtMatmulPreferenceCreate");
    get(api.pref_destroy, "cublasLtMatmulPreferenceDestroy");
    get(api.pref_set, "cublasLtMatmulPreferenceSetAttribute");
    get(api.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    get(api.check, "cublasLtMatmulAlgoCheck");
    get(api.config_get, "cublasLtMatmulAlgoConfigGetAttribute");
    get(api.matmul, "cublasLtMatmul");
  });
  if (!status.ok()) return status;
  return &api;
}

Status LtCheck(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Error(StrCat(what, " failed with cuBLAS status ", int(s)));
}

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // what cuBLAS asks for on Hopper

}  // namespace

// One product shape's descriptors and the algorithm the heuristic chose for it.
struct GemmRunner::Algo {
  const LtApi* api = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Algo() {
    if (a) api->layout_destroy(a);
    if (b) api->layout_destroy(b);
    if (c) api->layout_destroy(c);
    if (desc) api->desc_destroy(desc);
  }
};

Result<std::unique_ptr<GemmRunner>> GemmRunner::Create(cudaStream_t stream) {
  GK_ASSIGN_OR_RETURN(const LtApi* api, OpenCublasLt());
  std::unique_ptr<GemmRunner> g(new GemmRunner());
  g->stream_ = stream;
  cublasLtHandle_t h = nullptr;
  GK_RETURN_IF_ERROR(LtCheck(api->create(&h), "cublasLtCreate"));
  g->handle_ = h;
  GK_ASSIGN_OR_RETURN(g->workspace_, DeviceBuffer<std::byte>::Allocate(kWorkspaceBytes));
  return g;
}

GemmRunner::~GemmRunner() {
  algos_.clear();
  if (handle_) (*OpenCublasLt())->destroy(static_cast<cublasLtHandle_t>(handle_));
}

Status GemmRunner::Ensure(size_t elements, int terms) {
  for (int i = 0; i < terms; ++i) {
    if (staging_[size_t(i)].size() >= elements) continue;
    GK_ASSIGN_OR_RETURN(staging_[size_t(i)], DeviceBuffer<uint16_t>::Allocate(elements));
    ++staging_moves_;
  }
  return Status::Ok();
}

int GemmRunner::Terms() const {
  return ActiveBf16Activations() != Bf16Activations::kSplit ? 1 : exact_split_ ? 3 : 2;
}

Result<Bf16Staging> GemmRunner::StagingFor(size_t n) {
  staged_terms_ = Terms();
  GK_RETURN_IF_ERROR(Ensure(n, staged_terms_));
  return Bf16Staging{staging_[0].data(), staged_terms_ > 1 ? staging_[1].data() : nullptr,
                     staged_terms_ > 2 ? staging_[2].data() : nullptr};
}

void GemmRunner::set_batch_invariant(bool on) {
  if (on != batch_invariant_) algos_.clear();  // (chosen the other way)
  batch_invariant_ = on;
}

bool GemmRunner::TakesGemv(const DeviceMatrix& w, const float* x, int64_t T) const {
  return !batch_invariant_ && w.dtype == DType::kBF16 && T <= gemv_max_tokens_ && GemvSupports(w.data, x, w.cols, T);
}

Status GemmRunner::RunStaged(const DeviceMatrix& w, const float* x_f32, int64_t T, float* y) {
  if (T == 0) return Status::Ok();
  if (w.dtype == DType::kF32) return RunPrepared(w, x_f32, T, y, 0.f);
  if (TakesGemv(w, x_f32, T)) {
    return GemvBf16(static_cast<const uint16_t*>(w.data), w.rows, w.cols, x_f32, T, y,
                    ActiveBf16Activations() == Bf16Activations::kRound, false, stream_);
  }
  if (w.dtype != DType::kBF16) return Status::Error(StrCat("the GPU runs bf16 or f32 weights, not ", DTypeName(w.dtype)));
  if (staged_terms_ == 0) return Status::Error("RunStaged without StagingFor");
  for (int i = 0; i < staged_terms_; ++i) GK_RETURN_IF_ERROR(RunPrepared(w, staging_[size_t(i)].data(), T, y, i ? 1.f : 0.f));
  return Status::Ok();
}

Result<int> GemmRunner::Stage(const float* x, size_t n) {
  const int terms = Terms();
  staged_terms_ = 0;  // (the buffers now hold x, not what StagingFor's caller wrote)
  GK_RETURN_IF_ERROR(Ensure(n, terms));
  GK_RETURN_IF_ERROR(SplitToBf16(x, int64_t(n), staging_[0].data(), terms > 1 ? staging_[1].data() : nullptr,
                                 terms > 2 ? staging_[2].data() : nullptr, stream_));
  return terms;
}

// A weight product as a batch of one: y (T × rows) = x (T × cols) · Wᵀ.
Result<const GemmRunner::Algo*> GemmRunner::FindAlgo(const DeviceMatrix& w, int64_t T) {
  BatchedProduct p;
  p.dtype = w.dtype;
  p.M = T;
  p.N = w.rows;
  p.K = w.cols;
  p.ldx = p.ldw = w.cols;
  p.ldy = w.rows;
  return FindAlgo(p);
}

// The product's algorithm: the heuristic's for its shape, or the pinned one (set_batch_invariant).
Result<const GemmRunner::Algo*> GemmRunner::FindAlgo(const BatchedProduct& p) {
  const std::array<int64_t, 13> key = {int64_t(p.dtype), p.M, p.N, p.K, p.ldx, p.ldw, p.ldy,
                                       p.stride_x, p.stride_w, p.stride_y, p.batch, p.x_trans, p.w_trans};
  if (auto it = algos_.find(key); it != algos_.end()) return it->second.get();
  auto algo = std::make_unique<Algo>();
  GK_RETURN_IF_ERROR(Describe(p, *algo));
  if (batch_invariant_ && !p.x_trans) {
    GK_ASSIGN_OR_RETURN(algo->algo, PinnedAlgo(p));
    if (Status ok = CheckAlgo(*algo, algo->algo); !ok.ok()) {
      return Status::Error(StrCat("batch-invariant products: cuBLASLt's algorithm for ", p.N, "x", p.K, " ",
                                  DTypeName(p.dtype), " weights (chosen for ", kPinnedRows, " rows) does not run ", p.M,
                                  " rows: ", ok.message()));
    }
  } else {
    GK_ASSIGN_OR_RETURN(const std::vector<cublasLtMatmulAlgo_t> best, Heuristic(*algo, p, false));
    algo->algo = best[0];
  }
  const Algo* out = algo.get();
  if (algos_.size() >= kMaxCachedShapes) algos_.clear();  // (no caller holds an Algo across calls)
  algos_.emplace(key, std::move(algo));
  return out;
}

// The row-major product seen column-major: y_bᵀ (N × M, ld ldy) = w_b (stored K × N, ld ldw)ᵀ ·
// x_bᵀ (stored K × M, ld ldx), so cuBLASLt's A is w with op T and its B is x. A transposed
// operand flips its op and its stored shape: w_trans stores w as N × K column-major (op N),
// x_trans stores x as M × K column-major (op T).
Status GemmRunner::Describe(const BatchedProduct& p, Algo& algo) const {
  GK_ASSIGN_OR_RETURN(const LtApi* api, OpenCublasLt());
  algo.api = api;
  const cudaDataType_t in = p.dtype == DType::kF32 ? CUDA_R_32F : p.dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  GK_RETURN_IF_ERROR(LtCheck(api->desc_create(&algo.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate"));
  const cublasOperation_t op_a = p.w_trans ? CUBLAS_OP_N : CUBLAS_OP_T, op_b = p.x_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  GK_RETURN_IF_ERROR(LtCheck(api->desc_set(algo.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), "TRANSA"));
  GK_RETURN_IF_ERROR(LtCheck(api->desc_set(algo.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), "TRANSB"));
  const uint64_t K = uint64_t(p.K), N = uint64_t(p.N), M = uint64_t(p.M);
  GK_RETURN_IF_ERROR(LtCheck(api->layout_create(&algo.a, in, p.w_trans ? N : K, p.w_trans ? K : N, p.ldw), "layout A"));
  GK_RETURN_IF_ERROR(LtCheck(api->layout_create(&algo.b, in, p.x_trans ? M : K, p.x_trans ? K : M, p.ldx), "layout B"));
  GK_RETURN_IF_ERROR(LtCheck(api->layout_create(&algo.c, CUDA_R_32F, uint64_t(p.N), uint64_t(p.M), p.ldy), "layout C"));
  if (p.batch > 1) {
    const int32_t count = p.batch;
    const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {{algo.a, p.stride_w}, {algo.b, p.stride_x}, {algo.c, p.stride_y}};
    for (const auto& [layout, stride] : layouts) {
      GK_RETURN_IF_ERROR(LtCheck(api->layout_set(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), "batch count"));
      GK_RETURN_IF_ERROR(LtCheck(api->layout_set(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
                                 "batch stride"));
    }
  }
  return Status::Ok();
}

Result<std::vector<cublasLtMatmulAlgo_t>> GemmRunner::Heuristic(const Algo& algo, const BatchedProduct& p,
                                                                 bool no_split_k) const {
  const LtApi* api = algo.api;
  cublasLtMatmulPreference_t pref = nullptr;
  GK_RETURN_IF_ERROR(LtCheck(api->pref_create(&pref), "cublasLtMatmulPreferenceCreate"));
  const uint64_t ws = kWorkspaceBytes;
  Status pref_ok = LtCheck(api->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)), "workspace preference");
  // Operands may start inside a buffer (a vocabulary chunk's rows, a tile's keys, one KV head's
  // batch), 16-byte aligned but not 256 as cuBLASLt assumes by default: ask for algorithms that
  // need no more, as one algorithm serves every call of the shape.
  const uint32_t align = 16;
  for (const auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (pref_ok.ok()) pref_ok = LtCheck(api->pref_set(pref, attr, &align, sizeof(align)), "alignment preference");
  }
  const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;  // (a mask: split-K's reductions all excluded)
  if (pref_ok.ok() && no_split_k) {
    pref_ok = LtCheck(api->pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction, sizeof(no_reduction)),
                      "reduction scheme preference");
  }
  if (!pref_ok.ok()) {  // without it the heuristic would assume 256-byte operands
    api->pref_destroy(pref);
    return pref_ok;
  }
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const cublasStatus_t st = api->heuristic(static_cast<cublasLtHandle_t>(handle_), algo.desc, algo.a, algo.b, algo.c,
                                           algo.c, pref, no_split_k ? kCandidates : 1, results, &found);
  api->pref_destroy(pref);
  GK_RETURN_IF_ERROR(LtCheck(st, "cublasLtMatmulAlgoGetHeuristic"));
  std::vector<cublasLtMatmulAlgo_t> out;
  for (int i = 0; i < found; ++i) {
    // The mask should leave none that split K; an algorithm that still says it does is passed over.
    int32_t splits = 1;
    if (no_split_k &&
        api->config_get(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), nullptr) ==
            CUBLAS_STATUS_SUCCESS &&
        splits > 1) {
      continue;
    }
    out.push_back(results[i].algo);
  }
  if (!out.empty()) return out;
  return Status::Error(StrCat("cuBLASLt has no algorithm for a ", DTypeName(p.dtype), " product of ", p.M, "x", p.K, " by ",
                              p.N, "x", p.K, " (batch ", p.batch, ")", no_split_k ? " that does not split K" : ""));
}

Result<cublasLtMatmulAlgo_t> GemmRunner::PinnedAlgo(const BatchedProduct& p) {
  const std::array<int64_t, 13> key = {int64_t(p.dtype), 0, p.N, p.K, p.ldx, p.ldw, p.ldy,
                                       p.stride_x, p.stride_w, p.stride_y, p.batch, p.x_trans, p.w_trans};
  if (auto it = pinned_.find(key); it != pinned_.end()) return it->second;
  BatchedProduct q = p;
  q.M = kPinnedRows;  // a fixed count, so that the choice does not depend on the first call's
  Algo shape;
  GK_RETURN_IF_ERROR(Describe(q, shape));
  GK_ASSIGN_OR_RETURN(const std::vector<cublasLtMatmulAlgo_t> candidates, Heuristic(shape, q, true));
  // The first that also runs a single row (a decode step at batch 1), the other end of serving.
  BatchedProduct one = p;
  one.M = 1;
  Algo single;
  GK_RETURN_IF_ERROR(Describe(one, single));
  for (const cublasLtMatmulAlgo_t& algo : candidates) {
    if (!CheckAlgo(single, algo).ok()) continue;
    if (pinned_.size() >= kMaxCachedShapes) pinned_.clear();
    pinned_.emplace(key, algo);
    return algo;
  }
  return Status::Error(StrCat("batch-invariant products: none of cuBLASLt's ", candidates.size(), " algorithms for ", p.N, "x",
                              p.K, " ", DTypeName(p.dtype), " weights without split-K runs both 1 and ", kPinnedRows, " rows"));
}

Status GemmRunner::CheckAlgo(const Algo& a, const cublasLtMatmulAlgo_t& algo) const {
  cublasLtMatmulHeuristicResult_t checked{};
  const cublasStatus_t st =
      a.api->check(static_cast<cublasLtHandle_t>(handle_), a.desc, a.a, a.b, a.c, a.c, &algo, &checked);
  GK_RETURN_IF_ERROR(LtCheck(st, "cublasLtMatmulAlgoCheck"));
  if (checked.workspaceSize > kWorkspaceBytes) {
    return Status::Error(StrCat("it needs ", checked.workspaceSize, " bytes of workspace, more than ", kWorkspaceBytes));
  }
  return Status::Ok();
}

Status GemmRunner::Matmul(const Algo& a, const BatchedProduct& p, float beta) {
  return LtCheck(a.api->matmul(static_cast<cublasLtHandle_t>(handle_), a.desc, &p.alpha, p.w, a.a, p.x, a.b, &beta,
                               p.y, a.c, p.y, a.c, &a.algo, workspace_.data(), kWorkspaceBytes, stream_),
                 "cublasLtMatmul");
}

Status GemmRunner::RunBatched(const BatchedProduct& p) {
  if (p.M == 0 || p.N == 0 || p.batch == 0) return Status::Ok();
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16 && p.dtype != DType::kF32) {
    return Status::Error(StrCat("batched GPU products take bf16, f16 or f32, not ", DTypeName(p.dtype)));
  }
  GK_ASSIGN_OR_RETURN(const Algo* a, FindAlgo(p));
  return Matmul(*a, p, p.beta);
}

Status GemmRunner::RunPrepared(const DeviceMatrix& w, const void* x, int64_t T, float* y, float beta) {
  GK_ASSIGN_OR_RETURN(const Algo* a, FindAlgo(w, T));
  BatchedProduct p;
  p.x = x;
  p.w = w.data;
  p.y = y;
  return Matmul(*a, p, beta);
}

Status GemmRunner::Run(const DeviceMatrix& w, const float* x, int64_t T, float* y, bool accumulate) {
  if (T == 0) return Status::Ok();
  const float beta0 = accumulate ? 1.f : 0.f;
  if (w.dtype == DType::kF32) return RunPrepared(w, x, T, y, beta0);
  if (w.dtype != DType::kBF16) return Status::Error(StrCat("the GPU runs bf16 or f32 weights, not ", DTypeName(w.dtype)));
  if (TakesGemv(w, x, T)) {
    return GemvBf16(static_cast<const uint16_t*>(w.data), w.rows, w.cols, x, T, y,
                    ActiveBf16Activations() == Bf16Activations::kRound, accumulate, stream_);
  }
  GK_ASSIGN_OR_RETURN(const int terms, Stage(x, size_t(T * w.cols)));
  for (int i = 0; i < terms; ++i) GK_RETURN_IF_ERROR(RunPrepared(w, staging_[size_t(i)].data(), T, y, i ? 1.f : beta0));
  return Status::Ok();
}

Status GemmRunner::RunInputGrad(const DeviceMatrix& w, const float* dy, int64_t T, float* dx, bool accumulate) {
  if (T == 0) return Status::Ok();
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16) {
    return Status::Error(StrCat("the GPU runs bf16 or f32 weights, not ", DTypeName(w.dtype)));
  }
  // dx (T × cols) = dy (T × rows) · W (rows × cols): W is the stored K × N operand (w_trans).
  BatchedProduct p;
  p.dtype = w.dtype;
  p.M = T;
  p.N = w.cols;
  p.K = w.rows;
  p.ldx = w.rows;
  p.ldw = w.cols;
  p.ldy = w.cols;
  p.w_trans = true;
  p.w = w.data;
  p.y = dx;
  p.beta = accumulate ? 1.f : 0.f;
  if (w.dtype == DType::kF32) {
    p.x = dy;
    return RunBatched(p);
  }
  GK_ASSIGN_OR_RETURN(const int terms, Stage(dy, size_t(T * w.rows)));
  for (int i = 0; i < terms; ++i) {
    p.x = staging_[size_t(i)].data();
    if (i) p.beta = 1.f;
    GK_RETURN_IF_ERROR(RunBatched(p));
  }
  return Status::Ok();
}

}  // namespace gk::cuda
