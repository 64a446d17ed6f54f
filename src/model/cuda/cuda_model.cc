#include "model/cuda/cuda_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/attention_prefill.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/decoder_ops.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/row_ops.h"
#include "kernels/cuda/token_pick.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/cuda/device_weights.h"
#include "model/decoder_constants.h"
#include "model/lora_weights.h"
#include "util/format_bytes.h"

namespace gk {
namespace {

using cuda::Check;
using cuda::DeviceBuffer;
using cuda::DeviceMatrix;

// A paged pool's bytes in device memory, zeroed.
class DeviceKvStorage final : public KvStorage {
 public:
  static Result<std::unique_ptr<KvStorage>> Allocate(int device, size_t bytes) {
    GK_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice"));
    std::unique_ptr<DeviceKvStorage> s(new DeviceKvStorage());
    if (cudaMalloc(reinterpret_cast<void**>(&s->data_), std::max<size_t>(bytes, 1)) != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      return Status::Error(StrCat("cannot allocate ", GiBText(double(bytes)), " of GPU memory for the KV cache (cuda:", device,
                                  " has ", GiBText(double(free_bytes)), " free); lower --kv-cache-memory or --max-num-seqs"));
    }
    s->size_ = bytes;
    GK_RETURN_IF_ERROR(Check(cudaMemset(s->data_, 0, std::max<size_t>(bytes, 1)), "cudaMemset of the KV cache"));
    // cudaMemset returns before it finishes, on the legacy stream, which the runners' non-blocking
    // streams do not wait for: the first pass's KV writes must not race the zeroing.
    GK_RETURN_IF_ERROR(Check(cudaDeviceSynchronize(), "zeroing the KV cache"));
    return std::unique_ptr<KvStorage>(std::move(s));
  }
  ~DeviceKvStorage() override { cudaFree(data_); }
  std::byte* data() override { return data_; }
  size_t size() const override { return size_; }
  bool on_host() const override { return false; }

 private:
  DeviceKvStorage() = default;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};


bool SupportedMatrix(const MatrixView& m) {
  return m.rows == 0 || ((m.dtype == DType::kBF16 || m.dtype == DType::kF32) && !m.packed);
}

}  // namespace

Status CheckCudaSupport(const ModelConfig& c, const ModelWeights& w) {
  if (c.MaxHeadDim() > cuda::kMaxHeadDim) {
    return Status::Error(StrCat("the CUDA runner takes head dims up to ", cuda::kMaxHeadDim, ", the model has ",
                                c.MaxHeadDim()));
  }
  if (c.enable_moe_block && c.num_experts > 1024) {
    return Status::Error(StrCat("the CUDA runner routes up to 1024 experts, the model has ", c.num_experts));
  }
  Status st = Status::Ok();
  ForEachMatrix(w, [&](const MatrixView& m) {
    if (st.ok() && !SupportedMatrix(m)) {
      st = Status::Error(StrCat("the CUDA runner takes bf16 or f32 weights in the checkpoint's layout, not ",
                                m.packed ? "CPU-packed bf16" : DTypeName(m.dtype), " (no --quantize on the GPU)"));
    }
  });
  return st;
}

struct CudaModel::Impl {
  ModelConfig c;
  std::string weight_prefix;  // the checkpoint's, for LoRA adapters' names
  CudaModelOptions o;
  std::string device_name;
  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::GemmRunner> gemm;
  DType kv_default = DType::kF16;

  DeviceWeights w;  // one device allocation, carved up
  float embed_scale = 1.f, ple_embed_scale = 1.f;
  LayerRope rope;

  // Activations for max_chunk tokens.
  DeviceBuffer<float> x, xn, q, k, v, att, out, gate, up, ple, ple_tok, ple_gate, rope_table;
  // Mixture of experts: router logits, the routing, the experts' input and sum, one expert's rows.
  DeviceBuffer<float> router_logits, route_weight, moe_x, moe_out, ex_in, ex_gate_up, ex_h, ex_out, ex_weight;
  DeviceBuffer<int32_t> route_expert, ex_rows;
  std::vector<int32_t> h_route_expert, h_ex_rows;
  std::vector<float> h_route_weight, h_ex_weight;
  DeviceBuffer<float> logits;  // grown to the most logit rows a pass has asked for
  DeviceBuffer<int32_t> picked;  // each logit row's token
  std::vector<int32_t> h_picked;
  DeviceBuffer<TokenPick> picks;  // how each row's token is picked
  std::vector<TokenPick> h_picks;
  std::vector<char> row_to_host;  // per logit row: whether its item wants the row itself
  DeviceBuffer<int32_t> meta;
  std::vector<int32_t> h_meta;
  std::vector<float> h_rope;
  std::vector<int64_t> rope_offset;  // per RoPE slot: its table's offset in rope_table
  uint64_t kv_budget = 0;
  // The pass's long runs (attention through products) and the rows of the rest.
  struct LongRun {
    int64_t t0 = 0, n = 0, first = 0;
    int32_t table_base[2] = {0, 0};  // offsets of the item's tables in each group's table array
  };
  std::vector<LongRun> long_runs;
  int64_t short_rows = 0;
  int64_t short_max_positions[2] = {0, 0};  // the short rows' longest visible range: full, sliding layers
  int64_t pool_max_positions[2] = {0, 0};   // the longest any row of the pool may see: full, sliding layers
  const int32_t* d_rows = nullptr;        // in meta: the logit rows' tokens
  const int32_t* d_short_rows = nullptr;  // the short rows' tokens
  const int32_t* d_tables = nullptr;      // both groups' block tables
  DeviceBuffer<float> attention_splits;  // partial states of split decode attention
  int multiprocessors = 1;
  cuda::PrefillAttention prefill_attention;
  bool pick_tokens = false;  // this pass picks with PickTokens (else ArgMaxRows)
  bool input_normed = false;  // xn holds the next layer's normed input (LastResidualAdd)

  // Decode steps as CUDA graphs, one per batch size (RunDecodeGraph).
  struct PoolKey {  // what a captured graph knows of its pool
    int block_size = 0;
    DType dtype = DType::kUnknown;
    std::vector<const std::byte*> regions;  // each KV-owning layer's K and V
    bool operator==(const PoolKey&) const = default;
  };
  struct DecodeGraph {
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0;  // of the buffers it reads, when captured
    Bf16Activations mode = Bf16Activations::kSplit;  // how its products took bf16 weights
    PoolKey pool;
    DecodeGraph() = default;
    DecodeGraph(DecodeGraph&& o) noexcept
        : exec(std::exchange(o.exec, nullptr)), generation(o.generation), mode(o.mode), pool(std::move(o.pool)) {}
    DecodeGraph& operator=(DecodeGraph&&) = delete;
    ~DecodeGraph() {
      if (exec) cudaGraphExecDestroy(exec);
    }
  };
  bool decode_shape = false;  // this pass is a decode step a graph can replay
  uint64_t generation = 0;    // bumped whenever a buffer the graphs read moves
  std::map<int64_t, DecodeGraph> graphs;
  std::set<int64_t> warmed_batches;  // decode batch sizes run once eagerly
  CudaGraphStats graph_stats;

  // LoRA adapters (serve --lora): each adapter's factors in f32 on the device (scaling folded
  // into B, as LoraWeights holds them), kept by the adapter's id for the passes that follow.
  struct DeviceAdapter {
    struct Factors {
      int64_t a = -1, b = -1;  // offsets in arena of A (rank × in) and B (out × rank); -1: no LoRA here
      int64_t in = 0, out = 0;
    };
    DeviceBuffer<float> arena;
    int64_t rank = 0;
    std::vector<Factors> factors;  // per layer · kNumLoraTargets + target
    uint64_t last_pass = 0;
  };
  std::map<uint64_t, DeviceAdapter> adapters;
  size_t adapters_kept = 1;  // the most distinct adapters one pass has used: how many stay on the device
  uint64_t passes = 0;
  struct LoraRun {  // consecutive tokens of items through one adapter
    int64_t t0 = 0, n = 0;
    const LoraWeights* weights = nullptr;
    DeviceAdapter* adapter = nullptr;
  };
  std::vector<LoraRun> lora_runs;
  DeviceBuffer<float> lora_u;  // a run's x·Aᵀ

  ~Impl() {
    graphs.clear();
    if (stream) cudaStreamDestroy(stream);
  }

  Status AllocateActivations();
  Status Run(std::span<const PagedBatchItem> items, PagedKvPool& pool, float* logits);
  Status Reserve(int64_t R);
  // Layer l's paged attention for this pass's short rows: the splits (PagedAttentionArgs' T,
  // num_heads, head_dim, splits and split_positions set).
  cuda::PagedAttentionArgs DecodeAttention(int l) const;
  Status Forward(int64_t T, int64_t R, PagedKvPool& pool, const cuda::PagedTokens tokens[2]);
  Status RunDecodeGraph(int64_t T, int64_t R, PagedKvPool& pool, const cuda::PagedTokens tokens[2]);
  Status Layer(int l, int64_t T, PagedKvPool& pool, const cuda::PagedTokens tokens[2]);
  Status PerLayerInputs(const int32_t* tokens, int64_t T);
  Status MoeBlock(int l, int64_t T);
  Status PerLayerInputBlock(int l, int64_t T);
  Status LastResidualAdd(int l, int64_t T, const float* norm);
  cuda::QkvNormWrite NormRopeArgs(int l, int64_t T, const float* cos_sin, PagedKvPool& pool,
                                  const cuda::PagedTokens& tokens);
  Result<DeviceAdapter*> AdapterOnDevice(const LoraWeights& weights);
  Status PrepareLora();
  Status ApplyLora(int l, LoraTarget t, const float* x, float* y);
};

Status CudaModel::Impl::AllocateActivations() {
  const size_t T = size_t(o.max_chunk), D = size_t(c.hidden_size), N = size_t(c.num_heads);
  const size_t H = size_t(c.MaxHeadDim()), K = size_t(c.MaxKvHeads());
  const size_t F = size_t(c.intermediate_size) * (c.use_double_wide_mlp ? 2 : 1);
  auto alloc = [](DeviceBuffer<float>& b, size_t n) -> Status {
    GK_ASSIGN_OR_RETURN(b, DeviceBuffer<float>::Allocate(std::max<size_t>(n, 1)));
    return Status::Ok();
  };
  GK_RETURN_IF_ERROR(alloc(x, T * D));
  GK_RETURN_IF_ERROR(alloc(xn, T * D));
  GK_RETURN_IF_ERROR(alloc(q, T * N * H));
  GK_RETURN_IF_ERROR(alloc(k, T * K * H));
  GK_RETURN_IF_ERROR(alloc(v, T * K * H));
  GK_RETURN_IF_ERROR(alloc(att, T * N * H));
  GK_RETURN_IF_ERROR(alloc(out, T * D));
  GK_RETURN_IF_ERROR(alloc(gate, T * F));
  GK_RETURN_IF_ERROR(alloc(up, T * F));
  if (c.hidden_size_per_layer_input > 0) {
    const size_t LP = size_t(c.num_layers) * size_t(c.hidden_size_per_layer_input);
    GK_RETURN_IF_ERROR(alloc(ple, T * LP));
    GK_RETURN_IF_ERROR(alloc(ple_tok, T * LP));
    GK_RETURN_IF_ERROR(alloc(ple_gate, T * size_t(c.hidden_size_per_layer_input)));
  }
  if (c.enable_moe_block) {
    const size_t E = size_t(c.num_experts), k = size_t(c.top_k_experts), Fe = size_t(c.moe_intermediate_size);
    GK_RETURN_IF_ERROR(alloc(router_logits, T * E));
    GK_RETURN_IF_ERROR(alloc(route_weight, T * k));
    GK_RETURN_IF_ERROR(alloc(moe_x, T * D));
    GK_RETURN_IF_ERROR(alloc(moe_out, T * D));
    GK_RETURN_IF_ERROR(alloc(ex_in, T * D));
    GK_RETURN_IF_ERROR(alloc(ex_gate_up, T * 2 * Fe));
    GK_RETURN_IF_ERROR(alloc(ex_h, T * Fe));
    GK_RETURN_IF_ERROR(alloc(ex_out, T * D));
    GK_RETURN_IF_ERROR(alloc(ex_weight, T * k));
    GK_ASSIGN_OR_RETURN(route_expert, DeviceBuffer<int32_t>::Allocate(T * k));
    GK_ASSIGN_OR_RETURN(ex_rows, DeviceBuffer<int32_t>::Allocate(T * k));
  }
  int64_t rope_floats = 0;
  for (int h : rope.head_dim) {
    rope_offset.push_back(rope_floats * int64_t(T));
    rope_floats += h;
  }
  GK_RETURN_IF_ERROR(alloc(rope_table, T * size_t(rope_floats)));
  h_rope.resize(T * size_t(rope_floats));
  return Status::Ok();
}

CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

Result<std::unique_ptr<CudaModel>> CudaModel::Load(const std::string& dir, const CudaModelOptions& o) {
  GK_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  GK_ASSIGN_OR_RETURN(ModelWeights weights, LoadWeights(dir, config, WeightLoadMode::kMmap));
  return Create(config, weights, o);
}

Result<std::unique_ptr<CudaModel>> CudaModel::Create(const ModelConfig& config, const ModelWeights& weights,
                                                     const CudaModelOptions& o) {
  return Make(config, weights, o, 0);
}

Result<std::unique_ptr<CudaModel>> CudaModel::CreateRandom(const ModelConfig& config, DType dtype, uint64_t seed,
                                                           const CudaModelOptions& o) {
  if (dtype != DType::kBF16 && dtype != DType::kF32) {
    return Status::Error(StrCat("random GPU weights are bf16 or f32, not ", DTypeName(dtype)));
  }
  GK_RETURN_IF_ERROR(ValidateModelConfig(config));
  return Make(config, WeightShapes(config, dtype), o, seed | 1);
}

ModelWeights WeightShapes(const ModelConfig& config, DType dtype) {
  ModelWeights w;
  w.checkpoint_dtype = dtype;
  for (const WeightSlot& slot : WeightSlots(config, "model.", &w)) {
    if (slot.matrix != nullptr) {
      *slot.matrix = MatrixView{dtype, slot.shape[0], slot.shape.size() > 1 ? slot.shape[1] : 1, nullptr};
    } else if (slot.experts != nullptr) {  // (E, out, in)
      slot.experts->assign(size_t(slot.shape[0]), MatrixView{dtype, slot.shape[1], slot.shape[2], nullptr});
    } else if (slot.vec != nullptr) {
      slot.vec->assign(size_t(slot.shape[0]), 1.f);
    } else if (slot.scalar != nullptr) {
      *slot.scalar = 1.f;
    }
  }
  return w;
}

Result<std::unique_ptr<CudaModel>> CudaModel::Make(const ModelConfig& config, const ModelWeights& weights,
                                                   const CudaModelOptions& o, uint64_t random_seed) {
  GK_RETURN_IF_ERROR(CheckCudaSupport(config, weights));
  if (o.gpu_memory_utilization <= 0 || o.gpu_memory_utilization > 1) {
    return Status::Error(StrCat("--gpu-memory-utilization must be in (0, 1], got ", o.gpu_memory_utilization));
  }
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.c = config;
  m.weight_prefix = weights.prefix.empty() ? "model." : weights.prefix;
  m.o = o;
  m.o.max_chunk = std::max(1, o.max_chunk);
  m.device_name = StrCat("cuda:", o.device);
  GK_RETURN_IF_ERROR(Check(cudaSetDevice(o.device), "cudaSetDevice"));
  GK_RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  m.kv_default = KvCacheDType(weights.layers[0].k.dtype);
  m.embed_scale = ScaleInDtype(config.hidden_size, weights.checkpoint_dtype);
  if (config.hidden_size_per_layer_input > 0) {
    m.ple_embed_scale = ScaleInDtype(config.hidden_size_per_layer_input, weights.checkpoint_dtype);
  }
  m.rope = MakeLayerRope(config);
  GK_ASSIGN_OR_RETURN(m.w, UploadWeights(config, weights, random_seed, m.device_name, m.stream));
  GK_RETURN_IF_ERROR(m.AllocateActivations().Wrap(StrCat("activations for ", m.o.max_chunk, " tokens on ", m.device_name)));
  GK_ASSIGN_OR_RETURN(m.gemm, cuda::GemmRunner::Create(m.stream));
  m.gemm->set_small_batch_gemv(o.gemv_max_tokens);
  m.gemm->set_batch_invariant(o.batch_invariant);
  GK_RETURN_IF_ERROR(Check(cudaDeviceGetAttribute(&m.multiprocessors, cudaDevAttrMultiProcessorCount, o.device),
                           "cudaDeviceGetAttribute"));
  // What is left for the KV cache: the utilisation's share of the device less what this process
  // (and any other) already holds, as vLLM's --gpu-memory-utilization.
  size_t free_bytes = 0, total_bytes = 0;
  GK_RETURN_IF_ERROR(Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  const double allowed = double(total_bytes) * o.gpu_memory_utilization - double(total_bytes - free_bytes);
  m.kv_budget = allowed > 0 ? uint64_t(allowed) : 0;
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(impl)));
}

const ModelConfig& CudaModel::config() const { return impl_->c; }
int CudaModel::max_chunk() const { return impl_->o.max_chunk; }
std::string CudaModel::device() const { return impl_->device_name; }
std::string CudaModel::weight_prefix() const { return impl_->weight_prefix; }
DType CudaModel::default_kv_dtype() const { return impl_->kv_default; }
uint64_t CudaModel::kv_memory_budget() const { return std::max<uint64_t>(impl_->kv_budget, 1); }
uint64_t CudaModel::weight_bytes() const { return impl_->w.bytes; }
const int32_t* CudaModel::picked_tokens() const { return impl_->h_picked.data(); }
CudaGraphStats CudaModel::graph_stats() const { return impl_->graph_stats; }
uint64_t CudaModel::decode_bytes_per_token() const {
  const DeviceMatrix& t = impl_->w.ple_embed;
  return impl_->w.bytes - (t.empty() ? 0 : uint64_t(t.rows * t.cols) * DTypeSize(t.dtype));
}

Result<std::unique_ptr<PagedKvPool>> CudaModel::NewPagedKvPool(const PagedKvOptions& o) {
  const int device = impl_->o.device;
  return PagedKvPool::Create(impl_->c, o, [device](size_t bytes) { return DeviceKvStorage::Allocate(device, bytes); });
}

Status CudaModel::ForwardPaged(std::span<const PagedBatchItem> items, PagedKvPool& pool, float* logits) {
  const ModelConfig& c = impl_->c;
  GK_RETURN_IF_ERROR(CheckPagedPoolShape(c, pool));
  if (pool.on_host()) return Status::Error("the paged KV pool is in host memory; the CUDA runner needs its own (NewPagedKvPool)");
  int64_t total = 0;
  for (const PagedBatchItem& it : items) total += int64_t(it.tokens.size());
  if (total > impl_->o.max_chunk) {
    return Status::Error(StrCat("batch of ", total, " tokens exceeds the model's ", impl_->o.max_chunk, "-token pass"));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].lora != nullptr && items[i].lora->num_layers() != c.num_layers) {
      return Status::Error(StrCat("paged batch item ", i, ": its LoRA adapter has ", items[i].lora->num_layers(),
                                  " layers, the model ", c.num_layers));
    }
    GK_RETURN_IF_ERROR(CheckPagedItemBlocks(c, items[i], pool).Wrap(StrCat("paged batch item ", i)));
  }
  if (total == 0) return Status::Ok();
  GK_RETURN_IF_ERROR(Check(cudaSetDevice(impl_->o.device), "cudaSetDevice"));
  return impl_->Run(items, pool, logits);
}

// One pass: the host lays out the batch's tokens, positions, block tables and RoPE angles and
// copies them over; then embedding, every layer and the logit rows run on the stream.
Status CudaModel::Impl::Run(std::span<const PagedBatchItem> items, PagedKvPool& pool, float* logits_out) {
  int64_t T = 0, R = 0;
  for (const PagedBatchItem& it : items) {
    const int64_t n = int64_t(it.tokens.size());
    T += n;
    R += it.logits == LogitsMode::kAll ? n : it.logits == LogitsMode::kLast && n > 0 ? 1 : 0;
  }
  const int64_t bs = pool.block_size();
  // Metadata: ids [T], pos [T], table offsets [2][T], logit rows [R], the short runs' rows
  // [short_rows], then each group's tables.
  std::vector<int32_t>& h = h_meta;
  h.assign(size_t(5 * T + R), 0);
  int32_t* ids = h.data();
  int32_t* pos = ids + T;
  int32_t* off[2] = {pos + T, pos + 2 * T};
  int32_t* rows = pos + 3 * T;
  int32_t* shorts = rows + R;
  std::vector<int32_t> tables[2];
  long_runs.clear();
  short_rows = 0;
  short_max_positions[0] = short_max_positions[1] = 0;
  int64_t t = 0, r = 0;
  row_to_host.assign(size_t(R), 1);
  h_picks.resize(size_t(R));
  bool all_greedy = true;
  lora_runs.clear();
  for (const PagedBatchItem& it : items) {
    const int64_t n = int64_t(it.tokens.size()), first = it.seq->num_tokens;
    if (n == 0) continue;
    int32_t base[2];
    for (int g = 0; g < 2; ++g) {
      base[g] = int32_t(tables[g].size());
      if (!pool.HasGroup(KvGroup(g))) continue;
      const int64_t used = (first + n - 1) / bs + 1;  // blocks through the last new position
      tables[g].insert(tables[g].end(), it.seq->blocks[g].begin(), it.seq->blocks[g].begin() + used);
    }
    // (Batch-invariant: every row through the paged kernel, whose sums for a row do not depend
    // on how its prompt was chunked.)
    const bool long_run = !o.batch_invariant && n >= o.prefill_gemm_min_tokens;
    if (long_run) long_runs.push_back({t, n, first, {base[0], base[1]}});
    if (it.lora != nullptr) {
      if (!lora_runs.empty() && lora_runs.back().weights == it.lora && lora_runs.back().t0 + lora_runs.back().n == t) {
        lora_runs.back().n += n;
      } else {
        lora_runs.push_back({t, n, it.lora, nullptr});
      }
    }
    for (int64_t i = 0; i < n; ++i, ++t) {
      ids[t] = it.tokens[size_t(i)];
      pos[t] = int32_t(first + i);
      off[0][t] = base[0];
      off[1][t] = base[1];
      if (it.logits == LogitsMode::kAll || (it.logits == LogitsMode::kLast && i == n - 1)) {
        row_to_host[size_t(r)] = !it.token_only;
        h_picks[size_t(r)] = it.pick;
        all_greedy = all_greedy && it.pick.temperature <= 0.f;
        rows[r++] = int32_t(t);
      }
      if (!long_run) {
        shorts[short_rows++] = int32_t(t);
        short_max_positions[0] = std::max(short_max_positions[0], first + i + 1);
        short_max_positions[1] = std::max(short_max_positions[1], std::min<int64_t>(first + i + 1, c.sliding_window));
      }
    }
  }
  h.resize(size_t(4 * T + R + short_rows));
  // One table array for both groups: the sliding group's offsets count from its start too, so
  // that no kernel argument depends on how many blocks the full group's tables took.
  const int32_t full_tables = int32_t(tables[0].size());
  for (int64_t i = 0; i < T; ++i) off[1][i] += full_tables;
  for (LongRun& run : long_runs) run.table_base[1] += full_tables;
  // A decode step (one token per item, each wanting its logits; no expert routing, which reads
  // back to the host): its kernels take nothing but T, so a CUDA graph of it replays.
  decode_shape = o.cuda_graphs && !c.enable_moe_block && R == T && int64_t(items.size()) == T && long_runs.empty() &&
                 lora_runs.empty();  // (the adapters' products are per run: eager)
  GK_RETURN_IF_ERROR(PrepareLora());
  const int64_t cap = pool.HasGroup(KvGroup::kFull) ? pool.num_blocks(KvGroup::kFull) * bs : 0;
  pool_max_positions[0] = c.max_position_embeddings > 0 ? std::min<int64_t>(cap, c.max_position_embeddings) : cap;
  pool_max_positions[1] = std::min<int64_t>(c.sliding_window,
                                            pool.HasGroup(KvGroup::kSliding) ? pool.num_blocks(KvGroup::kSliding) * bs : 0);
  if (decode_shape) {  // decode attention's splits from the pool's capacity, not this step's contexts
    short_max_positions[0] = pool_max_positions[0];
    short_max_positions[1] = pool_max_positions[1];
  }
  // RoPE cos/sin per slot and token, in double as the CPU (kernels/ops.h); only the T rows
  // of each slot's table go over.
  for (size_t s = 0; s < rope.head_dim.size(); ++s) {
    const int64_t H = rope.head_dim[s];
    float* table = h_rope.data() + rope_offset[s];
    for (int64_t i = 0; i < T; ++i) RopeCosSin(rope.inv_freq[s].data(), H / 2, pos[i], table + i * H);
    GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(rope_table.data() + rope_offset[s], table, size_t(T * H) * sizeof(float),
                                             cudaMemcpyHostToDevice, stream), "copying RoPE angles to the GPU"));
  }
  h.insert(h.end(), tables[0].begin(), tables[0].end());  // (ids, pos, off and rows are stale from here)
  h.insert(h.end(), tables[1].begin(), tables[1].end());
  if (meta.size() < h.size()) {
    GK_ASSIGN_OR_RETURN(meta, DeviceBuffer<int32_t>::Allocate(h.size() * 2));
    ++generation;
  }
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(meta.data(), h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                           stream), "copying the batch to the GPU"));
  const int32_t* d_ids = meta.data();
  const int32_t* d_pos = d_ids + T;
  d_rows = d_ids + 4 * T;
  d_short_rows = d_rows + R;
  d_tables = d_short_rows + short_rows;
  const cuda::PagedTokens tokens[2] = {{d_pos, d_ids + 2 * T, d_tables}, {d_pos, d_ids + 3 * T, d_tables}};
  GK_RETURN_IF_ERROR(Reserve(R));
  // Greedy batches take the argmax kernel; the rest, and every decode step (one graph whatever
  // the step's sampling), the token-pick kernel.
  pick_tokens = R > 0 && (decode_shape || !all_greedy);
  if (pick_tokens) {
    GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(picks.data(), h_picks.data(), size_t(R) * sizeof(TokenPick),
                                             cudaMemcpyHostToDevice, stream), "copying the token picks to the GPU"));
  }
  GK_RETURN_IF_ERROR(decode_shape ? RunDecodeGraph(T, R, pool, tokens) : Forward(T, R, pool, tokens));
  if (R > 0) {
    const int64_t V = c.vocab_size;
    h_picked.resize(size_t(R));
    GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(h_picked.data(), picked.data(), size_t(R) * sizeof(int32_t),
                                             cudaMemcpyDeviceToHost, stream), "copying the picked tokens from the GPU"));
    // The rows wanted on the host, in runs of consecutive rows (token-only rows stay behind).
    for (int64_t a = 0; a < R;) {
      if (!row_to_host[size_t(a)]) {
        ++a;
        continue;
      }
      int64_t b = a;
      while (b < R && row_to_host[size_t(b)]) ++b;
      GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(logits_out + a * V, logits.data() + a * V, size_t((b - a) * V) * sizeof(float),
                                               cudaMemcpyDeviceToHost, stream), "copying the logits from the GPU"));
      a = b;
    }
  }
  return Check(cudaStreamSynchronize(stream), "the forward pass on the GPU");
}

// Grows what a pass writes before any of its kernels is queued: a graph being captured must not
// allocate, and a buffer that moves makes the captured graphs stale (generation).
Status CudaModel::Impl::Reserve(int64_t R) {
  const int64_t V = c.vocab_size;
  if (R > 0 && logits.size() < size_t(R * V)) {
    GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "the forward pass on the GPU"));
    logits = DeviceBuffer<float>();
    auto grown = DeviceBuffer<float>::Allocate(size_t(R * V));
    if (!grown.ok()) return grown.status().Wrap(StrCat("logits of ", R, " rows on ", device_name));
    logits = std::move(*grown);
    GK_ASSIGN_OR_RETURN(picked, DeviceBuffer<int32_t>::Allocate(size_t(R)));
    GK_ASSIGN_OR_RETURN(picks, DeviceBuffer<TokenPick>::Allocate(size_t(R)));
    ++generation;
  }
  size_t need = 0;
  for (int l = 0; l < c.num_layers && short_rows > 0; ++l) {
    need = std::max(need, size_t(cuda::PagedAttentionWorkspaceFloats(DecodeAttention(l))));
  }
  if (attention_splits.size() < need) {
    GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "the forward pass on the GPU"));
    attention_splits = DeviceBuffer<float>();
    GK_ASSIGN_OR_RETURN(attention_splits, DeviceBuffer<float>::Allocate(need));
    ++generation;
  }
  return Status::Ok();
}

cuda::PagedAttentionArgs CudaModel::Impl::DecodeAttention(int l) const {
  const int source = c.KvSourceLayer(l);
  const int g = c.IsFull(source) ? 0 : 1;
  cuda::PagedAttentionArgs a;
  a.T = short_rows;
  a.num_heads = int(c.num_heads);
  a.head_dim = int(c.HeadDim(l));
  if (o.batch_invariant) {  // ranges of a length fixed by the pool, so that no row's depend on the others'
    a.split_positions = cuda::BatchInvariantSplitPositions(pool_max_positions[g]);
    a.splits = cuda::BatchInvariantSplits(short_max_positions[g], a.split_positions);
  } else {
    // Few rows over long contexts (a decode step at small batch): split each row's positions so
    // that every multiprocessor has work, and merge after.
    a.splits = cuda::PagedAttentionSplits(short_rows, int(c.KvHeads(l)), short_max_positions[g], multiprocessors);
  }
  return a;
}

// The pass's kernels, from the embedding to the picked tokens, queued on the stream (what a
// decode step's graph captures): they read the batch from `meta` and allocate nothing.
Status CudaModel::Impl::Forward(int64_t T, int64_t R, PagedKvPool& pool, const cuda::PagedTokens tokens[2]) {
  const int64_t D = c.hidden_size, V = c.vocab_size;
  const int32_t* d_ids = meta.data();
  GK_RETURN_IF_ERROR(cuda::EmbedRows(w.embed.data, w.embed.dtype, w.embed.rows, D, d_ids, T, embed_scale, -1, x.data(), stream));
  if (c.hidden_size_per_layer_input > 0) GK_RETURN_IF_ERROR(PerLayerInputs(d_ids, T));
  input_normed = false;
  for (int l = 0; l < c.num_layers; ++l) GK_RETURN_IF_ERROR(Layer(l, T, pool, tokens));
  if (R == 0) return Status::Ok();
  GK_RETURN_IF_ERROR(cuda::GatherRows(x.data(), D, d_rows, R, xn.data(), stream));
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(xn.data(), w.final_norm, R, D, c.rms_norm_eps, xn.data(), stream));
  GK_RETURN_IF_ERROR(gemm->Run(w.embed, xn.data(), R, logits.data()));
  if (c.final_logit_softcap > 0.f) GK_RETURN_IF_ERROR(cuda::Softcap(logits.data(), R * V, c.final_logit_softcap, stream));
  if (pick_tokens) return cuda::PickTokens(logits.data(), R, V, picks.data(), picked.data(), stream);
  return cuda::ArgMaxRows(logits.data(), R, V, picked.data(), stream);  // one pass over each row
}

// A decode step of T tokens: the first of its size runs eagerly (cuBLASLt chooses its
// algorithms, staging buffers grow), the next is captured as a CUDA graph, and from then on the
// graph replays, one launch instead of some twelve per layer. A graph is captured again when a
// buffer it reads has moved or the step runs on another pool.
Status CudaModel::Impl::RunDecodeGraph(int64_t T, int64_t R, PagedKvPool& pool, const cuda::PagedTokens tokens[2]) {
  PoolKey key{pool.block_size(), pool.dtype(), {}};
  for (int l = 0; l < pool.num_layers(); ++l) {
    if (pool.OwnsKv(l)) key.regions.insert(key.regions.end(), {pool.KData(l), pool.VData(l)});
  }
  const uint64_t gen = generation + gemm->staging_moves();
  const Bf16Activations mode = ActiveBf16Activations();  // the products' conversions are baked into a graph
  auto it = graphs.find(T);
  if (it != graphs.end() && (it->second.generation != gen || !(it->second.pool == key) || it->second.mode != mode)) {
    // Run eagerly once more first: another pool may take kernels this process has not launched yet.
    if (!(it->second.pool == key)) warmed_batches.erase(T);
    graphs.erase(it);
    it = graphs.end();
  }
  if (it == graphs.end()) {
    if (warmed_batches.insert(T).second) return Forward(T, R, pool, tokens);
    // Relaxed: the kernels' wrappers call cudaFuncSetAttribute and cudaGetDevice, which the
    // stricter modes may refuse while capturing; nothing in Forward allocates or synchronizes.
    GK_RETURN_IF_ERROR(Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "capturing a decode step"));
    const Status queued = Forward(T, R, pool, tokens);
    cudaGraph_t graph = nullptr;
    const Status captured = Check(cudaStreamEndCapture(stream, &graph), "capturing a decode step");
    DecodeGraph g;
    g.generation = gen;
    g.mode = mode;
    g.pool = std::move(key);
    Status made = queued.ok() ? captured : queued;
    if (made.ok()) made = Check(cudaGraphInstantiate(&g.exec, graph, 0), "instantiating a decode step's graph");
    size_t nodes = 0;
    if (made.ok() && cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess) graph_stats.nodes = int64_t(nodes);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!made.ok()) {  // nothing ran while capturing: the step runs eagerly, and so do the next
      std::fprintf(stderr, "warning: %s; decode steps on %s run without CUDA graphs from now on\n",
                   made.message().c_str(), device_name.c_str());
      o.cuda_graphs = false;
      graphs.clear();
      return Forward(T, R, pool, tokens);
    }
    it = graphs.emplace(T, std::move(g)).first;
    ++graph_stats.captured;
  }
  ++graph_stats.replayed;
  return Check(cudaGraphLaunch(it->second.exec, stream), "replaying a decode step's graph");
}

Status CudaModel::Impl::Layer(int l, int64_t T, PagedKvPool& pool, const cuda::PagedTokens tokens[2]) {
  const DeviceLayer& L = w.layers[size_t(l)];
  const int64_t D = c.hidden_size, N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l), F = c.MlpWidth(l);
  const float eps = c.rms_norm_eps;
  const float* cos_sin = rope_table.data() + rope_offset[size_t(rope.slot[size_t(l)])];
  const int g = int(LayerKvGroup(c, l));

  // Attention: projections (x normed once, converted to bf16 once for all three), then q's norm
  // and RoPE, K's and V's norms, RoPE and the KV write in one kernel, softmax(q·k)·v, o_proj.
  if (!input_normed) {  // (else the previous layer's last residual add normed it)
    GK_ASSIGN_OR_RETURN(const cuda::Bf16Staging staged, gemm->StagingFor(size_t(T * D)));
    GK_RETURN_IF_ERROR(cuda::RmsNormRows(x.data(), L.input_norm, T, D, eps, xn.data(), stream, staged));
  }
  input_normed = false;
  // Then one kernel norms and rotates q, and norms, rotates and writes K and V to the pool.
  const bool kv_here = !c.IsKvShared(l), has_v = !L.v.empty();
  cuda::QkvNormWrite n = NormRopeArgs(l, T, cos_sin, pool, tokens[g]);
  // Where the weights adjoin and no adapter adds to one of them, q, k and v are one product into
  // `gate` (unused until the MLP): T rows of [q | k | v], the kernel reading its columns.
  const int64_t W = L.qkv.rows;
  const bool one_product = kv_here && !L.qkv.empty() && W == (N + K * (has_v ? 2 : 1)) * H && lora_runs.empty() &&
                           size_t(T * W) <= gate.size();
  if (one_product) {
    GK_RETURN_IF_ERROR(gemm->RunStaged(L.qkv, xn.data(), T, gate.data()));
    n.q = gate.data();
    n.k = n.q + N * H;
    n.v = has_v ? n.k + K * H : nullptr;
    n.q_ld = n.kv_ld = W;
  } else {
    GK_RETURN_IF_ERROR(gemm->RunStaged(L.q, xn.data(), T, q.data()));
    GK_RETURN_IF_ERROR(ApplyLora(l, LoraTarget::kQ, xn.data(), q.data()));
    if (kv_here) {
      GK_RETURN_IF_ERROR(gemm->RunStaged(L.k, xn.data(), T, k.data()));
      GK_RETURN_IF_ERROR(ApplyLora(l, LoraTarget::kK, xn.data(), k.data()));
      if (has_v) {
        GK_RETURN_IF_ERROR(gemm->RunStaged(L.v, xn.data(), T, v.data()));
        GK_RETURN_IF_ERROR(ApplyLora(l, LoraTarget::kV, xn.data(), v.data()));
      }
    }
  }
  GK_RETURN_IF_ERROR(cuda::NormRopeAndKvWrite(n, stream));
  const int source = c.KvSourceLayer(l);
  const int window = c.IsFull(source) ? 0 : c.sliding_window;
  // Without a prefill chunk every row's output comes from the paged kernel, which then also
  // writes o_proj's bf16 input.
  const bool o_input_staged = long_runs.empty();
  for (const LongRun& run : long_runs) {  // prefill chunks: through tensor-core products
    cuda::PrefillAttentionArgs p;
    p.q = q.data();
    p.out = att.data();
    p.t0 = run.t0;
    p.T = run.n;
    p.first = run.first;
    p.table = d_tables + run.table_base[g];
    p.num_heads = int(N);
    p.kv_heads = int(K);
    p.head_dim = int(H);
    p.scale = AttentionScale(c);
    p.window = window;
    p.block_size = pool.block_size();
    p.k_pool = pool.KData(source);
    p.v_pool = pool.VData(source);
    p.dtype = pool.dtype();
    if (o.prefill_attention == CudaModelOptions::PrefillAttention::kFlash && cuda::FlashPrefillSupports(p.dtype, p.head_dim)) {
      GK_RETURN_IF_ERROR(cuda::FlashPrefillAttention(p, stream));
    } else {
      GK_RETURN_IF_ERROR(prefill_attention.Run(p, *gemm, stream));
    }
  }
  if (short_rows > 0) {  // decode steps and short chunks
    cuda::PagedAttentionArgs a = DecodeAttention(l);  // T, heads, head dim and splits: as Reserve sized them
    a.q = q.data();
    a.out = att.data();
    a.rows = d_short_rows;
    a.kv_heads = int(K);
    a.scale = AttentionScale(c);
    a.window = window;
    a.tokens = tokens[g];
    a.block_size = pool.block_size();
    a.k_pool = pool.KData(source);
    a.v_pool = pool.VData(source);
    a.dtype = pool.dtype();
    if (attention_splits.size() < size_t(cuda::PagedAttentionWorkspaceFloats(a))) {
      return Status::Error("decode attention's workspace was not reserved");
    }
    a.workspace = attention_splits.data();
    if (o_input_staged) {  // (braces: the macro is several statements)
      GK_ASSIGN_OR_RETURN(a.out_staged, gemm->StagingFor(size_t(T * N * H)));
    }
    GK_RETURN_IF_ERROR(cuda::PagedAttention(a, stream));
  }
  if (o_input_staged) {
    GK_RETURN_IF_ERROR(gemm->RunStaged(L.o, att.data(), T, out.data()));
  } else {
    GK_RETURN_IF_ERROR(gemm->Run(L.o, att.data(), T, out.data()));
  }
  GK_RETURN_IF_ERROR(ApplyLora(l, LoraTarget::kO, att.data(), out.data()));

  // GeGLU MLP: the residual add and the MLP's input norm in one kernel, converted once for gate
  // and up; the gate's product converted for down as it is made.
  GK_ASSIGN_OR_RETURN(const cuda::Bf16Staging mlp_in, gemm->StagingFor(size_t(T * D)));
  GK_RETURN_IF_ERROR(cuda::RmsNormAddRows(out.data(), L.post_attn_norm, T, D, eps, x.data(), stream, 1.f,
                                          {L.pre_ffw_norm, xn.data(), mlp_in}));
  if (!L.gate_up.empty() && lora_runs.empty() && 2 * T <= o.max_chunk) {
    // At most half a chunk of tokens (decode steps among them), so that `gate` holds T rows of
    // [gate_t | up_t]: gate and up as one product; the gate's kernel writes down's input to `up`.
    GK_RETURN_IF_ERROR(gemm->RunStaged(L.gate_up, xn.data(), T, gate.data()));
    GK_ASSIGN_OR_RETURN(const cuda::Bf16Staging down_in, gemm->StagingFor(size_t(T * F)));
    GK_RETURN_IF_ERROR(
        cuda::GeluTanhMulRows(gate.data(), 2 * F, gate.data() + F, 2 * F, T, F, up.data(), F, stream, down_in));
    GK_RETURN_IF_ERROR(gemm->RunStaged(L.down, up.data(), T, out.data()));
  } else {
    GK_RETURN_IF_ERROR(gemm->RunStaged(L.gate, xn.data(), T, gate.data()));
    GK_RETURN_IF_ERROR(ApplyLora(l, LoraTarget::kGate, xn.data(), gate.data()));
    GK_RETURN_IF_ERROR(gemm->RunStaged(L.up, xn.data(), T, up.data()));
    GK_RETURN_IF_ERROR(ApplyLora(l, LoraTarget::kUp, xn.data(), up.data()));
    GK_ASSIGN_OR_RETURN(const cuda::Bf16Staging down_in, gemm->StagingFor(size_t(T * F)));
    GK_RETURN_IF_ERROR(cuda::GeluTanhMul(gate.data(), up.data(), T * F, gate.data(), stream, down_in));
    GK_RETURN_IF_ERROR(gemm->RunStaged(L.down, gate.data(), T, out.data()));
    GK_RETURN_IF_ERROR(ApplyLora(l, LoraTarget::kDown, gate.data(), out.data()));
  }
  if (c.enable_moe_block) GK_RETURN_IF_ERROR(MoeBlock(l, T));  // out ← norm(dense) + norm(experts)
  if (c.hidden_size_per_layer_input == 0) return LastResidualAdd(l, T, L.post_ffw_norm);
  GK_RETURN_IF_ERROR(cuda::RmsNormAddRows(out.data(), L.post_ffw_norm, T, D, eps, x.data(), stream));
  return PerLayerInputBlock(l, T);
}

// What NormRopeAndKvWrite takes for layer l's q (in `q`, normed and rotated in place) and, on a
// layer with KV of its own, its K and V (in `k` and `v`; K=V layers have no v: V is the raw K
// projection, before k_norm and RoPE) into the pool.
cuda::QkvNormWrite CudaModel::Impl::NormRopeArgs(int l, int64_t T, const float* cos_sin, PagedKvPool& pool,
                                                 const cuda::PagedTokens& tokens) {
  const DeviceLayer& L = w.layers[size_t(l)];
  cuda::QkvNormWrite n;
  n.T = T;
  n.H = c.HeadDim(l);
  n.eps = c.rms_norm_eps;
  n.cos_sin = cos_sin;
  n.heads = c.num_heads;
  n.q = q.data();
  n.q_ld = int64_t(n.heads) * n.H;
  n.q_out = q.data();
  n.q_norm = L.q_norm;
  if (c.IsKvShared(l)) return n;
  n.kv_heads = c.KvHeads(l);
  n.k = k.data();
  n.v = L.v.empty() ? nullptr : v.data();
  n.kv_ld = int64_t(n.kv_heads) * n.H;
  n.k_norm = L.k_norm;
  n.v_norm = c.arch == Arch::kGemma4;
  n.tokens = tokens;
  n.block_size = pool.block_size();
  n.dtype = pool.dtype();
  n.k_pool = pool.KData(l);
  n.v_pool = pool.VData(l);
  return n;
}

// x = (x + RMSNorm(out) · norm) · layer_scalar, the layer's last residual add; where a layer
// follows, the same kernel norms the new x for it (its input norm, converted for q, k and v).
Status CudaModel::Impl::LastResidualAdd(int l, int64_t T, const float* norm) {
  cuda::ThenNorm then;
  if (l + 1 < c.num_layers) {
    GK_ASSIGN_OR_RETURN(then.staged, gemm->StagingFor(size_t(T * c.hidden_size)));
    then.w = w.layers[size_t(l + 1)].input_norm;
    then.out = xn.data();
    input_normed = true;
  }
  return cuda::RmsNormAddRows(out.data(), norm, T, c.hidden_size, c.rms_norm_eps, x.data(), stream,
                              w.layers[size_t(l)].layer_scalar, then);
}

// out = RMSNorm(out; post_ffw_norm_1) + RMSNorm(Σ_top-k w_e · expert_e(RMSNorm(x; pre_ffw_norm_2)); post_ffw_norm_2)
// (GemmaModel::MoeBlock). The routing comes to the host, which groups each expert's tokens;
// then per chosen expert: gather its rows, gate_up, GeGLU, down, and a weighted scatter-add.
Status CudaModel::Impl::MoeBlock(int l, int64_t T) {
  const DeviceLayer& L = w.layers[size_t(l)];
  const int64_t D = c.hidden_size, E = c.num_experts, k = c.top_k_experts, Fe = c.moe_intermediate_size;
  const float eps = c.rms_norm_eps;
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(out.data(), L.post_ffw_norm_1, T, D, eps, out.data(), stream));
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(x.data(), L.pre_ffw_norm_2, T, D, eps, moe_x.data(), stream));
  GK_RETURN_IF_ERROR(cuda::RmsNormRows(x.data(), L.router_weight, T, D, eps, xn.data(), stream));
  GK_RETURN_IF_ERROR(gemm->Run(L.router, xn.data(), T, router_logits.data()));
  GK_RETURN_IF_ERROR(cuda::RouteTopK(router_logits.data(), T, int(E), int(k), L.per_expert_scale, route_expert.data(),
                                     route_weight.data(), stream));
  h_route_expert.resize(size_t(T * k));
  h_route_weight.resize(size_t(T * k));
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(h_route_expert.data(), route_expert.data(), size_t(T * k) * sizeof(int32_t),
                                           cudaMemcpyDeviceToHost, stream), "copying the routing from the GPU"));
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(h_route_weight.data(), route_weight.data(), size_t(T * k) * sizeof(float),
                                           cudaMemcpyDeviceToHost, stream), "copying the routing from the GPU"));
  GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "routing on the GPU"));
  // Each expert's tokens and weights, expert by expert.
  std::vector<int64_t> start(size_t(E + 1), 0);
  for (int32_t e : h_route_expert) {
    if (e < 0 || e >= E) return Status::Error(StrCat("layer ", l, ": the router chose no expert (NaN activations?)"));
    ++start[size_t(e) + 1];
  }
  for (int64_t e = 0; e < E; ++e) start[size_t(e + 1)] += start[size_t(e)];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  h_ex_rows.resize(size_t(T * k));
  h_ex_weight.resize(size_t(T * k));
  for (int64_t i = 0; i < T * k; ++i) {
    const int64_t at = fill[size_t(h_route_expert[size_t(i)])]++;
    h_ex_rows[size_t(at)] = int32_t(i / k);
    h_ex_weight[size_t(at)] = h_route_weight[size_t(i)];
  }
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(ex_rows.data(), h_ex_rows.data(), size_t(T * k) * sizeof(int32_t),
                                           cudaMemcpyHostToDevice, stream), "copying the routing to the GPU"));
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(ex_weight.data(), h_ex_weight.data(), size_t(T * k) * sizeof(float),
                                           cudaMemcpyHostToDevice, stream), "copying the routing to the GPU"));
  GK_RETURN_IF_ERROR(Check(cudaMemsetAsync(moe_out.data(), 0, size_t(T * D) * sizeof(float), stream), "cudaMemset"));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = start[size_t(e + 1)] - start[size_t(e)], s0 = start[size_t(e)];
    if (n == 0) continue;
    GK_RETURN_IF_ERROR(cuda::GatherRows(moe_x.data(), D, ex_rows.data() + s0, n, ex_in.data(), stream));
    GK_RETURN_IF_ERROR(gemm->Run(L.expert_gate_up[size_t(e)], ex_in.data(), n, ex_gate_up.data()));
    GK_RETURN_IF_ERROR(cuda::GeluTanhMulRows(ex_gate_up.data(), 2 * Fe, ex_gate_up.data() + Fe, 2 * Fe, n, Fe, ex_h.data(),
                                             Fe, stream));
    GK_RETURN_IF_ERROR(gemm->Run(L.expert_down[size_t(e)], ex_h.data(), n, ex_out.data()));
    GK_RETURN_IF_ERROR(cuda::ScatterAddRows(ex_out.data(), D, ex_rows.data() + s0, ex_weight.data() + s0, n,
                                            moe_out.data(), stream));
  }
  return cuda::RmsNormAddRows(moe_out.data(), L.post_ffw_norm_2, T, D, eps, out.data(), stream);
}

// The per-layer inputs (model/cuda/device_weights.h); x holds the scaled embeddings.
Status CudaModel::Impl::PerLayerInputs(const int32_t* tokens, int64_t T) {
  return gk::PerLayerInputs(c, w, *gemm, x.data(), tokens, T, ple_embed_scale, ple.data(), ple_tok.data(), stream);
}

// x = (x + RMSNorm(W_proj(gelu_tanh(W_gate x) · ple[:, l, :]); post_per_layer_input_norm)) · layer_scalar
Status CudaModel::Impl::PerLayerInputBlock(int l, int64_t T) {
  const DeviceLayer& L = w.layers[size_t(l)];
  const int64_t P = c.hidden_size_per_layer_input, LP = int64_t(c.num_layers) * P;
  GK_RETURN_IF_ERROR(gemm->Run(L.ple_gate, x.data(), T, ple_gate.data()));
  GK_RETURN_IF_ERROR(cuda::GeluTanhMulRows(ple_gate.data(), P, ple.data() + int64_t(l) * P, LP, T, P, ple_gate.data(), P, stream));
  GK_RETURN_IF_ERROR(gemm->Run(L.ple_proj, ple_gate.data(), T, out.data()));
  return LastResidualAdd(l, T, L.post_ple_norm);
}

// The adapter's factors on the device: uploaded the first time a pass uses it, then kept.
Result<CudaModel::Impl::DeviceAdapter*> CudaModel::Impl::AdapterOnDevice(const LoraWeights& weights) {
  auto it = adapters.find(weights.id());
  if (it != adapters.end()) return &it->second;
  DeviceAdapter d;
  d.factors.resize(size_t(c.num_layers) * kNumLoraTargets);
  std::vector<float> host;
  auto put = [&](const MatrixView& m) {  // rows as f32 (bf16 and packed storage too), 256-byte aligned
    const int64_t offset = int64_t(host.size());
    host.resize(size_t(offset + (m.rows * m.cols + 63) / 64 * 64), 0.f);
    for (int64_t r = 0; r < m.rows; ++r) m.RowToF32(r, host.data() + offset + r * m.cols);
    return offset;
  };
  for (int l = 0; l < c.num_layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraWeights::Factors* f = weights.Find(l, LoraTarget(t));
      if (f == nullptr) continue;
      DeviceAdapter::Factors& df = d.factors[size_t(l) * kNumLoraTargets + size_t(t)];
      df.a = put(f->a);
      df.b = put(f->b);
      df.in = f->a.cols;
      df.out = f->b.rows;
      d.rank = f->a.rows;  // (bf16 storage pads the rank with zero rows: the padding adds nothing)
    }
  }
  auto arena = DeviceBuffer<float>::From(host);
  if (!arena.ok()) return arena.status().Wrap(StrCat("a LoRA adapter's ", host.size() * sizeof(float) >> 20, " MiB on ", device_name));
  d.arena = std::move(*arena);
  return &adapters.emplace(weights.id(), std::move(d)).first->second;
}

// This pass's adapters on the device, the scratch their products need; adapters no pass has
// used lately leave the device, beyond the most one pass has used.
Status CudaModel::Impl::PrepareLora() {
  ++passes;
  if (lora_runs.empty()) return Status::Ok();
  int64_t rank = 0;
  std::set<uint64_t> used;
  for (LoraRun& run : lora_runs) {
    GK_ASSIGN_OR_RETURN(run.adapter, AdapterOnDevice(*run.weights));
    run.adapter->last_pass = passes;
    used.insert(run.weights->id());
    rank = std::max(rank, run.adapter->rank);
  }
  adapters_kept = std::max(adapters_kept, used.size());
  while (adapters.size() > adapters_kept) {
    auto oldest = adapters.end();
    for (auto it = adapters.begin(); it != adapters.end(); ++it) {
      if (!used.count(it->first) && (oldest == adapters.end() || it->second.last_pass < oldest->second.last_pass)) oldest = it;
    }
    if (oldest == adapters.end()) break;
    adapters.erase(oldest);
  }
  const size_t need = size_t(o.max_chunk) * size_t(std::max<int64_t>(rank, 1));
  if (lora_u.size() < need) {
    GK_ASSIGN_OR_RETURN(lora_u, DeviceBuffer<float>::Allocate(need));
    ++generation;
  }
  return Status::Ok();
}

// y += (x·Aᵀ)·(scaling·B)ᵀ on each LoRA run's rows (the CPU's segmented LoRA, kernels/lora_segments.h),
// in f32.
Status CudaModel::Impl::ApplyLora(int l, LoraTarget t, const float* x, float* y) {
  for (const LoraRun& run : lora_runs) {
    const DeviceAdapter& a = *run.adapter;
    const DeviceAdapter::Factors& f = a.factors[size_t(l) * kNumLoraTargets + size_t(t)];
    if (f.a < 0) continue;
    GK_RETURN_IF_ERROR(cuda::F32Product(*gemm, run.n, a.rank, f.in, x + run.t0 * f.in, f.in, false, a.arena.data() + f.a,
                                        f.in, false, lora_u.data(), a.rank, 1.f, 0.f));
    GK_RETURN_IF_ERROR(cuda::F32Product(*gemm, run.n, f.out, a.rank, lora_u.data(), a.rank, false, a.arena.data() + f.b,
                                        a.rank, false, y + run.t0 * f.out, f.out, 1.f, 1.f));
  }
  return Status::Ok();
}

}  // namespace gk
