// The Gemma 4 (and Gemma 3) text decoder with LoRA, forward and backward, for fine-tuning.
//
// The base weights are frozen and stay in their checkpoint dtype; activations, LoRA factors
// and gradients are float32. One call runs a micro-batch: its rows are concatenated into one
// sequence of T tokens whose attention never crosses a row boundary (positions restart at 0 in
// every row), so a micro-batch of several rows costs no padding ("packed"); the trainer can
// also pad rows to the micro-batch's longest (pad tokens carry no loss) to measure what
// padding costs. Matrix products go through OpenBLAS or oneDNN in f32 (kernels/gemm.h), or, in
// bf16 precision, the products against the frozen bf16 weights take bf16 activations
// (kernels/gemm_bf16.h).
//
// Loss: the sum over target tokens (loss_mask = 1) of −log softmax(logits)[target], times
// loss_scale (the trainer passes 1 / targets of the whole effective batch). The logit rows of
// non-target positions are never computed, and the vocabulary is processed in chunks (one pass
// that also accumulates the hidden gradient; full fine-tuning: log-sum-exp, then gradient), so
// the T × V logits never exist at once.
//
// Memory: without remat, every layer's activations are kept for the backward pass
// (activation_bytes()); with remat only each layer's input is, and the layer's forward pass is
// recomputed just before its backward pass (the reference case's per-layer remat).
//
// Every Gemma 4 variant and Gemma 3: sliding and full layers, K=V layers, partial RoPE, softcap,
// layer_scalar, Gemma 3 norms/scale; per-layer embeddings (E2B/E4B: the PLE tables and
// projections stay frozen, gradients flow through the per-layer block into the residual
// stream), KV sharing (a shared layer attends over its source layer's K/V and sends their
// gradient back to it), the double-wide MLP, and the MoE block of 26B-A4B (router and experts
// frozen; the gradient flows through the experts and through the top-k routing weights).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/decoder_constants.h"
#include "model/tensor_parallel.h"
#include "model/train/full_params.h"
#include "model/train/lora.h"
#include "model/train/train_runner.h"
#include "model/weights.h"
#include "tensor/thread_pool.h"
#include "util/result.h"

namespace gk {

struct TrainingModelOptions {
  bool remat = false;
  // Full fine-tuning has no frozen base: it computes in f32 whatever this says.
  TrainPrecision precision = TrainPrecision::kF32;
  int64_t max_tokens = 4096;  // tokens per micro-batch the buffers are sized for
  // Non-empty: full fine-tuning (no adapter): every matrix and norm gets a gradient
  // (full_params()), the norms' masters read from this checkpoint directory (FullParams).
  std::string full_finetune_from;
  // Tensor parallelism (model/tensor_parallel.h): the config and weights are this rank's share,
  // the adapter too (model/train/lora_tensor_parallel.h); every rank of the group runs the same
  // micro-batch. After the backward pass, ReduceLoraGradsOverTp completes the gradients of the
  // factors the group shares. LoRA only; dense (not MoE) models.
  TensorParallel tp;
};

class TrainingModel final : public TrainRunner {
 public:
  // The adapter is owned by the caller; ForwardBackward adds to its modules' grad_a/grad_b.
  static Result<std::unique_ptr<TrainingModel>> Create(const ModelConfig& config, ModelWeights weights,
                                                       LoraAdapter* adapter, ThreadPool* pool,
                                                       TrainingModelOptions options);
  ~TrainingModel() override;

  // Forward and backward of one micro-batch (at most max_tokens tokens in all). dropout_key
  // seeds the LoRA dropout masks (same key, same masks). Errors: token ids outside the
  // vocabulary, too many tokens, a mask of the wrong length.
  Status ForwardBackward(std::span<const TrainRowView> rows, float loss_scale, uint64_t dropout_key,
                         MicroBatchStats* stats) override;
  // The same forward pass and loss without gradients or dropout.
  Status Evaluate(std::span<const TrainRowView> rows, MicroBatchStats* stats) override;
  std::string device() const override { return "cpu"; }
  // Logits (T × V, after the softcap) of one sequence with the LoRA applied, no dropout.
  Status Logits(std::span<const int32_t> tokens, float* logits);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // Full fine-tuning's parameters (ForwardBackward adds to their gradients), null for LoRA.
  FullParams* full_params() override { return full_.get(); }
  // Bytes of activations kept for the backward pass by the last ForwardBackward.
  int64_t activation_bytes() const override { return activation_bytes_; }
  // Where the last ForwardBackward's time went (bench train prints it): the layers' forward
  // passes, the loss head (forward and backward), the layers' backward passes (with remat's
  // recomputed forward passes).
  struct PassSeconds {
    double forward = 0, loss_head = 0, backward = 0;
  };
  const PassSeconds& pass_seconds() const { return pass_seconds_; }
  // The precision the products run in: f32 for full fine-tuning and for weights not stored in
  // bf16, whatever the options said.
  TrainPrecision precision() const override {
    return full_ || weights_.embed.dtype != DType::kBF16 ? TrainPrecision::kF32 : options_.precision;
  }

 private:
  struct LayerActs;
  struct Scratch;
  TrainingModel(const ModelConfig& config, ModelWeights weights, LoraAdapter* adapter, ThreadPool* pool,
                TrainingModelOptions options);

  Status Prepare(std::span<const TrainRowView> rows, bool backward);
  void ForwardOnly();
  void Embed();
  void LayerForward(int l, const float* x_in, LayerActs& a, float* x_out, bool dropout);
  void LayerBackward(int l, const LayerActs& a, float* dx);
  // k, v: the K/V the layer attends over (its own, or its source layer's when KV-shared).
  void AttentionForward(int l, LayerActs& a, const float* k, const float* v);
  void AttentionBackward(int l, const LayerActs& a, const float* k, const float* v, const float* datt, float* dq,
                         float* dk, float* dv);
  // Feed-forward parts beyond the dense MLP (training_feed_forward.cc).
  void PerLayerInputs();
  void MoeForward(int l, LayerActs& a);
  void MoeRouterInput(int l, const LayerActs& a);
  void MoeGatherExpertInputs(const LayerActs& a);
  void MoeBackward(int l, const LayerActs& a, const float* dmm, float* dm, float* dx1);
  void PleForward(int l, LayerActs& a, const float* x2, float* x3);
  void PleBackward(int l, const LayerActs& a, float* dx);
  // y = x·Wᵀ (+= when accumulate) and dx = dy·W against a base matrix, in the run's precision.
  void Product(const MatrixView& w, const float* x, int64_t T, float* y, bool accumulate);
  void ProductT(const MatrixView& w, const float* dy, int64_t T, float* dx, bool accumulate);
  bool Bf16Products(const MatrixView& w) const {
    return precision() == TrainPrecision::kBf16 && w.dtype == DType::kBF16 && !w.packed;
  }
  void Linear(int l, LoraTarget t, const MatrixView& w, const float* x, float* y, float* u, bool dropout);
  void LinearBackward(int l, LoraTarget t, const MatrixView& w, const float* x, const float* u, const float* dy,
                      float* dx, bool accumulate);
  const float* DropoutInput(int l, LoraTarget t, const float* x, int64_t in, float* buf) const;
  // Layer l's RoPE cos|sin per token ((T, head dim): RopeCosSin at the token's position),
  // computed once per micro-batch and frequency table.
  const float* RopeTable(int l);
  void LossHead(const float* x_final, float loss_scale, bool backward, MicroBatchStats* stats, float* dx);
  // Tensor parallelism: x ← Σ over the group (partial products of row-parallel matrices, partial
  // input gradients of column-parallel ones); a no-op in one process.
  void TpSum(float* x, int64_t n);
  void RowParallelSum(int l, LoraTarget t, float* y, float* u);
  // The dropout counter of element i of a (T, in) input of target t: the whole model's index,
  // so that a rank holding columns of o/down draws the masks one process draws.
  uint64_t DropIndex(LoraTarget t, int64_t i, int64_t in) const;
  // Full fine-tuning's weight gradients (no-ops for LoRA: no weight has a gradient then).
  float* WeightGrad(const void* weight) const { return full_ ? full_->Grad(weight) : nullptr; }
  // gW += dyᵀ·x over `rows` rows (dy: rows × w.rows, x: rows × w.cols).
  void AddMatrixGrad(const MatrixView& w, const float* dy, const float* x, int64_t rows);
  // The weight gradient of y = RmsNorm(x; w) over rows of n: gw += Σ_rows dy·x·r.
  void AddNormGrad(const std::vector<float>& w, const float* x, const float* dy, int64_t rows, int64_t n);
  // dx0: the gradient of the scaled embeddings; adds the per-layer inputs' share (full
  // fine-tuning of E2B/E4B), then the embedding rows' gradients.
  void EmbeddingBackward(float* dx0);

  ModelConfig config_;
  ModelWeights weights_;
  LoraAdapter* adapter_;
  ThreadPool* pool_;
  TrainingModelOptions options_;
  std::unique_ptr<FullParams> full_;
  float embed_scale_ = 1.f;
  float ple_embed_scale_ = 1.f;
  float attn_scale_ = 1.f;
  VocabRange vocab_, ple_vocab_;  // the embedding (and PLE table) rows this rank holds
  LayerRope rope_;
  // The running micro-batch.
  int64_t T_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> mask_;
  std::vector<int64_t> pos_;        // per token: its position in its row
  std::vector<int64_t> row_start_;  // per row: first token; plus T at the end
  uint64_t dropout_key_ = 0;
  bool dropout_on_ = false;
  std::vector<LayerActs> acts_;  // per layer (without remat)
  std::unique_ptr<LayerActs> work_;  // sized for the largest layer: remat and forward-only passes
  std::unique_ptr<Scratch> s_;
  int64_t activation_bytes_ = 0;
  PassSeconds pass_seconds_;
};

}  // namespace gk
