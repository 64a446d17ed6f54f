#include "tools/eval/sample_generator.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "util/guarded_parse.h"

namespace gk::eval {

namespace {

// The server's answers are outside input: read inside GuardedParse (util/guarded_parse.h), so
// an answer of an unexpected shape is an error, not an exception that ends a worker thread.
// The first model id of a /v1/models answer ("" when the first entry has none); an error when
// it lists no model.
Result<std::string> FirstModelId(const std::string& body) {
  return GuardedParse("/v1/models", [&]() -> Result<std::string> {
    GK_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJson(body, ""));
    if (!j.contains("data") || j["data"].empty()) return Status::Error("no model");
    if (!j["data"].is_array() || !j["data"][0].is_object()) return std::string();
    const nlohmann::json& first = j["data"][0];
    return first.contains("id") && first["id"].is_string() ? first["id"].get<std::string>() : "";
  });
}

// The message content of a chat completion's first choice ("" when it has none).
Result<std::string> FirstChoiceContent(const std::string& body) {
  return GuardedParse("the server's answer", [&]() -> Result<std::string> {
    GK_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJson(body, ""));
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
      return Status::Error("the server's answer has no choices");
    }
    const nlohmann::json& c0 = j["choices"][0];
    if (!c0.is_object() || !c0.contains("message") || !c0["message"].is_object()) return std::string();
    const nlohmann::json& msg = c0["message"];
    return msg.contains("content") && msg["content"].is_string() ? msg["content"].get<std::string>() : "";
  });
}

}  // namespace

Result<std::vector<int32_t>> ChatPrompt(const ChatFormat& format, const Tokenizer& tokenizer, const std::string& user) {
  ChatRenderInput in;
  in.messages.push_back({{"role", "user"}, {"content", user}});
  Result<std::vector<int32_t>> ids = format.Apply(tokenizer, in);
  if (!ids.ok()) return ids.status().Wrap(StrCat("chat template ", format.Describe()));
  return ids;
}

GenerateFn EngineGenerator(ServeEngine& engine, const Tokenizer& tokenizer, ChatFormat format,
                           std::vector<int32_t> stop_ids) {
  auto shared_format = std::make_shared<const ChatFormat>(std::move(format));  // GenerateFn is copyable
  return [&engine, &tokenizer, shared_format, stop_ids](const std::vector<GenerationJob>& jobs,
                                                        const GenerationSettings& s,
                                                        const std::function<void(int, int)>& progress)
             -> Result<std::vector<std::string>> {
    struct State {
      std::mutex mu;
      std::condition_variable cv;
      std::vector<std::vector<int32_t>> tokens;
      int done = 0;
    };
    // Shared with the callbacks: requests already queued keep running if this returns early.
    auto st = std::make_shared<State>();
    st->tokens.resize(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      auto prompt = ChatPrompt(*shared_format, tokenizer, jobs[i].user_message);
      if (!prompt.ok()) return prompt.status();
      EngineRequest req;
      req.prompt = std::move(*prompt);
      req.sampling.temperature = static_cast<float>(s.temperature);
      req.sampling.top_p = static_cast<float>(s.top_p);
      req.sampling.seed = jobs[i].seed;
      req.max_tokens = s.max_tokens;
      req.stop_token_ids = stop_ids;
      const int64_t room = engine.capacity().max_model_len - static_cast<int64_t>(req.prompt.size());
      if (room < 1) {
        return Status::Error(StrCat("sample ", i, ": the prompt is ", req.prompt.size(),
                                    " tokens, the engine's max_model_len ", engine.capacity().max_model_len));
      }
      req.max_tokens = static_cast<int>(std::min<int64_t>(req.max_tokens, room));
      // The queue holds 4,096 by default: when it is full, wait for room (a copy is submitted
      // each time because Submit consumes its argument).
      auto on_output = [st, i, total = jobs.size(), progress](const RequestOutput& out) {
        std::lock_guard<std::mutex> lock(st->mu);
        st->tokens[i].insert(st->tokens[i].end(), out.tokens.begin(), out.tokens.end());
        if (out.finish != FinishReason::kNone) {
          ++st->done;
          if (progress) progress(st->done, static_cast<int>(total));
          st->cv.notify_all();
        }
      };
      for (;;) {
        auto id = engine.Submit(req, on_output);
        if (id.ok()) break;
        if (!id.message().starts_with("queue full")) return id.status();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    std::unique_lock<std::mutex> lock(st->mu);
    st->cv.wait(lock, [&] { return st->done == static_cast<int>(jobs.size()); });
    std::vector<std::string> texts;
    for (const auto& t : st->tokens) texts.push_back(tokenizer.Decode(t, /*skip_special=*/true));
    return texts;
  };
}

GenerateFn ServerGenerator(const std::string& base_url, const std::string& model, const std::string& api_key,
                           int concurrency) {
  return [=](const std::vector<GenerationJob>& jobs, const GenerationSettings& s,
             const std::function<void(int, int)>& progress) -> Result<std::vector<std::string>> {
    if (!base_url.starts_with("http://")) {
      return Result<std::vector<std::string>>::Error(StrCat("--base-url ", base_url, ": expected http://host:port"));
    }
    httplib::Headers headers;
    if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
    std::string served = model;
    if (served.empty()) {
      httplib::Client c(base_url);
      auto r = c.Get("/v1/models", headers);
      if (!r || r->status != 200) {
        return Result<std::vector<std::string>>::Error(
            StrCat("GET ", base_url, "/v1/models failed", r ? StrCat(": HTTP ", r->status) : ": no connection"));
      }
      const Result<std::string> id = FirstModelId(r->body);
      if (!id.ok()) {
        return Result<std::vector<std::string>>::Error(StrCat(base_url, "/v1/models lists no model; pass --model"));
      }
      served = *id;
    }
    std::vector<std::string> texts(jobs.size());
    std::vector<std::string> errors(jobs.size());
    std::atomic<size_t> next{0};
    std::atomic<int> done{0};
    std::mutex progress_mu;
    auto worker = [&] {
      httplib::Client c(base_url);
      c.set_read_timeout(3600, 0);
      for (size_t i; (i = next++) < jobs.size();) {
        nlohmann::json body = {{"model", served},
                               {"messages", {{{"role", "user"}, {"content", jobs[i].user_message}}}},
                               {"max_tokens", s.max_tokens},
                               {"temperature", s.temperature},
                               {"top_p", s.top_p},
                               {"seed", jobs[i].seed}};
        auto r = c.Post("/v1/chat/completions", headers, body.dump(), "application/json");
        if (!r) {
          errors[i] = StrCat("POST ", base_url, "/v1/chat/completions: ", httplib::to_string(r.error()));
        } else if (r->status != 200) {
          errors[i] = StrCat("POST ", base_url, "/v1/chat/completions: HTTP ", r->status, ": ", r->body.substr(0, 200));
        } else {
          Result<std::string> content = FirstChoiceContent(r->body);
          if (!content.ok()) {
            errors[i] = content.message();
          } else {
            texts[i] = std::move(content).value();
          }
        }
        const int d = ++done;
        std::lock_guard<std::mutex> lock(progress_mu);
        if (progress) progress(d, static_cast<int>(jobs.size()));
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < std::max(1, concurrency); ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    for (const auto& e : errors) {
      if (!e.empty()) return Result<std::vector<std::string>>::Error(e);
    }
    return texts;
  };
}

}  // namespace gk::eval
