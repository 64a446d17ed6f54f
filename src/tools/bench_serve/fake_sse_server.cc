#include "tools/bench_serve/fake_sse_server.h"

#include <chrono>
#include <cstdlib>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/listen_backlog.h"
#include "util/clock.h"

namespace gk::bench {

namespace {

int RequestIndex(const httplib::Request& req) {
  const std::string id = req.get_header_value("x-request-id");
  size_t i = id.size();
  while (i > 0 && std::isdigit(static_cast<unsigned char>(id[i - 1]))) --i;
  return i == id.size() ? -1 : std::atoi(id.c_str() + i);
}

int CountWords(const std::string& s) {
  int n = 0;
  bool in_word = false;
  for (char ch : s) {
    const bool space = std::isspace(static_cast<unsigned char>(ch));
    if (!space && !in_word) ++n;
    in_word = !space;
  }
  return n;
}

void SleepUntil(double t) {
  const double dt = t - NowSeconds();
  if (dt > 0) std::this_thread::sleep_for(std::chrono::duration<double>(dt));
}

std::string Sse(const nlohmann::json& j) { return "data: " + j.dump() + "\n\n"; }

// The stream of one request: which chunk comes next and when.
struct StreamState {
  bool chat = false;
  int tokens = 0, per_chunk = 1, prompt_tokens = 0, sent_tokens = 0, chunks_sent = 0;
  double next_time = 0, itl = 0;
  bool usage_sent = false, drop = false, malformed = false, no_choices = false;
  std::string model;
  size_t trace = 0;
};

}  // namespace

FakeSseServer::FakeSseServer(FakeServerOptions options)
    : options_(std::move(options)), svr_(std::make_unique<httplib::Server>()) {
  const int threads = options_.threads;
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  svr_->set_keep_alive_max_count(100000);
  svr_->set_tcp_nodelay(true);
  // httplib ends a body without a length only when its keep-alive wait runs out (5 s by default).
  if (!options_.chunked) svr_->set_keep_alive_timeout(0);
  Routes();
}

FakeSseServer::~FakeSseServer() { Stop(); }

Result<int> FakeSseServer::Start(int port) {
  DeepListenBacklog backlog(*svr_);
  if (port == 0) {
    port = svr_->bind_to_any_port("127.0.0.1");
    if (port < 0) return Result<int>::Error("fake server: cannot bind 127.0.0.1");
  } else if (!svr_->bind_to_port("127.0.0.1", port)) {
    return Result<int>::Error(StrCat("fake server: cannot listen on 127.0.0.1:", port));
  }
  backlog.Apply();
  thread_ = std::thread([this] { svr_->listen_after_bind(); });
  while (!svr_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return port;
}

void FakeSseServer::Stop() {
  if (!thread_.joinable()) return;
  svr_->stop();
  thread_.join();
}

std::vector<FakeRequestTrace> FakeSseServer::traces() const {
  std::lock_guard<std::mutex> lock(mu_);
  return traces_;
}

void FakeSseServer::Routes() {
  svr_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json j = {{"object", "list"},
                        {"data", {{{"id", options_.model}, {"object", "model"}, {"root", options_.model},
                                   {"owned_by", "gemmakit-fake"}}}}};
    res.set_content(j.dump(), "application/json");
  });
  auto stream = [this](const httplib::Request& req, httplib::Response& res, bool chat) {
    const double received = NowSeconds();
    const int index = RequestIndex(req);
    const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      res.status = 400;
      res.set_content(R"({"error":{"message":"body is not JSON","type":"BadRequestError","code":400}})",
                      "application/json");
      return;
    }
    if (options_.fail_500.count(index)) {
      res.status = 500;
      res.set_content(R"({"error":{"message":"injected failure","type":"InternalServerError","code":500}})",
                      "application/json");
      return;
    }
    auto st = std::make_shared<StreamState>();
    st->chat = chat;
    st->tokens = body.value(chat ? "max_completion_tokens" : "max_tokens", 16);
    st->per_chunk = std::max(1, options_.tokens_per_chunk);
    std::string prompt = chat ? "" : body.value("prompt", "");
    if (chat && body.contains("messages") && body["messages"].is_array()) {
      for (const auto& m : body["messages"]) prompt += m.value("content", "") + " ";
    }
    st->prompt_tokens = options_.prompt_tokens >= 0 ? options_.prompt_tokens : CountWords(prompt);
    st->next_time = received + options_.ttft_s;
    st->itl = options_.itl_s;
    st->drop = options_.drop_mid_stream.count(index) > 0;
    st->malformed = options_.malformed_sse.count(index) > 0;
    st->no_choices = options_.no_choices.count(index) > 0;
    st->model = options_.model;
    {
      std::lock_guard<std::mutex> lock(mu_);
      st->trace = traces_.size();
      traces_.push_back({index, received, {}});
    }
    auto provider = [this, st](size_t, httplib::DataSink& sink) -> bool {
      if (st->sent_tokens < st->tokens && !st->no_choices) {
        if (st->drop && st->chunks_sent == 2) return false;  // httplib aborts the connection
        SleepUntil(st->next_time);
        const int k = std::min(st->per_chunk, st->tokens - st->sent_tokens);
        std::string text;
        for (int i = 0; i < k; ++i) text += "tok ";
        nlohmann::json choice = {{"index", 0}, {"finish_reason", nullptr}};
        if (st->chat) choice["delta"] = {{"content", text}};
        else choice["text"] = text;
        std::string msg = Sse({{"id", "fake"}, {"object", st->chat ? "chat.completion.chunk" : "text_completion"},
                               {"model", st->model}, {"choices", {choice}}});
        if (st->malformed && st->chunks_sent == 1) msg = "data: {\"choices\": [{\"text\": \"unterminated\n\n";
        const double sent = NowSeconds();  // before the write: the client cannot see it earlier
        if (!sink.write(msg.data(), msg.size())) return false;
        st->sent_tokens += k;
        ++st->chunks_sent;
        st->next_time += st->itl;
        std::lock_guard<std::mutex> lock(mu_);
        traces_[st->trace].sends.push_back(sent);
        return true;
      }
      if (!st->usage_sent) {
        st->usage_sent = true;
        const nlohmann::json usage = {{"prompt_tokens", st->prompt_tokens},
                                      {"completion_tokens", st->no_choices ? 0 : st->tokens},
                                      {"total_tokens", st->prompt_tokens + (st->no_choices ? 0 : st->tokens)}};
        std::string msg = Sse({{"id", "fake"}, {"model", st->model}, {"choices", nlohmann::json::array()},
                               {"usage", usage}}) + "data: [DONE]\n\n";
        if (!sink.write(msg.data(), msg.size())) return false;
      }
      sink.done();
      return true;
    };
    if (options_.chunked) {
      res.set_chunked_content_provider("text/event-stream", provider);
    } else {
      res.set_header("Connection", "close");
      res.set_content_provider("text/event-stream", provider);
    }
  };
  svr_->Post("/v1/completions", [stream](const httplib::Request& q, httplib::Response& r) { stream(q, r, false); });
  svr_->Post("/v1/chat/completions",
             [stream](const httplib::Request& q, httplib::Response& r) { stream(q, r, true); });
}

}  // namespace gk::bench
