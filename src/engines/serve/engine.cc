#include "engines/serve/engine.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "dist/communicator.h"
#include "engines/serve/kv_block_manager.h"
#include "engines/serve/scheduler.h"
#include "engines/serve/tensor_parallel_steps.h"
#include "engines/serve/token_logprobs.h"
#include "util/clock.h"

namespace gk {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: break;
  }
  return "";
}

namespace {

constexpr int kFull = int(KvGroup::kFull), kSliding = int(KvGroup::kSliding);

// The engine's state of one request.
struct Sequence : ScheduledRequest {
  EngineRequest request;
  OutputCallback callback;
  std::unique_ptr<Sampler> sampler;
  int64_t prompt_len = 0;
  int64_t generated = 0;
  double arrival = 0, first_scheduled = -1;
  bool aborted = false;
};

// Adds a LoRA adapter's name to a sorted list of distinct names ("" is the base model: none).
void AddName(std::vector<std::string>& names, const std::string& name) {
  if (name.empty()) return;
  auto it = std::lower_bound(names.begin(), names.end(), name);
  if (it == names.end() || *it != name) names.insert(it, name);
}

// How the KV bytes split into the two block pools: a request of max_model_len tokens needs
// `per_group[g]` blocks of group g in steady state (every block on full layers; the window plus
// one block on sliding layers), and the sliding pool also needs `transient` blocks for one
// pass of `budget` new tokens, all written before older ones can be freed.
struct KvPlan {
  uint64_t block_bytes[2] = {0, 0};
  int64_t per_request[2] = {0, 0};
  int64_t transient = 0;
  uint64_t RequestBytes() const { return uint64_t(per_request[0]) * block_bytes[0] + uint64_t(per_request[1]) * block_bytes[1]; }
  uint64_t MinimumBytes() const { return RequestBytes() + uint64_t(transient) * block_bytes[1]; }
};

KvPlan PlanKv(const ModelConfig& c, const EngineOptions& o) {
  KvPlan k;
  const int bs = o.block_size;
  k.block_bytes[kFull] = PagedKvPool::BlockBytes(c, KvGroup::kFull, bs, o.kv_dtype);
  k.block_bytes[kSliding] = PagedKvPool::BlockBytes(c, KvGroup::kSliding, bs, o.kv_dtype);
  const int64_t len_blocks = (o.max_model_len + bs - 1) / bs;
  if (k.block_bytes[kFull]) k.per_request[kFull] = len_blocks;
  if (k.block_bytes[kSliding]) {
    k.per_request[kSliding] = std::min<int64_t>(len_blocks, (c.sliding_window + bs - 1) / bs + 1);
    k.transient = std::min<int64_t>(len_blocks, (o.max_num_batched_tokens + bs - 1) / bs + 1);
  }
  return k;
}

class EngineImpl final : public ServeEngine {
 public:
  EngineImpl(std::unique_ptr<ModelRunner> model, std::unique_ptr<PagedKvPool> pool, EngineOptions o,
             EngineCapacity cap, int64_t sliding_window)
      : model_(std::move(model)),
        pool_(std::move(pool)),
        options_(o),
        capacity_(cap),
        blocks_(KvBlockManagerOptions{{cap.num_blocks[0], cap.num_blocks[1]}, o.block_size, sliding_window,
                                      o.enable_prefix_caching}),
        scheduler_(&blocks_, SchedulerOptions{o.max_num_batched_tokens, o.max_num_seqs, o.enable_chunked_prefill,
                                              o.max_loras}) {
    thread_ = std::thread([this] {
      Loop();
      // Tensor parallel: release the other ranks from FollowPagedBatches.
      if (options_.tp_comm != nullptr) {
        dist::OrAbort(*options_.tp_comm, SendServingEnd(*options_.tp_comm), "tensor-parallel serving's end");
      }
    });
  }
  ~EngineImpl() override { Shutdown(false); }

  Result<uint64_t> Submit(EngineRequest request, OutputCallback callback) override;
  Result<std::vector<uint64_t>> SubmitGroup(std::vector<EngineRequest> requests,
                                            std::vector<OutputCallback> callbacks) override;
  // A checked Sequence of the request (no id yet); errors as Submit's.
  Result<std::unique_ptr<Sequence>> MakeSequence(EngineRequest request, OutputCallback callback);
  void Abort(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
    cv_.notify_all();
  }
  void Shutdown(bool drain) override;
  EngineStats Stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats s = stats_;
    s.waiting += int(inbox_.size());
    for (const auto& q : inbox_) AddName(s.waiting_loras, q->request.lora.name);
    return s;
  }
  const EngineCapacity& capacity() const override { return capacity_; }
  const ModelConfig& config() const override { return model_->config(); }
  bool alive() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !dead_;
  }

 private:
  void Loop();
  void Step();
  void RunPasses(const std::vector<ScheduledSlice>& slices);
  // picked >= 0: the token, picked by the runner; else sampled here from the logits.
  void SampleAndEmit(Sequence& s, const float* logits, int32_t picked);
  void Finish(Sequence& s, RequestOutput& out, FinishReason why);
  void AbortLocal(uint64_t id);
  void PublishStats();
  void Emit(Sequence& s, RequestOutput out);
  void Deliver();

  std::unique_ptr<ModelRunner> model_;
  std::unique_ptr<PagedKvPool> pool_;
  EngineOptions options_;
  EngineCapacity capacity_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  std::vector<uint64_t> aborts_;
  bool stopping_ = false, drain_ = false, dead_ = false;
  uint64_t next_id_ = 1;
  EngineStats stats_;
  std::thread thread_;

  // Engine thread only.
  KvBlockManager blocks_;
  Scheduler scheduler_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> live_;
  std::vector<float> logits_;
  EngineStats counters_;
  // Outputs of this loop iteration, delivered after PublishStats so that a client that has its
  // final output also sees its blocks freed in Stats(). Finished sequences wait in `finished_`
  // until then (the outbox points into them).
  std::vector<std::pair<Sequence*, RequestOutput>> outbox_;
  std::vector<std::unique_ptr<Sequence>> finished_;
};

Result<uint64_t> EngineImpl::Submit(EngineRequest request, OutputCallback callback) {
  std::vector<EngineRequest> one;
  one.push_back(std::move(request));
  std::vector<OutputCallback> cb;
  cb.push_back(std::move(callback));
  GK_ASSIGN_OR_RETURN(std::vector<uint64_t> ids, SubmitGroup(std::move(one), std::move(cb)));
  return ids[0];
}

Result<std::vector<uint64_t>> EngineImpl::SubmitGroup(std::vector<EngineRequest> requests,
                                                      std::vector<OutputCallback> callbacks) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (size_t i = 0; i < requests.size(); ++i) {
    GK_ASSIGN_OR_RETURN(auto s, MakeSequence(std::move(requests[i]), std::move(callbacks[i])));
    seqs.push_back(std::move(s));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || dead_) return Status::Error("the engine is shutting down");
  if (int64_t(inbox_.size()) + stats_.waiting + int64_t(seqs.size()) > options_.max_waiting) {
    return Status::Error(StrCat("queue full: ", options_.max_waiting, " requests are waiting"));
  }
  std::vector<uint64_t> ids;
  for (auto& s : seqs) {
    s->id = next_id_++;
    ids.push_back(s->id);
    inbox_.push_back(std::move(s));
  }
  cv_.notify_all();
  return ids;
}

Result<std::unique_ptr<Sequence>> EngineImpl::MakeSequence(EngineRequest request, OutputCallback callback) {
  const ModelConfig& c = model_->config();
  const int64_t prompt = int64_t(request.prompt.size());
  if (prompt == 0) return Status::Error("the prompt is empty");
  if (request.max_tokens < 1) return Status::Error(StrCat("max_tokens must be at least 1, got ", request.max_tokens));
  if (prompt + request.max_tokens > options_.max_model_len) {
    return Status::Error(StrCat("This model's maximum context length is ", options_.max_model_len,
                                " tokens. However, you requested ", prompt + request.max_tokens, " tokens (", prompt,
                                " in the prompt, ", request.max_tokens,
                                " in the completion). Please reduce the length of the prompt or completion."));
  }
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= c.vocab_size) return Status::Error(StrCat("token id ", t, " is outside the vocabulary of ", c.vocab_size));
  }
  auto s = std::make_unique<Sequence>();
  s->tokens = request.prompt;
  s->prompt_len = prompt;
  if ((request.lora.id != 0) != (request.lora.weights != nullptr)) {
    return Status::Error("a LoRA adapter needs both an id and its weights");
  }
  if (request.lora.weights != nullptr) {
    if (options_.tp_comm != nullptr) return Status::Error("LoRA adapters are not supported under tensor parallelism");
    if (request.lora.weights->num_layers() != c.num_layers) {
      return Status::Error(StrCat("the LoRA adapter has ", request.lora.weights->num_layers(), " layers, the model ",
                                  c.num_layers));
    }
  }
  s->blocks.salt = KvBlockManager::SaltHash(request.cache_salt, request.lora.id);
  s->lora_id = request.lora.id;
  s->sampler = std::make_unique<Sampler>(request.sampling);
  s->request = std::move(request);
  s->callback = std::move(callback);
  s->arrival = NowSeconds();
  return s;
}

void EngineImpl::Shutdown(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      drain_ = drain;
    } else if (!drain) {
      drain_ = false;
    }
    cv_.notify_all();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void EngineImpl::Loop() {
  for (;;) {
    std::vector<std::unique_ptr<Sequence>> fresh;
    std::vector<uint64_t> aborts;
    bool stop_now = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !inbox_.empty() || !aborts_.empty() || stopping_ || !live_.empty(); });
      fresh.swap(inbox_);
      aborts.swap(aborts_);
      if (stopping_ && !drain_) stop_now = true;
      if (stopping_ && live_.empty() && fresh.empty()) {
        dead_ = true;
        return;
      }
    }
    for (auto& s : fresh) {
      scheduler_.Add(s.get());
      live_.emplace(s->id, std::move(s));
    }
    if (stop_now) {
      for (auto& [id, s] : live_) aborts.push_back(id);
    }
    for (uint64_t id : aborts) AbortLocal(id);
    if (!live_.empty()) Step();
    PublishStats();
    Deliver();
  }
}

void EngineImpl::Emit(Sequence& s, RequestOutput out) { outbox_.emplace_back(&s, std::move(out)); }

void EngineImpl::Deliver() {
  for (auto& [s, out] : outbox_) s->callback(out);
  outbox_.clear();
  finished_.clear();
}

void EngineImpl::AbortLocal(uint64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Sequence& s = *it->second;
  RequestOutput out;
  Finish(s, out, FinishReason::kAbort);
}

void EngineImpl::Finish(Sequence& s, RequestOutput& out, FinishReason why) {
  out.finish = why;
  out.prompt_tokens = s.prompt_len;
  out.cached_prompt_tokens = std::max<int64_t>(0, s.cached_prompt_tokens);
  out.completion_tokens = s.generated;
  out.queued_seconds = s.first_scheduled >= 0 ? s.first_scheduled - s.arrival : NowSeconds() - s.arrival;
  scheduler_.Remove(&s);
  auto it = live_.find(s.id);
  finished_.push_back(std::move(it->second));
  live_.erase(it);
  Emit(*finished_.back(), std::move(out));
}

void EngineImpl::Step() {
  const std::vector<ScheduledSlice> slices = scheduler_.Schedule();
  counters_.preemptions += scheduler_.preempted().size();
  if (slices.empty()) return;
  const double now = NowSeconds();
  for (const ScheduledSlice& sl : slices) {
    auto& s = static_cast<Sequence&>(*sl.request);
    if (s.first_scheduled < 0) s.first_scheduled = now;
    // Prompt tokens computed (not taken from the cache): vllm:prompt_tokens_total.
    const int64_t begin = s.computed, end = s.computed + sl.num_tokens;
    counters_.prompt_tokens += uint64_t(std::max<int64_t>(0, std::min(end, s.prompt_len) - begin));
  }
  RunPasses(slices);
  ++counters_.steps;
}

// Runs the step's slices through the model in passes of at most max_chunk tokens (a slice may
// straddle two passes), then samples for every request whose slice reached its last token.
void EngineImpl::RunPasses(const std::vector<ScheduledSlice>& slices) {
  const int64_t V = model_->config().vocab_size, chunk = model_->max_chunk();
  struct Part {
    Sequence* seq;
    PagedSequence view;
    int64_t begin, n;
    bool last;  // reaches the end of the request's tokens: wants logits
  };
  std::vector<Part> parts;
  std::vector<PagedBatchItem> items;
  std::vector<Sequence*> sample_order;
  auto run = [&]() {
    if (parts.empty()) return;
    // Each adapter's rows side by side: one LoRA segment per adapter (GemmaModel::ForwardPaged).
    std::stable_sort(parts.begin(), parts.end(),
                     [](const Part& a, const Part& b) { return a.seq->lora_id < b.seq->lora_id; });
    items.clear();
    int64_t rows = 0;
    const bool runner_picks = model_->picks_tokens();
    for (Part& p : parts) {
      p.view.blocks[kFull] = p.seq->blocks.table[kFull];
      p.view.blocks[kSliding] = p.seq->blocks.table[kSliding];
      p.view.num_tokens = p.begin;
      const EngineRequest& r = p.seq->request;
      items.push_back({std::span<const int32_t>(p.seq->tokens).subspan(size_t(p.begin), size_t(p.n)), &p.view,
                       p.last ? LogitsMode::kLast : LogitsMode::kNone, r.lora.weights.get()});
      if (p.last && runner_picks) {  // the runner picks the token; the row crosses for logprobs only
        items.back().token_only = r.logprobs < 0;
        items.back().pick = p.seq->sampler->NextPick();
      }
      rows += p.last;
    }
    if (int64_t(logits_.size()) < rows * V) logits_.resize(size_t(rows * V));
    if (options_.tp_comm != nullptr) {  // the other ranks run the same pass on their shares
      dist::OrAbort(*options_.tp_comm, SendPagedBatch(*options_.tp_comm, items), "tensor-parallel serving's batch");
    }
    const Status st = model_->ForwardPaged(items, *pool_, logits_.data());
    GK_ASSERT(st.ok());  // the scheduler only hands over validated tokens and covered blocks
    // A GPU runner's picks, whether or not the row came over.
    const int32_t* picked = runner_picks ? model_->picked_tokens() : nullptr;
    int64_t row = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      Part& p = parts[i];
      p.seq->computed = p.begin + p.n;
      blocks_.CacheFullBlocks(p.seq->blocks, p.seq->tokens, p.seq->computed);
      if (!p.last) continue;
      SampleAndEmit(*p.seq, logits_.data() + row * V, picked ? picked[row] : -1);
      ++row;
    }
    parts.clear();
  };
  int64_t in_pass = 0;
  for (const ScheduledSlice& sl : slices) {
    auto* s = static_cast<Sequence*>(sl.request);
    int64_t begin = s->computed, left = sl.num_tokens;
    while (left > 0) {
      const int64_t n = std::min(left, chunk - in_pass);
      const bool last = begin + n == int64_t(s->tokens.size());
      parts.push_back({s, {}, begin, n, last});
      begin += n;
      left -= n;
      in_pass += n;
      if (in_pass == chunk) {
        run();
        in_pass = 0;
      }
    }
  }
  run();
}

void EngineImpl::SampleAndEmit(Sequence& s, const float* logits, int32_t picked) {
  const int64_t V = model_->config().vocab_size;
  const int32_t token = picked >= 0 ? picked : s.sampler->Sample(logits, V);
  RequestOutput out;
  ++s.generated;
  ++counters_.generation_tokens;
  const EngineRequest& r = s.request;
  const bool is_stop = s.generated > r.min_tokens &&
                       std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) != r.stop_token_ids.end();
  if (is_stop) {
    out.stop_token = token;
    Finish(s, out, FinishReason::kStop);
    return;
  }
  out.tokens.push_back(token);
  if (r.logprobs >= 0) {
    const LogprobResult lp = TokenLogprobs(logits, V, token, r.logprobs);
    out.logprobs.push_back({token, lp.logprob, lp.top});
  }
  s.tokens.push_back(token);
  if (s.generated >= r.max_tokens || int64_t(s.tokens.size()) >= options_.max_model_len) {
    Finish(s, out, FinishReason::kLength);
    return;
  }
  out.prompt_tokens = s.prompt_len;
  out.cached_prompt_tokens = std::max<int64_t>(0, s.cached_prompt_tokens);
  out.completion_tokens = s.generated;
  Emit(s, std::move(out));
}

void EngineImpl::PublishStats() {
  EngineStats s = counters_;
  s.running = int(scheduler_.running().size());
  s.waiting = int(scheduler_.waiting().size());
  int64_t used = 0, total = 0;
  for (int g : {kFull, kSliding}) {
    s.blocks_used[g] = blocks_.used_blocks(g);
    used += blocks_.used_blocks(g);
    total += blocks_.total_blocks(g);
  }
  s.kv_usage = total ? double(used) / double(total) : 0;
  s.prefix_cache_queries = blocks_.queries();
  s.prefix_cache_hits = blocks_.hits();
  for (const ScheduledRequest* r : scheduler_.running()) {
    AddName(s.running_loras, static_cast<const Sequence*>(r)->request.lora.name);
  }
  for (const ScheduledRequest* r : scheduler_.waiting()) {
    AddName(s.waiting_loras, static_cast<const Sequence*>(r)->request.lora.name);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = s;
}

}  // namespace

namespace {

// The KV pool and capacity that options give for a model (Create and Follow: every rank of a
// tensor-parallel group must size the same pool).
struct EnginePlan {
  EngineOptions options;
  PagedKvOptions pool;
  EngineCapacity cap;
  int64_t window = 0;
};

Result<EnginePlan> PlanEngine(const ModelRunner& model, const EngineOptions& in) {
  const ModelConfig& c = model.config();
  EngineOptions o = in;
  if (o.max_model_len <= 0) o.max_model_len = std::min<int64_t>(c.max_position_embeddings > 0 ? c.max_position_embeddings : 8192, 8192);
  if (c.max_position_embeddings > 0 && o.max_model_len > c.max_position_embeddings) {
    return Status::Error(StrCat("--max-model-len ", o.max_model_len, " exceeds the model's max_position_embeddings ",
                                c.max_position_embeddings));
  }
  if (o.block_size < 1 || o.block_size > 4096) return Status::Error(StrCat("--block-size must be in [1, 4096], got ", o.block_size));
  if (o.max_num_seqs < 1) return Status::Error(StrCat("--max-num-seqs must be at least 1, got ", o.max_num_seqs));
  if (o.max_num_batched_tokens <= 0) o.max_num_batched_tokens = o.enable_chunked_prefill ? 2048 : o.max_model_len;
  if (!o.enable_chunked_prefill && o.max_num_batched_tokens < o.max_model_len) {
    return Status::Error(StrCat("--max-num-batched-tokens (", o.max_num_batched_tokens, ") is smaller than --max-model-len (",
                                o.max_model_len, ") with chunked prefill off: a long prompt could never be scheduled"));
  }
  if (o.kv_dtype == DType::kUnknown) o.kv_dtype = model.default_kv_dtype();
  const KvPlan plan = PlanKv(c, o);
  if (o.kv_cache_bytes == 0 && model.kv_memory_budget() > 0) {
    // A device runner: all the memory it leaves (--gpu-memory-utilization), as vLLM does.
    o.kv_cache_bytes = model.kv_memory_budget();
  } else if (o.kv_cache_bytes == 0) {  // room for max_num_seqs full-length requests, at most 4 GiB
    o.kv_cache_bytes = std::min<uint64_t>(uint64_t(4) << 30, uint64_t(o.max_num_seqs) * plan.RequestBytes() +
                                                                 uint64_t(plan.transient) * plan.block_bytes[kSliding]);
    o.kv_cache_bytes = std::max(o.kv_cache_bytes, plan.MinimumBytes());
  }
  if (o.kv_cache_bytes < plan.MinimumBytes()) {
    return Status::Error(StrCat("the KV cache of ", o.kv_cache_bytes, " bytes cannot hold one request of --max-model-len ",
                                o.max_model_len, " tokens (needs ", plan.MinimumBytes(),
                                " bytes); raise --kv-cache-memory or lower --max-model-len"));
  }
  const double requests = double(o.kv_cache_bytes - uint64_t(plan.transient) * plan.block_bytes[kSliding]) /
                          double(plan.RequestBytes());
  EnginePlan e;
  PagedKvOptions& po = e.pool;
  po.block_size = o.block_size;
  po.dtype = o.kv_dtype;
  po.num_blocks[kFull] = int64_t(requests * double(plan.per_request[kFull]));
  po.num_blocks[kSliding] = plan.per_request[kSliding] ? int64_t(requests * double(plan.per_request[kSliding])) + plan.transient : 0;
  EngineCapacity& cap = e.cap;
  cap.max_model_len = o.max_model_len;
  cap.block_size = o.block_size;
  cap.kv_dtype = o.kv_dtype;
  cap.num_blocks[kFull] = po.num_blocks[kFull];
  cap.num_blocks[kSliding] = po.num_blocks[kSliding];
  cap.kv_tokens = (plan.block_bytes[kFull] ? po.num_blocks[kFull] : po.num_blocks[kSliding]) * o.block_size;
  cap.max_concurrency = requests;
  e.window = plan.block_bytes[kSliding] ? c.sliding_window : 0;
  e.options = o;
  return e;
}

}  // namespace

Result<std::unique_ptr<ServeEngine>> ServeEngine::Create(std::unique_ptr<ModelRunner> model, const EngineOptions& in) {
  GK_ASSIGN_OR_RETURN(EnginePlan e, PlanEngine(*model, in));
  GK_ASSIGN_OR_RETURN(std::unique_ptr<PagedKvPool> pool, model->NewPagedKvPool(e.pool));
  e.cap.kv_bytes = pool->bytes();
  return std::unique_ptr<ServeEngine>(new EngineImpl(std::move(model), std::move(pool), e.options, e.cap, e.window));
}

Status ServeEngine::Follow(std::unique_ptr<GemmaModel> model, const EngineOptions& in) {
  if (in.tp_comm == nullptr) return Status::Error("ServeEngine::Follow needs the tensor-parallel group (tp_comm)");
  GK_ASSIGN_OR_RETURN(EnginePlan e, PlanEngine(*model, in));
  GK_ASSIGN_OR_RETURN(std::unique_ptr<PagedKvPool> pool, PagedKvPool::Create(model->config(), e.pool));
  return FollowPagedBatches(*in.tp_comm, *model, *pool);
}

Result<std::vector<uint64_t>> ServeEngine::SubmitGroup(std::vector<EngineRequest> requests,
                                                       std::vector<OutputCallback> callbacks) {
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto id = Submit(std::move(requests[i]), std::move(callbacks[i]));
    if (!id.ok()) {
      for (uint64_t q : ids) Abort(q);
      return id.status();
    }
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace gk
