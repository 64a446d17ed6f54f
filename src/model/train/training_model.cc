#include "model/train/training_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "dist/communicator.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/ops.h"
#include "kernels/train_ops.h"
#include "model/decoder_constants.h"
#include "model/train/training_buffers.h"
#include "util/clock.h"

namespace gk {

Result<std::unique_ptr<TrainingModel>> TrainingModel::Create(const ModelConfig& c, ModelWeights weights,
                                                             LoraAdapter* adapter, ThreadPool* pool,
                                                             TrainingModelOptions options) {
  bool packed = false, quantized = false;
  ForEachMatrix(weights, [&](const MatrixView& m) {
    packed |= m.packed;
    quantized |= m.dtype == DType::kQ8_0;
  });
  if (packed) return Status::Error("training: load the base weights unpacked (ModelLoadOptions::pack = false)");
  if (quantized) return Status::Error("training: quantized base weights are not supported (train on bf16 or f32)");
  if (options.max_tokens < 2) return Status::Error("training: max_tokens must be at least 2");
  const bool full = !options.full_finetune_from.empty();
  if (full && adapter) return Status::Error("training: full fine-tuning trains the weights themselves, not an adapter");
  if (options.tp.active() && (full || c.enable_moe_block)) {
    return Status::Error(StrCat("training: tensor parallelism trains LoRA adapters of dense models; ",
                                full ? "full fine-tuning" : "a mixture-of-experts model", " is not supported with --tp yet"));
  }
  if (adapter) {
    for (LoraModule& m : adapter->modules()) {
      m.grad_a.assign(m.a.size(), 0.f);
      m.grad_b.assign(m.b.size(), 0.f);
    }
  }
  std::unique_ptr<TrainingModel> tm(new TrainingModel(c, std::move(weights), adapter, pool, options));
  if (full) {
    // Created from the model's own weights: the gradients are found by their addresses.
    GK_ASSIGN_OR_RETURN(FullParams fp, FullParams::Create(options.full_finetune_from, tm->config_, &tm->weights_));
    tm->full_ = std::make_unique<FullParams>(std::move(fp));
  }
  return tm;
}

TrainingModel::TrainingModel(const ModelConfig& c, ModelWeights weights, LoraAdapter* adapter, ThreadPool* pool,
                             TrainingModelOptions options)
    : config_(c), weights_(std::move(weights)), adapter_(adapter), pool_(pool), options_(options),
      s_(std::make_unique<Scratch>()) {
  embed_scale_ = ScaleInDtype(c.hidden_size, weights_.checkpoint_dtype);
  if (c.hidden_size_per_layer_input > 0) {
    ple_embed_scale_ = ScaleInDtype(c.hidden_size_per_layer_input, weights_.checkpoint_dtype);
  }
  attn_scale_ = AttentionScale(c);
  rope_ = MakeLayerRope(c);
  vocab_ = VocabShard(c.vocab_size, options.tp.size, options.tp.rank);
  ple_vocab_ = VocabShard(c.vocab_size_per_layer_input, options.tp.size, options.tp.rank);
  if (!options.remat) acts_.resize(size_t(c.num_layers));
  work_ = std::make_unique<LayerActs>();
}

TrainingModel::~TrainingModel() = default;

const float* TrainingModel::RopeTable(int l) {
  const float* inv_freq = rope_.InvFreq(l);
  for (const auto& [freq, table] : s_->rope_tables) {
    if (freq == inv_freq) return table.data();
  }
  const int64_t H = config_.HeadDim(l);
  std::vector<float> table(size_t(T_ * H));
  pool_->ParallelFor(T_, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) RopeCosSin(inv_freq, H / 2, pos_[size_t(t)], table.data() + t * H);
  });
  s_->rope_tables.emplace_back(inv_freq, std::move(table));
  return s_->rope_tables.back().second.data();
}

namespace {

// The model's loops on the OpenMP team that runs its products (thread_pool.h says why), for
// the duration of a pass; where the products run on OpenBLAS's threads the pool's own workers
// stay. Measured at 270M, seq 512, 2 threads: bf16 196 -> 247 tokens/s, f32 127 -> 148.
class LoopsOnProductThreads {
 public:
  explicit LoopsOnProductThreads(ThreadPool* pool) : pool_(pool), was_(pool->openmp()) {
    pool_->SetOpenMp(std::string_view(SgemmLibrary(pool_->size())) == "oneDNN");
  }
  ~LoopsOnProductThreads() { pool_->SetOpenMp(was_); }
  LoopsOnProductThreads(const LoopsOnProductThreads&) = delete;
  LoopsOnProductThreads& operator=(const LoopsOnProductThreads&) = delete;

 private:
  ThreadPool* pool_;
  bool was_;
};

}  // namespace

Status TrainingModel::Prepare(std::span<const TrainRowView> rows, bool backward) {
  // The sgemm library threads its own products here; the inference engine's prefill route sets
  // it to one thread (kernels/gemm.h), and a process may use both.
  EnsureGemmThreads(pool_->size());
  int64_t T = 0;
  for (const TrainRowView& r : rows) {
    if (r.tokens.empty()) return Status::Error("training: empty row");
    if (r.loss_mask.size() != r.tokens.size()) {
      return Status::Error(StrCat("training: loss mask has ", r.loss_mask.size(), " entries for ", r.tokens.size(), " tokens"));
    }
    T += int64_t(r.tokens.size());
  }
  if (T > options_.max_tokens) {
    return Status::Error(StrCat("training: micro-batch of ", T, " tokens exceeds max_tokens ", options_.max_tokens));
  }
  if (T == 0) return Status::Error("training: empty micro-batch");
  tokens_.clear();
  mask_.clear();
  pos_.clear();
  s_->rope_tables.clear();
  row_start_.clear();
  for (const TrainRowView& r : rows) {
    row_start_.push_back(int64_t(tokens_.size()));
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      const int32_t id = r.tokens[i];
      if (id < 0 || id >= config_.vocab_size) {
        return Status::Error(StrCat("training: token id ", id, " outside the vocabulary (", config_.vocab_size, ")"));
      }
      tokens_.push_back(id);
      mask_.push_back(i == 0 ? 0 : (r.loss_mask[i] ? 1 : 0));
      pos_.push_back(int64_t(i));
    }
  }
  row_start_.push_back(T);
  T_ = T;
  s_->Resize(config_, adapter_ ? adapter_->rank() : 0, T, full_ != nullptr);
  s_->layer_inputs.resize(size_t(config_.num_layers) + 1);
  for (auto& x : s_->layer_inputs) x.resize(size_t(T * config_.hidden_size));
  const bool per_layer = backward && !options_.remat;
  for (size_t i = 0; i < acts_.size(); ++i) acts_[i].Resize(config_, adapter_, int(i), per_layer ? T : 0);
  work_->Resize(config_, adapter_, -1, per_layer ? 0 : T);
  return Status::Ok();
}

void TrainingModel::Embed() {
  const int64_t D = config_.hidden_size;
  float* x = s_->layer_inputs[0].data();
  pool_->ParallelFor(T_, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t row = tokens_[size_t(t)] - vocab_.begin;  // another rank's row: zeros, summed below
      if (row < 0 || row >= vocab_.rows) {
        std::fill(x + t * D, x + (t + 1) * D, 0.f);
        continue;
      }
      weights_.embed.RowToF32(row, x + t * D);
      Scale(x + t * D, D, embed_scale_);
    }
  });
  TpSum(x, T_ * D);
  if (config_.hidden_size_per_layer_input > 0) PerLayerInputs();
  std::fill(s_->dple_all.begin(), s_->dple_all.end(), 0.f);
  for (auto& g : s_->shared_dk) std::fill(g.begin(), g.end(), 0.f);
  for (auto& g : s_->shared_dv) std::fill(g.begin(), g.end(), 0.f);
}

Status TrainingModel::ForwardBackward(std::span<const TrainRowView> rows, float loss_scale, uint64_t dropout_key,
                                      MicroBatchStats* stats) {
  LoopsOnProductThreads loops(pool_);
  GK_RETURN_IF_ERROR(Prepare(rows, true));
  dropout_key_ = dropout_key;
  dropout_on_ = adapter_ && adapter_->options().dropout > 0;
  const int L = config_.num_layers;
  const int64_t D = config_.hidden_size;
  const double t0 = NowSeconds();
  Embed();
  for (int l = 0; l < L; ++l) {
    LayerActs& a = options_.remat ? *work_ : acts_[size_t(l)];
    LayerForward(l, s_->layer_inputs[size_t(l)].data(), a, s_->layer_inputs[size_t(l) + 1].data(), dropout_on_);
  }
  activation_bytes_ = work_->Bytes();
  for (const auto& x : s_->layer_inputs) activation_bytes_ += int64_t(x.size() * sizeof(float));
  for (const LayerActs& a : acts_) activation_bytes_ += a.Bytes();

  float* dx = s_->dx.data();
  std::fill(dx, dx + T_ * D, 0.f);
  MicroBatchStats mb;
  const double t1 = NowSeconds();
  LossHead(s_->layer_inputs[size_t(L)].data(), loss_scale, true, &mb, dx);
  const double t2 = NowSeconds();
  for (int l = L - 1; l >= 0; --l) {
    LayerActs& a = options_.remat ? *work_ : acts_[size_t(l)];
    if (options_.remat) LayerForward(l, s_->layer_inputs[size_t(l)].data(), a, s_->x_tmp.data(), dropout_on_);
    LayerBackward(l, a, dx);
  }
  if (full_) EmbeddingBackward(dx);
  pass_seconds_ = {t1 - t0, t2 - t1, NowSeconds() - t2};
  mb.tokens = T_;
  if (stats) {
    stats->loss_sum += mb.loss_sum;
    stats->targets += mb.targets;
    stats->correct += mb.correct;
    stats->tokens += mb.tokens;
  }
  return Status::Ok();
}

void TrainingModel::ForwardOnly() {
  dropout_on_ = false;
  Embed();
  for (int l = 0; l < config_.num_layers; ++l) {
    LayerForward(l, s_->layer_inputs[size_t(l)].data(), *work_, s_->layer_inputs[size_t(l) + 1].data(), false);
  }
}

Status TrainingModel::Evaluate(std::span<const TrainRowView> rows, MicroBatchStats* stats) {
  LoopsOnProductThreads loops(pool_);
  GK_RETURN_IF_ERROR(Prepare(rows, false));
  ForwardOnly();
  MicroBatchStats mb;
  LossHead(s_->layer_inputs[size_t(config_.num_layers)].data(), 1.f, false, &mb, nullptr);
  mb.tokens = T_;
  stats->loss_sum += mb.loss_sum;
  stats->targets += mb.targets;
  stats->correct += mb.correct;
  stats->tokens += mb.tokens;
  return Status::Ok();
}

void TrainingModel::TpSum(float* x, int64_t n) {
  const TensorParallel& tp = options_.tp;
  if (tp.active()) dist::OrAbort(*tp.comm, tp.comm->AllReduceSum(std::span<float>(x, size_t(n))), "tensor-parallel all-reduce");
}

uint64_t TrainingModel::DropIndex(LoraTarget t, int64_t i, int64_t in) const {
  const TensorParallel& tp = options_.tp;
  if (!tp.active() || (t != LoraTarget::kO && t != LoraTarget::kDown)) return uint64_t(i);
  // o and down hold 1/tp of their input columns: (token, column) in the whole model's layout.
  return uint64_t((i / in) * in * tp.size + int64_t(tp.rank) * in + i % in);
}

Status TrainingModel::Logits(std::span<const int32_t> tokens, float* logits) {
  if (options_.tp.active()) return Status::Error("training: Logits of a tensor-parallel share are not gathered");
  LoopsOnProductThreads loops(pool_);
  std::vector<uint8_t> mask(tokens.size(), 0);
  const TrainRowView row{tokens, mask};
  GK_RETURN_IF_ERROR(Prepare({&row, 1}, false));
  ForwardOnly();
  const int64_t D = config_.hidden_size, V = config_.vocab_size;
  std::vector<float> h(size_t(T_ * D));
  RmsNormRows(s_->layer_inputs[size_t(config_.num_layers)].data(), weights_.final_norm.data(), T_, D,
              config_.rms_norm_eps, h.data());
  Product(weights_.embed, h.data(), T_, logits, false);
  if (config_.final_logit_softcap > 0.f) {
    pool_->ParallelFor(T_, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) Softcap(logits + t * V, V, config_.final_logit_softcap);
    });
  }
  return Status::Ok();
}

// Loss over the target rows only, the vocabulary in chunks: pass 1 finds each row's
// log-sum-exp (online), pass 2 recomputes the chunk's logits and adds its share of the hidden
// gradient, dh += dz · E_chunk.
void TrainingModel::LossHead(const float* x_final, float loss_scale, bool backward, MicroBatchStats* stats, float* dx) {
  const int64_t D = config_.hidden_size;
  const float cap = config_.final_logit_softcap, eps = config_.rms_norm_eps;
  Scratch& s = *s_;
  s.loss_rows.clear();
  s.loss_targets.clear();
  for (size_t r = 0; r + 1 < row_start_.size(); ++r) {
    for (int64_t t = row_start_[r]; t + 1 < row_start_[r + 1]; ++t) {
      if (mask_[size_t(t + 1)]) {
        s.loss_rows.push_back(t);
        s.loss_targets.push_back(tokens_[size_t(t + 1)]);
      }
    }
  }
  const int64_t R = int64_t(s.loss_rows.size());
  stats->targets += R;
  if (R == 0) return;
  s.h.resize(size_t(R * D));
  pool_->ParallelFor(R, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      RmsNorm(x_final + s.loss_rows[size_t(r)] * D, weights_.final_norm.data(), D, eps, s.h.data() + r * D);
    }
  });
  // Chunk of the vocabulary: its widened embedding rows and its R × VC logits ~ 16 MiB each.
  // Under tensor parallelism only this rank's rows [v_begin, v_begin + Vl) of the vocabulary.
  const int64_t Vl = vocab_.rows, v_begin = vocab_.begin;
  // At least 256 rows, at most Vl, which may be fewer (a rank's shard of a small vocabulary;
  // std::clamp with its bounds crossed is undefined: scripts/sanitize.sh stopped there).
  const int64_t VC = std::min<int64_t>(std::max<int64_t>((int64_t(4) << 20) / std::max(R, D), 256), std::max<int64_t>(Vl, 1));
  // bf16 precision reads the chunk's rows of the bf16 table in place (kernels/gemm_bf16.h);
  // f32 widens them into e_chunk.
  const bool bf16_head = Bf16Products(weights_.embed);
  auto chunk_rows = [&](int64_t v0, int64_t vc) {
    return MatrixView{DType::kBF16, vc, D, static_cast<const uint16_t*>(weights_.embed.data) + v0 * D};
  };
  if (!bf16_head) s.e_chunk.resize(size_t(VC * D));
  s.z.resize(size_t(R * VC));
  std::vector<float> m(size_t(R), -std::numeric_limits<float>::infinity()), sum(size_t(R), 0.f);
  std::vector<float> best(size_t(R), -std::numeric_limits<float>::infinity()), z_target(size_t(R), 0.f);
  std::vector<int64_t> arg(size_t(R), 0);
  auto chunk_logits = [&](int64_t v0, int64_t vc) {  // v0: a local row
    if (bf16_head) {
      Bf16WeightMatMul(chunk_rows(v0, vc), s.h.data(), R, s.z.data(), false, *pool_);
    } else {
      pool_->ParallelFor(vc, [&](int64_t b, int64_t e, int) {
        for (int64_t v = b; v < e; ++v) weights_.embed.RowToF32(v0 + v, s.e_chunk.data() + v * D);
      });
      Sgemm(false, true, R, vc, D, 1.f, s.h.data(), D, s.e_chunk.data(), D, 0.f, s.z.data(), vc);
    }
    if (cap > 0.f) {
      pool_->ParallelFor(R, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) Softcap(s.z.data() + r * vc, vc, cap);
      });
    }
  };
  // LoRA's backward pass needs only the hidden gradient dh = Σ_v ∂loss/∂raw_v · E_v: it is
  // accumulated in the same pass, the way attention accumulates its output (rows of
  // exp(z − running max)·softcap' times the chunk's rows, rescaled when a row's max grows,
  // normalised by the final sum): each chunk's logits are computed once, not again in a second
  // pass. Full fine-tuning also needs the tied head's gradient dzᵀ·h, so it keeps two passes.
  const bool one_pass = backward && WeightGrad(&weights_.embed) == nullptr;
  if (one_pass) s.dh.assign(size_t(R * D), 0.f);
  for (int64_t v0 = 0; v0 < Vl; v0 += VC) {
    const int64_t vc = std::min(VC, Vl - v0);
    chunk_logits(v0, vc);
    pool_->ParallelFor(R, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        float* z = s.z.data() + r * vc;
        int64_t ca = 0;
        const float cm = RowMaxArg(z, vc, &ca);
        if (cm > best[size_t(r)]) best[size_t(r)] = cm, arg[size_t(r)] = v_begin + v0 + ca;
        const float old = m[size_t(r)], nm = std::max(old, cm);
        const int64_t tg = s.loss_targets[size_t(r)] - v_begin;
        if (tg >= v0 && tg < v0 + vc) z_target[size_t(r)] = z[tg - v0];
        // One pass: z ← exp(z − nm)·(1 − (z/cap)²) while summing exp(z − nm).
        const double acc = one_pass ? SumExpMinusAndGradRow(z, vc, nm, cap) : SumExpMinus(z, vc, nm);
        sum[size_t(r)] = float(double(sum[size_t(r)]) * std::exp(double(old - nm)) + acc);
        m[size_t(r)] = nm;
        if (one_pass && old < nm) Scale(s.dh.data() + r * D, D, std::exp(old - nm));  // exp(−inf) = 0 at the first chunk
      }
    });
    if (one_pass && bf16_head) {
      Bf16WeightMatMulT(chunk_rows(v0, vc), s.z.data(), R, s.dh.data(), true, *pool_);
    } else if (one_pass) {
      Sgemm(false, false, R, D, vc, 1.f, s.z.data(), vc, s.e_chunk.data(), D, 1.f, s.dh.data(), D);
    }
  }
  const std::vector<float> local_max = m;  // the frame of this rank's accumulated dh
  if (options_.tp.active()) {
    // Every rank's per-row (max, sum of exp, best logit, its index, target logit), combined in
    // rank order on every rank: the same log-sum-exp and argmax as one pass over the vocabulary.
    const int tp = options_.tp.size;
    std::vector<float> mine(size_t(R) * 5), all(size_t(R) * 5 * size_t(tp));
    for (int64_t r = 0; r < R; ++r) {
      float* o = mine.data() + r * 5;
      o[0] = m[size_t(r)], o[1] = sum[size_t(r)], o[2] = best[size_t(r)], o[3] = z_target[size_t(r)];
      o[4] = float(arg[size_t(r)] - v_begin);  // < V / tp: exact in a float
    }
    dist::OrAbort(*options_.tp.comm, options_.tp.comm->AllGather(mine, all), "tensor-parallel all-gather of the loss");
    for (int64_t r = 0; r < R; ++r) {
      float mm = -std::numeric_limits<float>::infinity(), bb = mm, zt = 0.f;
      double ss = 0;
      int64_t aa = 0;
      for (int k = 0; k < tp; ++k) {
        const float* o = all.data() + (int64_t(k) * R + r) * 5;
        const VocabRange vk = VocabShard(config_.vocab_size, tp, k);
        if (vk.rows == 0) continue;
        const float nm = std::max(mm, o[0]);
        ss = ss * std::exp(double(mm - nm)) + double(o[1]) * std::exp(double(o[0] - nm));
        mm = nm;
        if (o[2] > bb) bb = o[2], aa = vk.begin + int64_t(o[4]);
        const int64_t tg = s.loss_targets[size_t(r)];
        if (tg >= vk.begin && tg < vk.begin + vk.rows) zt = o[3];
      }
      m[size_t(r)] = mm, sum[size_t(r)] = float(ss), best[size_t(r)] = bb, arg[size_t(r)] = aa, z_target[size_t(r)] = zt;
    }
  }
  std::vector<float> lse(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    lse[size_t(r)] = m[size_t(r)] + std::log(sum[size_t(r)]);
    stats->loss_sum += double(lse[size_t(r)]) - double(z_target[size_t(r)]);
    stats->correct += arg[size_t(r)] == s.loss_targets[size_t(r)] ? 1 : 0;
  }
  if (!backward) return;
  if (one_pass) {
    // dh = scale·(Σ_v p_v·softcap'_v·E_v − softcap'_t·E_t): the accumulated rows normalised by
    // the whole vocabulary's sum (in its max's frame), minus the target row where this rank holds it.
    pool_->ParallelFor(R, [&](int64_t b, int64_t e, int) {
      std::vector<float> row(static_cast<size_t>(D));
      for (int64_t r = b; r < e; ++r) {
        float* dh = s.dh.data() + r * D;
        Scale(dh, D, loss_scale * float(std::exp(double(local_max[size_t(r)] - m[size_t(r)])) / double(sum[size_t(r)])));
        const int64_t tg = s.loss_targets[size_t(r)] - v_begin;
        if (tg < 0 || tg >= Vl) continue;
        const float th = cap > 0.f ? z_target[size_t(r)] / cap : 0.f;
        weights_.embed.RowToF32(tg, row.data());
        Axpy(-loss_scale * (1.f - th * th), row.data(), dh, D);
      }
    });
  } else {  // two passes: the log-sum-exp first, then each chunk's gradient
    s.dh.assign(size_t(R * D), 0.f);
    for (int64_t v0 = 0; v0 < Vl; v0 += VC) {
      const int64_t vc = std::min(VC, Vl - v0);
      chunk_logits(v0, vc);
      pool_->ParallelFor(R, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) {
          CrossEntropyGradRow(s.z.data() + r * vc, vc, lse[size_t(r)], s.loss_targets[size_t(r)] - v_begin - v0, cap,
                              loss_scale);
        }
      });
      Sgemm(false, false, R, D, vc, 1.f, s.z.data(), vc, s.e_chunk.data(), D, 1.f, s.dh.data(), D);
      if (float* ge = WeightGrad(&weights_.embed)) {  // the tied head: dE_chunk += dzᵀ·h
        Sgemm(true, false, vc, D, R, 1.f, s.z.data(), vc, s.h.data(), D, 1.f, ge + v0 * D, D);
      }
    }
  }
  if (WeightGrad(&weights_.final_norm)) {
    std::vector<float> rows(size_t(R * D));
    for (int64_t r = 0; r < R; ++r) {
      std::copy(x_final + s.loss_rows[size_t(r)] * D, x_final + (s.loss_rows[size_t(r)] + 1) * D, rows.data() + r * D);
    }
    AddNormGrad(weights_.final_norm, rows.data(), s.dh.data(), R, D);
  }
  TpSum(s.dh.data(), R * D);  // each rank's vocabulary rows' share of the hidden gradient
  pool_->ParallelFor(R, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t t = s.loss_rows[size_t(r)];
      RmsNormBackward(x_final + t * D, weights_.final_norm.data(), D, eps, s.dh.data() + r * D, dx + t * D, true);
    }
  });
}

void TrainingModel::AddMatrixGrad(const MatrixView& w, const float* dy, const float* x, int64_t rows) {
  float* g = WeightGrad(&w);
  if (g == nullptr || rows == 0) return;
  Sgemm(true, false, w.rows, w.cols, rows, 1.f, dy, w.rows, x, w.cols, 1.f, g, w.cols);
}

void TrainingModel::AddNormGrad(const std::vector<float>& w, const float* x, const float* dy, int64_t rows,
                                int64_t n) {
  float* g = WeightGrad(&w);
  if (g == nullptr) return;
  const double eps = config_.rms_norm_eps;
  // Partial sums over fixed blocks of rows, then a reduction in block order: no two threads
  // write one column, and the sum is the same however the pool schedules the blocks (resumed
  // runs repeat bit for bit).
  const int64_t blocks = std::min<int64_t>(rows, 16);
  std::vector<double> part(size_t(blocks) * size_t(n), 0.0);
  pool_->ParallelFor(blocks, [&](int64_t b0, int64_t b1, int) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      double* acc = part.data() + size_t(blk) * size_t(n);
      for (int64_t t = blk * rows / blocks; t < (blk + 1) * rows / blocks; ++t) {
        const float* xr = x + t * n;
        const float* dr = dy + t * n;
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
        const double r = 1.0 / std::sqrt(ss / double(n) + eps);
        for (int64_t i = 0; i < n; ++i) acc[i] += double(dr[i]) * xr[i] * r;
      }
    }
  });
  for (int64_t blk = 0; blk < blocks; ++blk) {
    for (int64_t i = 0; i < n; ++i) g[i] += float(part[size_t(blk) * size_t(n) + size_t(i)]);
  }
}

// x0 = E[token] · embed_scale (and, with PLE, the per-layer inputs read x0 too). transformers'
// embeddings have padding_idx = pad_token_id: the pad row gets no gradient from the lookup
// (the tied head still gives it one).
void TrainingModel::EmbeddingBackward(float* dx0) {
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size;
  Scratch& s = *s_;
  if (c.hidden_size_per_layer_input > 0) {
    // p = (ctx + E_ple[token]·ple_scale)·2^-½, ctx = RmsNorm_P(u; w), u = x0·W_plmᵀ·D^-½.
    const int64_t P = c.hidden_size_per_layer_input, L = c.num_layers, LP = L * P;
    const float inv_sqrt2 = 1.f / std::sqrt(2.f), inv_sqrt_d = 1.f / std::sqrt(float(D));
    float* dp = s.dple_all.data();
    Scale(dp, T_ * LP, inv_sqrt2);  // now the gradient of ctx and of the scaled token rows
    if (float* g = WeightGrad(&weights_.ple_embed)) {
      for (int64_t t = 0; t < T_; ++t) {
        const int32_t id = tokens_[size_t(t)] < c.vocab_size_per_layer_input ? tokens_[size_t(t)] : c.pad_token_id;
        if (id == c.pad_token_id) continue;
        Axpy(ple_embed_scale_, dp + t * LP, g + int64_t(id) * LP, LP);
      }
    }
    AddNormGrad(weights_.ple_proj_norm, s.ple_u.data(), dp, T_ * L, P);
    float* du = s.ple_du.data();
    pool_->ParallelFor(T_ * L, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        RmsNormBackward(s.ple_u.data() + i * P, weights_.ple_proj_norm.data(), P, c.rms_norm_eps, dp + i * P,
                        du + i * P, false);
      }
    });
    Scale(du, T_ * LP, inv_sqrt_d);
    AddMatrixGrad(weights_.ple_model_proj, du, s.layer_inputs[0].data(), T_);
    ProductT(weights_.ple_model_proj, du, T_, dx0, true);
  }
  float* g = WeightGrad(&weights_.embed);
  if (g == nullptr) return;
  for (int64_t t = 0; t < T_; ++t) {
    if (tokens_[size_t(t)] == c.pad_token_id) continue;
    Axpy(embed_scale_, dx0 + t * D, g + int64_t(tokens_[size_t(t)]) * D, D);
  }
}

}  // namespace gk
