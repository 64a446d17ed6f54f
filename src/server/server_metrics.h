// The server's /metrics: vLLM's metric names (prefix "vllm:", labels model_name and engine;
// ../shared/spec/serving.md §2.10) plus gemmakit:kv_blocks_used / gemmakit:kv_blocks_total per
// KV group, so tests can check that no block leaks, and with LoRA serving vLLM's
// vllm:lora_requests_info (labels max_lora, waiting_lora_adapters, running_lora_adapters: the
// adapter names comma-joined; value: the scrape's Unix time, as vLLM's set_to_current_time). Engine-side counters and gauges come from
// ServeEngine::Stats() at scrape time; the latency histograms and the finished-request counter
// are recorded here by the HTTP layer (TTFT is measured from HTTP arrival, as vLLM measures it
// from frontend arrival).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "engines/serve/engine.h"
#include "server/prometheus.h"

namespace gk::server {

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  void ObserveTtft(double s) { ttft_.Observe(s); }
  void ObserveItl(double s) { itl_.Observe(s); }
  void ObserveE2e(double s) { e2e_.Observe(s); }
  void ObserveQueue(double s) { queue_.Observe(s); }
  void ObserveTpot(double s) { tpot_.Observe(s); }
  // vllm:request_success_total{finished_reason}: "stop", "length" or "abort".
  void CountFinished(const std::string& reason);

  // LoRA serving on (--max-loras): Render adds vllm:lora_requests_info.
  void set_max_loras(int n) { max_loras_ = n; }

  std::string Render(const EngineStats& stats, const EngineCapacity& capacity) const;

 private:
  Labels Base() const;
  std::string model_name_;
  Histogram ttft_, itl_, e2e_, queue_, tpot_;
  std::atomic<uint64_t> finished_stop_{0}, finished_length_{0}, finished_abort_{0};
  int max_loras_ = 0;
};

}  // namespace gk::server
