// Test support for src/server (header-only, included by *_test.cc only): the layout tokenizer
// (formats/layout_tokenizer_test_util.h), and FakeEngine, a ServeEngine that "generates" scripted
// or cyclic tokens on its own thread at a set pace, so the HTTP layer can be tested without a
// model. It records what it was asked (requests, aborts) for the tests to check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engines/serve/engine.h"
#include "formats/layout_tokenizer_test_util.h"
#include "formats/tokenizer.h"
#include "model/config.h"

namespace gk::server::testing {

// LayoutTokenizer with Gemma 4 names: "\n" 107, byte tokens <0x00>.. from 108, then "▁" and
// single letters.
inline const Tokenizer& TestTokenizer() {
  static const Tokenizer* tok = new Tokenizer(LayoutTokenizer(/*gemma4_names=*/true));
  return *tok;
}

inline int32_t Id(const std::string& piece) {
  auto id = TestTokenizer().TokenId(piece == " " ? "\xE2\x96\x81" : piece);
  EXPECT_TRUE(id.has_value()) << piece;
  return id.value_or(0);
}
inline int32_t ByteId(uint8_t b) { return 108 + b; }

inline ModelConfig TestConfig() {
  ModelConfig c;
  c.arch = Arch::kGemma4;
  c.vocab_size = TestTokenizer().vocab_size();
  c.num_layers = 2;
  c.bos_token_id = 2;
  c.eos_token_id = 1;
  c.eos_token_ids = {1};
  return c;
}

// A ServeEngine without a model. Each request emits `script` (if set) or the cycle
// "hello " token by token, one token per `step` of wall time, honouring max_tokens,
// stop_token_ids (after min_tokens) and logprobs; Abort ends a request with kAbort.
class FakeEngine final : public ServeEngine {
 public:
  struct Options {
    int64_t max_model_len = 256;
    std::chrono::milliseconds step{2};
    std::chrono::milliseconds first_token_delay{0};
    int max_waiting = 1000;
    std::vector<int32_t> script;  // empty: "hello " repeated
  };
  explicit FakeEngine(Options o) : o_(std::move(o)), config_(TestConfig()) {
    cap_.max_model_len = o_.max_model_len;
    cap_.block_size = 16;
    cap_.num_blocks[0] = 1000;
    cap_.kv_tokens = 16000;
    cap_.max_concurrency = 10;
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeEngine() override { Shutdown(false); }

  Result<uint64_t> Submit(EngineRequest request, OutputCallback callback) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::Error("the engine is shutting down");
    if (request.prompt.empty()) return Status::Error("the prompt is empty");
    if (int(live_.size()) >= o_.max_waiting) return Status::Error("queue full: too many requests are waiting");
    const uint64_t id = next_id_++;
    Live l;
    l.request = request;
    l.callback = std::move(callback);
    l.next_at = std::chrono::steady_clock::now() + o_.first_token_delay + o_.step;
    live_.emplace(id, std::move(l));
    submitted_.push_back(std::move(request));
    kick_ = true;
    cv_.notify_all();
    return id;
  }
  void Abort(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.insert(id);
    pending_aborts_.push_back(id);
    cv_.notify_all();
  }
  void Shutdown(bool drain) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_) drain_ = drain;
      if (!drain) drain_ = false;
      stopping_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }
  EngineStats Stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats s;
    s.running = int(live_.size());
    s.blocks_used[0] = int64_t(live_.size());  // one "block" per live request: leaks show up
    s.kv_usage = double(live_.size()) / 1000.0;
    s.generation_tokens = generated_;
    return s;
  }
  const EngineCapacity& capacity() const override { return cap_; }
  const ModelConfig& config() const override { return config_; }
  bool alive() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !dead_;
  }
  void Kill() {  // simulates an engine thread that died
    Shutdown(false);
  }

  std::vector<EngineRequest> submitted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  std::set<uint64_t> aborted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
  }

 private:
  struct Live {
    EngineRequest request;
    OutputCallback callback;
    int generated = 0;
    std::chrono::steady_clock::time_point next_at;
  };

  int32_t TokenAt(const Live& l) const {
    if (!o_.script.empty()) return o_.script[size_t(l.generated) % o_.script.size()];
    static const char* kCycle[] = {"h", "e", "l", "l", "o", " "};
    return Id(kCycle[l.generated % 6]);
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      for (uint64_t id : pending_aborts_) {
        auto it = live_.find(id);
        if (it == live_.end()) continue;
        RequestOutput out;
        out.finish = FinishReason::kAbort;
        out.prompt_tokens = int64_t(it->second.request.prompt.size());
        out.completion_tokens = it->second.generated;
        OutputCallback cb = std::move(it->second.callback);
        live_.erase(it);
        cb(out);
      }
      pending_aborts_.clear();
      if (stopping_ && (!drain_ || live_.empty())) {
        for (auto& [id, l] : live_) {
          RequestOutput out;
          out.finish = FinishReason::kAbort;
          l.callback(out);
        }
        live_.clear();
        dead_ = true;
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      auto next = now + std::chrono::hours(1);
      std::vector<uint64_t> finished;
      for (auto& [id, l] : live_) {
        if (l.next_at > now) {
          next = std::min(next, l.next_at);
          continue;
        }
        l.next_at = now + o_.step;
        next = std::min(next, l.next_at);
        const int32_t token = TokenAt(l);
        ++l.generated;
        ++generated_;
        RequestOutput out;
        out.prompt_tokens = int64_t(l.request.prompt.size());
        out.completion_tokens = l.generated;
        const auto& stops = l.request.stop_token_ids;
        if (l.generated > l.request.min_tokens && std::find(stops.begin(), stops.end(), token) != stops.end()) {
          out.finish = FinishReason::kStop;
          out.stop_token = token;
        } else {
          out.tokens.push_back(token);
          if (l.request.logprobs >= 0) {
            TokenLogprob lp{token, -0.5f, {}};
            for (int k = 0; k < l.request.logprobs; ++k) lp.top.emplace_back(k == 0 ? token : Id("x"), -0.5f - k);
            out.logprobs.push_back(lp);
          }
          if (l.generated >= l.request.max_tokens ||
              int64_t(l.request.prompt.size()) + l.generated >= o_.max_model_len) {
            out.finish = FinishReason::kLength;
          }
        }
        l.callback(out);
        if (out.finish != FinishReason::kNone) finished.push_back(id);
      }
      for (uint64_t id : finished) live_.erase(id);
      kick_ = false;
      cv_.wait_until(lock, next, [&] {
        return kick_ || !pending_aborts_.empty() || (stopping_ && (!drain_ || live_.empty()));
      });
    }
  }

  Options o_;
  ModelConfig config_;
  EngineCapacity cap_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Live> live_;
  std::vector<uint64_t> pending_aborts_;
  std::set<uint64_t> aborted_;
  std::vector<EngineRequest> submitted_;
  uint64_t next_id_ = 1, generated_ = 0;
  bool stopping_ = false, drain_ = false, dead_ = false, kick_ = false;
  std::thread thread_;
};

}  // namespace gk::server::testing
