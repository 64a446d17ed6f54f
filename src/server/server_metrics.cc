#include "server/server_metrics.h"

#include <chrono>

namespace gk::server {

ServerMetrics::ServerMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_(TtftBuckets()),
      itl_(TokenLatencyBuckets()),
      e2e_(RequestLatencyBuckets()),
      queue_(RequestLatencyBuckets()),
      tpot_(TokenLatencyBuckets()) {}

void ServerMetrics::CountFinished(const std::string& reason) {
  if (reason == "stop") {
    ++finished_stop_;
  } else if (reason == "length") {
    ++finished_length_;
  } else {
    ++finished_abort_;
  }
}

Labels ServerMetrics::Base() const { return {{"model_name", model_name_}, {"engine", "0"}}; }

std::string ServerMetrics::Render(const EngineStats& s, const EngineCapacity& cap) const {
  PrometheusWriter w;
  const Labels b = Base();
  auto with = [&](const char* k, const char* v) {
    Labels l = b;
    l.emplace_back(k, v);
    return l;
  };
  w.AddGauge("vllm:num_requests_running", "Number of requests in model execution batches.", {{b, double(s.running)}});
  w.AddGauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", {{b, double(s.waiting)}});
  w.AddGauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", {{b, s.kv_usage}});
  w.AddCounter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", {{b, double(s.prompt_tokens)}});
  w.AddCounter("vllm:generation_tokens_total", "Number of generation tokens processed.",
               {{b, double(s.generation_tokens)}});
  w.AddCounter("vllm:request_success_total", "Count of successfully processed requests.",
               {{with("finished_reason", "stop"), double(finished_stop_.load())},
                {with("finished_reason", "length"), double(finished_length_.load())},
                {with("finished_reason", "abort"), double(finished_abort_.load())}});
  w.AddCounter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
               {{b, double(s.preemptions)}});
  w.AddCounter("vllm:prefix_cache_queries_total",
               "Prefix cache queries, in terms of number of queried tokens.", {{b, double(s.prefix_cache_queries)}});
  w.AddCounter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
               {{b, double(s.prefix_cache_hits)}});
  w.AddHistogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", b, ttft_.Get());
  w.AddHistogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", b, itl_.Get());
  w.AddHistogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", b, e2e_.Get());
  w.AddHistogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", b,
                 queue_.Get());
  w.AddHistogram("vllm:request_time_per_output_token_seconds",
                 "Histogram of time_per_output_token_seconds per request.", b, tpot_.Get());
  w.AddGauge("gemmakit:kv_blocks_used", "KV-cache blocks referenced by requests, per KV group.",
             {{with("kv_group", "full"), double(s.blocks_used[0])},
              {with("kv_group", "sliding"), double(s.blocks_used[1])}});
  w.AddGauge("gemmakit:kv_blocks_total", "KV-cache blocks in the pool, per KV group.",
             {{with("kv_group", "full"), double(cap.num_blocks[0])},
              {with("kv_group", "sliding"), double(cap.num_blocks[1])}});
  if (max_loras_ > 0) {
    auto join = [](const std::vector<std::string>& names) {
      std::string out;
      for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
      return out;
    };
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    w.AddGauge("vllm:lora_requests_info", "Running stats on lora requests.",
               {{{{"max_lora", std::to_string(max_loras_)},
                  {"waiting_lora_adapters", join(s.waiting_loras)},
                  {"running_lora_adapters", join(s.running_loras)}},
                 now}});
  }
  return w.text();
}

}  // namespace gk::server
