// vLLM V1's scheduling policy, with no separate prefill and decode phases: each request has
// tokens (prompt + generated) and a count already computed into the KV cache, and each step
// hands every chosen request a slice of its uncomputed tokens under a token budget and a
// sequence cap.
// - Running requests first, in admission order: a decode costs one token, an unfinished
//   prefill chunk up to the remaining budget. When the block pool cannot grow a running
//   request, the newest running request is preempted (blocks freed, put back at the head of
//   the queue, recomputed later), until the current one fits or was itself preempted.
// - Then waiting requests, first come first served, while the budget, the sequence cap and the
//   block pool allow; a new request's cached prefix is taken first and costs nothing. Without
//   chunked prefill a prompt is admitted only whole, and a prompt that does not fit blocks
//   the queue behind it (no overtaking). No admission in a step that preempted.
// - With max_loras, a waiting request whose LoRA adapter would be one too many among the
//   running requests' stays waiting and the ones behind it may go first (vLLM V1 skips it too).
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engines/serve/kv_block_manager.h"

namespace gk {

// The scheduler's view of one request (the engine derives its own request state from it).
struct ScheduledRequest {
  uint64_t id = 0;
  std::vector<int32_t> tokens;     // prompt, then generated tokens
  int64_t computed = 0;            // leading tokens whose K/V are in the cache
  SeqBlocks blocks;
  bool prefix_checked = false;     // the prefix cache was consulted since the last (re)admission
  int64_t cached_prompt_tokens = -1;  // prefix hit at first admission (-1: not admitted yet)
  int preemptions = 0;
  uint64_t lora_id = 0;            // its LoRA adapter (0: the base model)
  virtual ~ScheduledRequest() = default;
};

struct SchedulerOptions {
  int64_t token_budget = 2048;     // max_num_batched_tokens
  int max_seqs = 256;              // max_num_seqs
  bool chunked_prefill = true;
  int max_loras = 0;               // distinct LoRA adapters among running requests (0: no limit)
};

struct ScheduledSlice {
  ScheduledRequest* request = nullptr;
  int64_t num_tokens = 0;          // tokens [computed, computed + num_tokens) run this step
};

class Scheduler {
 public:
  Scheduler(KvBlockManager* blocks, const SchedulerOptions& options) : blocks_(blocks), options_(options) {}

  void Add(ScheduledRequest* r) { waiting_.push_back(r); }
  // Takes a request out of either queue and frees its blocks (finished or aborted).
  void Remove(ScheduledRequest* r);

  // The slices of the next step (empty when nothing can run), in running order.
  std::vector<ScheduledSlice> Schedule();
  // Requests preempted by the last Schedule().
  const std::vector<ScheduledRequest*>& preempted() const { return preempted_; }

  const std::vector<ScheduledRequest*>& running() const { return running_; }
  const std::deque<ScheduledRequest*>& waiting() const { return waiting_; }

 private:
  void Preempt(ScheduledRequest* r);

  KvBlockManager* blocks_;
  SchedulerOptions options_;
  std::vector<ScheduledRequest*> running_;
  std::deque<ScheduledRequest*> waiting_;
  std::vector<ScheduledRequest*> preempted_;
};

}  // namespace gk
