// What the engines need from a decoder on some device (design: ../docs/ARCHITECTURE.md, "Devices"):
// the config, the largest pass, a paged KV pool whose bytes live where the runner computes, and
// one batched forward pass over it. GemmaModel is the CPU runner; CudaModel (model/cuda/) the
// GPU's. Block tables, prefix hashes and scheduling stay on the host, in the engine, for both.
// Logits come back to the host as f32 rows and the engines sample there; a GPU runner also
// picks each row's token itself (kernels/token_pick.h), so the rows of requests that want only
// the token need not cross to the host.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "model/config.h"
#include "model/paged_kv.h"
#include "tensor/dtype.h"
#include "util/result.h"

namespace gk {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;
  // Tokens per forward pass at most (prefill is cut into chunks of this size).
  virtual int max_chunk() const = 0;
  // Where the runner computes: "cpu", "cuda:0".
  virtual std::string device() const = 0;
  // The checkpoint's tensor-name prefix ("model.", "model.language_model."): what a LoRA
  // adapter's module names are matched against.
  virtual std::string weight_prefix() const { return "model."; }
  // The KV element type a pool gets when the user names none (f32 for f32 weights, else f16).
  virtual DType default_kv_dtype() const = 0;
  // Bytes a KV pool may take on the runner's device beside what it holds; 0: no device-side
  // limit (host memory; the engine's own default applies).
  virtual uint64_t kv_memory_budget() const { return 0; }
  // A pool whose storage the runner's ForwardPaged reads and writes.
  virtual Result<std::unique_ptr<PagedKvPool>> NewPagedKvPool(const PagedKvOptions& o) = 0;
  // Runs a batch of sequences' new tokens (GemmaModel::ForwardPaged has the contract).
  virtual Status ForwardPaged(std::span<const PagedBatchItem> items, PagedKvPool& pool, float* logits) = 0;
  // Whether ForwardPaged picks each returned row's token where the logits are, as its item's
  // `pick` says (a GPU: the rows of token_only items then never cross to the host). The CPU
  // does not: its engines sample from the rows.
  virtual bool picks_tokens() const { return false; }
  // After a ForwardPaged of a runner that picks tokens, each returned row's token; else null.
  virtual const int32_t* picked_tokens() const { return nullptr; }
};

}  // namespace gk
