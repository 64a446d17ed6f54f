// The serving engine: continuous batching over a paged KV cache (vLLM V1 style).
//
// Requests arrive from any thread (Submit) and are run by one engine thread. Every engine step
// the scheduler (scheduler.h) picks work under a token budget and a sequence cap: running
// requests first (a decode costs one token, an unfinished prefill chunk up to the remaining
// budget), then waiting ones in arrival order; the chosen slices go through the model in one
// batched forward pass (GemmaModel::ForwardPaged; requests of one LoRA adapter side by side, so
// each adapter's rows form one segment), and each request that finished its prompt samples one
// token. When the block pool runs dry the newest running request is preempted
// (its blocks freed, recomputed later). Outputs are delivered through each request's callback
// on the engine thread, after the step (and after Stats() reflects it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engines/generate/sampler.h"
#include "model/gemma_model.h"
#include "model/lora_weights.h"
#include "model/paged_kv.h"
#include "util/result.h"

namespace gk {

namespace dist {
class Communicator;
}

enum class FinishReason { kNone, kStop, kLength, kAbort };
// "stop", "length", "abort" (vLLM's finished_reason label values); "" for kNone.
const char* FinishReasonName(FinishReason r);

struct EngineOptions {
  int64_t max_model_len = 0;            // prompt + output tokens per request; 0: the model's, at most 8192
  int max_num_seqs = 256;               // requests in one step
  int64_t max_num_batched_tokens = 0;   // token budget per step; 0: 2048 with chunked prefill, else max_model_len
  int block_size = 16;
  DType kv_dtype = DType::kUnknown;     // kUnknown: auto (f32 for f32 weights, else f16)
  uint64_t kv_cache_bytes = 0;          // KV pool size; 0: enough for max_num_seqs requests at max_model_len, capped at 4 GiB
  bool enable_prefix_caching = true;    // vLLM V1's default
  bool enable_chunked_prefill = true;   // vLLM V1's default; the reference case ran with it off
  int max_waiting = 4096;               // queued requests beyond this are refused (the server answers 503)
  // Distinct LoRA adapters in one step at most (vLLM's --max-loras): a waiting request of
  // another adapter waits until a running adapter's requests finish; others go past it. 0: no limit.
  int max_loras = 0;
  // Tensor-parallel serving: rank 0's engine sends each forward pass to the other ranks, which
  // run ServeEngine::Follow (engines/serve/tensor_parallel_steps.h). Null: one process.
  dist::Communicator* tp_comm = nullptr;
};

// The LoRA adapter a request runs through (engines/serve/lora_registry.h hands these out).
struct EngineLora {
  uint64_t id = 0;     // 0: the base model; else unique per loaded adapter (it keys the prefix cache)
  std::string name;
  std::shared_ptr<const LoraWeights> weights;  // kept alive by the request while it runs
};

// Per-request generation settings (the HTTP layer maps the OpenAI fields onto these).
struct EngineRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;              // temperature (0: greedy), top_k, top_p, seed
  int max_tokens = 16;                  // generated tokens at most (the engine also stops at max_model_len)
  int min_tokens = 0;                   // stop tokens are ignored before this many
  // Generation ends at any of these (the stop token is not emitted). The caller includes the
  // model's end-of-turn / EOS ids unless the client asked for ignore_eos.
  std::vector<int32_t> stop_token_ids;
  int logprobs = -1;                    // -1: none; k >= 0: the sampled token's logprob and the top k
  std::string cache_salt;               // separates prefix-cache entries of different tenants
  EngineLora lora;                      // the base model unless set; two adapters never share KV blocks
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), best first
};

// What one engine step produced for one request. The last output of a request has
// finish != kNone; after it the callback is never called again for that request.
struct RequestOutput {
  std::vector<int32_t> tokens;          // new tokens (usually one; none on the final output of an abort)
  std::vector<TokenLogprob> logprobs;   // one per token when requested
  FinishReason finish = FinishReason::kNone;
  int32_t stop_token = -1;              // the stop id that ended it (finish == kStop), not in tokens
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;     // prompt tokens served from the prefix cache (first schedule)
  int64_t completion_tokens = 0;        // generated so far, these tokens included
  double queued_seconds = 0;            // arrival -> first scheduled (set on the final output)
};

using OutputCallback = std::function<void(const RequestOutput&)>;

// The KV cache sizing decided at start-up (printed by `gemmakit serve`).
struct EngineCapacity {
  int64_t max_model_len = 0;
  int block_size = 0;
  DType kv_dtype = DType::kUnknown;
  int64_t num_blocks[2] = {0, 0};       // per KvGroup
  uint64_t kv_bytes = 0;
  int64_t kv_tokens = 0;                // tokens the pool holds (full-attention layers bound it)
  double max_concurrency = 0;           // requests of max_model_len tokens that fit at once
};

// Engine-side counters and gauges for /metrics (vLLM names in comments).
struct EngineStats {
  int running = 0;                      // vllm:num_requests_running
  int waiting = 0;                      // vllm:num_requests_waiting
  double kv_usage = 0;                  // vllm:kv_cache_usage_perc (0..1, blocks in use / total)
  int64_t blocks_used[2] = {0, 0};      // per KvGroup, blocks referenced by requests
  uint64_t prompt_tokens = 0;           // vllm:prompt_tokens_total (computed, not cached)
  uint64_t generation_tokens = 0;       // vllm:generation_tokens_total
  uint64_t preemptions = 0;             // vllm:num_preemptions_total
  uint64_t prefix_cache_queries = 0;    // vllm:prefix_cache_queries_total (tokens)
  uint64_t prefix_cache_hits = 0;       // vllm:prefix_cache_hits_total (tokens)
  uint64_t steps = 0;
  // vllm:lora_requests_info: the adapters of running and of waiting requests (names, sorted).
  std::vector<std::string> running_loras, waiting_loras;
};

class ServeEngine {
 public:
  // Takes over the model (its thread pool must outlive the engine) and starts the engine thread.
  static Result<std::unique_ptr<ServeEngine>> Create(std::unique_ptr<ModelRunner> model, const EngineOptions& options);
  // Tensor-parallel ranks > 0: sizes the same KV pool as rank 0's Create (the same options give
  // the same block counts), then runs every forward pass rank 0's engine sends, until it ends.
  static Status Follow(std::unique_ptr<GemmaModel> model, const EngineOptions& options);
  virtual ~ServeEngine() = default;

  // Queues a request. Errors (nothing queued, callback never called): empty prompt, prompt
  // plus max_tokens over max_model_len, token ids outside the vocabulary, queue full
  // (message starts with "queue full"), engine shutting down.
  virtual Result<uint64_t> Submit(EngineRequest request, OutputCallback callback) = 0;
  // Queues the sequences of one API request (its n choices and prompts) together: the engine
  // takes them in the same step, so they are scheduled, and their logits computed, the same
  // way however busy the machine is (seeded sampling then repeats its text). All or nothing:
  // on an error none is queued. The base version submits one by one and takes back the
  // queued ones on an error.
  virtual Result<std::vector<uint64_t>> SubmitGroup(std::vector<EngineRequest> requests,
                                                    std::vector<OutputCallback> callbacks);
  // Ends a request early (client gone): its blocks are freed before the next step and its
  // callback gets a final output with finish == kAbort. Unknown or finished ids are ignored.
  virtual void Abort(uint64_t id) = 0;
  // Stops taking requests; with drain, returns once every request has finished; without,
  // aborts them. Then stops the engine thread. Idempotent.
  virtual void Shutdown(bool drain) = 0;

  virtual EngineStats Stats() const = 0;
  virtual const EngineCapacity& capacity() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual bool alive() const = 0;       // false once the engine thread died or shut down
};

}  // namespace gk
