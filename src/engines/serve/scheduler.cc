#include "engines/serve/scheduler.h"

#include <algorithm>

namespace gk {

void Scheduler::Remove(ScheduledRequest* r) {
  auto it = std::find(running_.begin(), running_.end(), r);
  if (it != running_.end()) running_.erase(it);
  auto wit = std::find(waiting_.begin(), waiting_.end(), r);
  if (wit != waiting_.end()) waiting_.erase(wit);
  blocks_->Release(r->blocks);
}

void Scheduler::Preempt(ScheduledRequest* r) {
  blocks_->Release(r->blocks);
  r->computed = 0;
  r->prefix_checked = false;
  ++r->preemptions;
  waiting_.push_front(r);
  preempted_.push_back(r);
}

std::vector<ScheduledSlice> Scheduler::Schedule() {
  std::vector<ScheduledSlice> slices;
  preempted_.clear();
  int64_t budget = options_.token_budget;

  for (size_t i = 0; i < running_.size() && budget > 0;) {
    ScheduledRequest* r = running_[i];
    const int64_t n = std::min<int64_t>(int64_t(r->tokens.size()) - r->computed, budget);
    bool self_preempted = false;
    while (!blocks_->Reserve(r->blocks, r->computed, r->computed + n)) {
      ScheduledRequest* victim = running_.back();
      running_.pop_back();
      Preempt(victim);
      if (victim == r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    slices.push_back({r, n});
    budget -= n;
    ++i;
  }

  if (!preempted_.empty()) return slices;
  std::vector<uint64_t> loras;  // distinct adapters of the running requests
  if (options_.max_loras > 0) {
    for (const ScheduledRequest* r : running_) {
      if (r->lora_id != 0 && std::find(loras.begin(), loras.end(), r->lora_id) == loras.end()) loras.push_back(r->lora_id);
    }
  }
  for (size_t i = 0; i < waiting_.size() && int(running_.size()) < options_.max_seqs && budget > 0;) {
    ScheduledRequest* r = waiting_[i];
    const bool new_lora = options_.max_loras > 0 && r->lora_id != 0 &&
                          std::find(loras.begin(), loras.end(), r->lora_id) == loras.end();
    if (new_lora && int(loras.size()) >= options_.max_loras) {
      ++i;  // waits for an adapter slot
      continue;
    }
    if (!r->prefix_checked) {
      r->computed = blocks_->TakeCachedPrefix(r->tokens, r->blocks);
      r->prefix_checked = true;
    }
    const int64_t left = int64_t(r->tokens.size()) - r->computed;
    if (!options_.chunked_prefill && left > budget) break;
    const int64_t n = std::min(left, budget);
    if (!blocks_->Reserve(r->blocks, r->computed, r->computed + n)) {
      // Give the cached prefix back while waiting, so its blocks stay evictable.
      blocks_->Release(r->blocks);
      r->computed = 0;
      r->prefix_checked = false;
      break;
    }
    if (r->cached_prompt_tokens < 0) r->cached_prompt_tokens = r->computed;
    if (new_lora) loras.push_back(r->lora_id);
    waiting_.erase(waiting_.begin() + std::ptrdiff_t(i));
    running_.push_back(r);
    slices.push_back({r, n});
    budget -= n;
  }
  return slices;
}

}  // namespace gk
