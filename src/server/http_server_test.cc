// The HTTP layer end to end over loopback, against FakeEngine (no model): routes, errors,
// streaming format, stop strings, disconnects, API key, queue limit, draining.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <thread>

#include "formats/chat_format.h"
#include "formats/gemma4_tokens.h"
#include "server/server_test_util.h"

namespace gk::server {
namespace {

using namespace std::chrono_literals;
using testing::ByteId;
using testing::FakeEngine;
using testing::Id;
using testing::TestTokenizer;
using json = nlohmann::json;

// The Gemma 4 template `gemmakit init` writes (tools, tool calls, thinking).
const ChatFormat& InitTemplate() {
  static const ChatFormat* format = [] {
    Result<ChatFormat> f = ChatFormat::FromSource({std::string(Gemma4InitChatTemplate()), "init template"});
    EXPECT_TRUE(f.ok()) << f.message();
    return new ChatFormat(f.ok() ? std::move(*f) : ChatFormat::Builtin(BuiltinChat::kGemma4));
  }();
  return *format;
}

struct Harness {
  explicit Harness(FakeEngine::Options eo = {}, std::string api_key = "", bool parsers = false,
                   const std::string& default_kwargs = "{}")
      : engine(eo), metrics("test-model") {
    ServeContext ctx;
    ctx.default_chat_template_kwargs = nlohmann::ordered_json::parse(default_kwargs);
    ctx.reasoning_parser = parsers;
    ctx.tool_call_parser = parsers;
    if (parsers) ctx.chat_format = &InitTemplate();  // the built-in renderer has no tools
    ctx.engine = &engine;
    ctx.tokenizer = &TestTokenizer();
    ctx.config = &engine.config();
    ctx.eos_ids = {1};
    ctx.max_model_len = eo.max_model_len;
    ctx.metrics = &metrics;
    HttpServerOptions ho;
    ho.port = 0;
    ho.api_key = std::move(api_key);
    ho.http_threads = 16;
    ho.log_unknown_fields = false;
    server = std::make_unique<HttpServer>(ctx, ModelRegistry({"test-model"}, "/models/test", eo.max_model_len, 1), ho);
    auto p = server->Bind();
    EXPECT_TRUE(p.ok()) << p.message();
    port = p.ok() ? *p : 0;
    thread = std::thread([this] { server->Listen(); });
  }
  ~Harness() {
    server->Stop();
    thread.join();
    engine.Shutdown(false);
  }
  httplib::Client Client(const std::string& key = "") {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(20, 0);
    if (!key.empty()) c.set_bearer_token_auth(key);
    return c;
  }
  httplib::Result Post(const std::string& path, const std::string& body, const std::string& key = "") {
    return Client(key).Post(path.c_str(), body, "application/json");
  }
  // Waits until the engine has no live request.
  bool Idle(std::chrono::milliseconds within = 3s) {
    const auto end = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < end) {
      if (engine.live() == 0) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  FakeEngine engine;
  ServerMetrics metrics;
  std::unique_ptr<HttpServer> server;
  std::thread thread;
  int port = 0;
};

// A minimal HTTP/1.1 client on a raw socket, for streams and hang-ups.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void SendRequest(int fd, const std::string& path, const std::string& body) {
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                          "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
}

// Reads until `marker` appears (or EOF); returns what was read.
std::string ReadUntil(int fd, const std::string& marker) {
  std::string got;
  char buf[4096];
  while (got.find(marker) == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  return got;
}

std::string Dechunk(const std::string& body) {
  std::string out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t eol = body.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out += body.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

struct StreamResult {
  int status = 0;
  std::string head;
  std::vector<std::string> events;  // the data: payloads
};

StreamResult Stream(int port, const std::string& path, const std::string& body) {
  StreamResult r;
  const int fd = Connect(port);
  EXPECT_GE(fd, 0);
  if (fd < 0) return r;
  SendRequest(fd, path, body);
  const std::string raw = ReadUntil(fd, "\r\n0\r\n\r\n");
  close(fd);
  const size_t split = raw.find("\r\n\r\n");
  r.head = raw.substr(0, split);
  if (raw.size() > 12) r.status = std::atoi(raw.c_str() + 9);
  const std::string body_text = Dechunk(raw.substr(split + 4));
  size_t pos = 0;
  while (pos < body_text.size()) {
    const size_t end = body_text.find("\n\n", pos);
    if (end == std::string::npos) break;
    std::string ev = body_text.substr(pos, end - pos);
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    r.events.push_back(ev.substr(6));
    pos = end + 2;
  }
  return r;
}

TEST(HttpServerTest, InfoEndpoints) {
  Harness h;
  auto c = h.Client();
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "");
  r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  const json models = json::parse(r->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "test-model");
  EXPECT_EQ(models["data"][0]["root"], "/models/test");
  EXPECT_EQ(models["data"][0]["max_model_len"], 256);
  r = c.Get("/version");
  ASSERT_TRUE(r);
  EXPECT_TRUE(json::parse(r->body).contains("version"));
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  for (const char* name :
       {"vllm:num_requests_running{", "vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc{",
        "vllm:prompt_tokens_total{", "vllm:generation_tokens_total{", "vllm:request_success_total{",
        "vllm:num_preemptions_total{", "vllm:prefix_cache_queries_total{", "vllm:prefix_cache_hits_total{",
        "vllm:time_to_first_token_seconds_bucket{", "vllm:inter_token_latency_seconds_bucket{",
        "vllm:e2e_request_latency_seconds_bucket{", "vllm:request_queue_time_seconds_bucket{",
        "vllm:request_time_per_output_token_seconds_bucket{", "gemmakit:kv_blocks_used{",
        "gemmakit:kv_blocks_total{", "model_name=\"test-model\""}) {
    EXPECT_NE(r->body.find(name), std::string::npos) << name;
  }
  r = c.Get("/nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(json::parse(r->body).contains("error"));
}

TEST(HttpServerTest, CompletionNonStreaming) {
  Harness h;
  auto r = h.Post("/v1/completions", R"({"model": "test-model", "prompt": "hi", "max_tokens": 8, "temperature": 0})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["model"], "test-model");
  EXPECT_EQ(j["choices"][0]["text"], "hello he");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);  // <bos> h i
  EXPECT_EQ(j["usage"]["total_tokens"], 11);
  const auto sub = h.engine.submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].prompt, (std::vector<int32_t>{2, Id("h"), Id("i")}));
  EXPECT_EQ(sub[0].max_tokens, 8);
  EXPECT_EQ(sub[0].sampling.temperature, 0.f);
  EXPECT_EQ(sub[0].stop_token_ids, (std::vector<int32_t>{1}));  // EOS unless ignore_eos
}

TEST(HttpServerTest, RequestFieldsReachTheEngine) {
  Harness h;
  auto r = h.Post("/v1/completions", R"({"prompt": [5, 6], "max_tokens": 3, "n": 2, "seed": 10, "top_k": 7,
      "top_p": 0.5, "temperature": 0.7, "ignore_eos": true, "stop_token_ids": [9], "min_tokens": 1,
      "cache_salt": "tenant"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);  // counted once per prompt
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  auto sub = h.engine.submitted();
  ASSERT_EQ(sub.size(), 2u);
  std::sort(sub.begin(), sub.end(), [](auto& a, auto& b) { return a.sampling.seed < b.sampling.seed; });
  EXPECT_EQ(sub[0].prompt, (std::vector<int32_t>{5, 6}));  // token prompts: no <bos> added
  EXPECT_EQ(sub[0].sampling.seed, 10u);
  EXPECT_EQ(sub[1].sampling.seed, 11u);  // choice i: seed + i
  EXPECT_EQ(sub[0].sampling.top_k, 7);
  EXPECT_FLOAT_EQ(sub[0].sampling.top_p, 0.5f);
  EXPECT_FLOAT_EQ(sub[0].sampling.temperature, 0.7f);
  EXPECT_EQ(sub[0].stop_token_ids, (std::vector<int32_t>{9}));  // ignore_eos: no EOS
  EXPECT_EQ(sub[0].min_tokens, 1);
  EXPECT_EQ(sub[0].cache_salt, "tenant");
  // Several prompts: prompts x n choices.
  r = h.Post("/v1/completions", R"({"prompt": ["a", "b"], "max_tokens": 2, "n": 2})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"].size(), 4u);
  EXPECT_EQ(json::parse(r->body)["choices"][3]["index"], 3);
}

TEST(HttpServerTest, ChatNonStreamingUsesTheTemplate) {
  Harness h;
  auto r = h.Post("/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5, "temperature": 0})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hello");
  const auto sub = h.engine.submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].prompt.front(), 2);    // <bos>
  EXPECT_EQ(sub[0].prompt[1], 105);       // <|turn>
  // Default max tokens for chat: what is left of max_model_len.
  r = h.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "stop": "zzz"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(h.engine.submitted()[1].max_tokens, 256 - int(sub[0].prompt.size()));
}

// What a Gemma 4 model writes when it thinks, answers and calls a tool, then <eos>.
FakeEngine::Options ThinkAnswerCall() {
  FakeEngine::Options o;
  auto text = [&](const std::string& s) {
    for (unsigned char c : s) o.script.push_back(ByteId(c));
  };
  o.script.push_back(100);  // <|channel>
  text("thought\nLet me think.");
  o.script.push_back(101);  // <channel|>
  text("Sure.");
  o.script.push_back(48);  // <|tool_call>
  text("call:get_weather{city:");
  o.script.push_back(52);  // <|"|>
  text("Paris");
  o.script.push_back(52);
  text(",days:3}");
  o.script.push_back(49);  // <tool_call|>
  o.script.push_back(1);   // <eos>
  return o;
}

constexpr const char* kWeatherTools =
    R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])";

TEST(HttpServerTest, ChatReasoningAndToolCallsAreParsed) {
  Harness h(ThinkAnswerCall(), "", /*parsers=*/true);
  auto r = h.Post("/v1/chat/completions",
                  std::string(R"({"messages": [{"role": "user", "content": "Weather?"}], )") + kWeatherTools + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  const json& m = j["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Let me think.");
  EXPECT_EQ(m["content"], "Sure.");
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r->body;
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris", "days": 3})"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");

  // Without tools in the request the call is not parsed: it stays text, markers included.
  r = h.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Weather?"}]})");
  ASSERT_TRUE(r);
  j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(j["choices"][0]["message"]["content"],
            "Sure.<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"], json::array());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");

  // tool_choice "none" parses no call; include_reasoning false drops the reasoning.
  r = h.Post("/v1/chat/completions", std::string(R"({"messages": [{"role": "user", "content": "Weather?"}],
      "tool_choice": "none", "include_reasoning": false, )") + kWeatherTools + "}");
  ASSERT_TRUE(r);
  j = json::parse(r->body);
  EXPECT_TRUE(j["choices"][0]["message"]["reasoning_content"].is_null());
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"], json::array());
}

// --default-chat-template-kwargs: under the request's own, which win.
TEST(HttpServerTest, DefaultChatTemplateKwargs) {
  Harness h({}, "", /*parsers=*/true, R"({"enable_thinking": true})");
  const int32_t think = Id("<|think|>");
  auto count_think = [&](const std::string& body, Harness* server = nullptr) {
    auto r = (server ? server : &h)->Post("/tokenize", body);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    const json j = json::parse(r ? r->body : "{}");
    int n = 0;
    for (const json& t : j.value("tokens", json::array())) n += t.get<int32_t>() == think ? 1 : 0;
    return n;
  };
  EXPECT_EQ(count_think(R"({"messages": [{"role": "user", "content": "hi"}]})"), 1);
  EXPECT_EQ(count_think(R"({"messages": [{"role": "user", "content": "hi"}],
                           "chat_template_kwargs": {"enable_thinking": false}})"), 0);
  Harness plain({}, "", /*parsers=*/true);  // no defaults: thinking off
  EXPECT_EQ(count_think(R"({"messages": [{"role": "user", "content": "hi"}]})", &plain), 0);
}

TEST(HttpServerTest, StreamedReasoningAndToolCallDeltas) {
  Harness h(ThinkAnswerCall(), "", /*parsers=*/true);
  StreamResult s = Stream(h.port, "/v1/chat/completions",
                          std::string(R"({"stream": true, "messages": [{"role": "user", "content": "Weather?"}], )") +
                              kWeatherTools + "}");
  ASSERT_EQ(s.status, 200);
  ASSERT_GE(s.events.size(), 3u);
  EXPECT_EQ(s.events.back(), "[DONE]");
  std::string reasoning, content;
  std::vector<json> calls;
  json finish;
  for (size_t i = 0; i + 1 < s.events.size(); ++i) {
    const json c = json::parse(s.events[i]);
    const json& d = c["choices"][0]["delta"];
    EXPECT_EQ(d.contains("role"), i == 0) << s.events[i];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      EXPECT_TRUE(reasoning.size() > 0 && content == "Sure.") << "a call streams after what precedes it";
      for (const json& t : d["tool_calls"]) calls.push_back(t);
    }
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(reasoning, "Let me think.");
  EXPECT_EQ(content, "Sure.");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris", "days": 3})"));
  EXPECT_EQ(finish, "tool_calls");
}

TEST(HttpServerTest, StopStringEndsTheRequestAndAbortsIt) {
  Harness h;
  auto r = h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 50, "stop": ["lo h"]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], "hel");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["stop_reason"], "lo h");
  EXPECT_EQ(j["usage"]["completion_tokens"], 7);  // h e l l o ' ' h
  EXPECT_EQ(h.engine.aborted().size(), 1u);
  EXPECT_TRUE(h.Idle());
  r = h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 50, "stop": "ll", "include_stop_str_in_output": true})");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "hell");
  // A stop token id from the request is the stop_reason; EOS is not.
  r = h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 50, "stop_token_ids": [)" + std::to_string(Id("o")) + "]}");
  ASSERT_TRUE(r);
  j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], "hell");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["stop_reason"], Id("o"));
}

TEST(HttpServerTest, StreamingCompletionAndChat) {
  Harness h;
  StreamResult s = Stream(h.port, "/v1/completions",
                          R"({"prompt": "x", "max_tokens": 6, "stream": true, "stream_options": {"include_usage": true}})");
  EXPECT_EQ(s.status, 200);
  EXPECT_NE(s.head.find("text/event-stream"), std::string::npos);
  ASSERT_GE(s.events.size(), 3u);
  EXPECT_EQ(s.events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 2 < s.events.size(); ++i) {
    const json c = json::parse(s.events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
    text += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "hello ");
  EXPECT_EQ(json::parse(s.events[s.events.size() - 3])["choices"][0]["finish_reason"], "length");
  const json usage = json::parse(s.events[s.events.size() - 2]);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);

  s = Stream(h.port, "/v1/chat/completions",
             R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": true})");
  ASSERT_GE(s.events.size(), 2u);
  const json first = json::parse(s.events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  // The first chunk carries the role together with the first text: no empty role-only chunk.
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "h");
  EXPECT_FALSE(first.contains("usage"));
  text.clear();
  for (size_t i = 0; i + 1 < s.events.size(); ++i) {
    const json c = json::parse(s.events[i]);
    if (i > 0) {
      EXPECT_FALSE(c["choices"][0]["delta"].contains("role"));
    }
    if (c["choices"][0]["delta"].contains("content")) text += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, "hell");
  EXPECT_EQ(s.events.back(), "[DONE]");
}

TEST(HttpServerTest, StreamingHoldsBackPartialCharactersAndStopPrefixes) {
  FakeEngine::Options o;
  // "a" "é" (two byte tokens) "b" "S" "T" "c": stop "ST" must cut before "S".
  o.script = {Id("a"), ByteId(0xC3), ByteId(0xA9), Id("b"), Id("H"), Id("!"), Id("c")};
  Harness h(o);
  StreamResult s = Stream(h.port, "/v1/completions",
                          R"({"prompt": "x", "max_tokens": 7, "stream": true, "stop": ["H!"]})");
  std::string text;
  for (const std::string& ev : s.events) {
    if (ev == "[DONE]") break;
    const json c = json::parse(ev);
    const std::string t = c["choices"][0]["text"];
    EXPECT_EQ(t.find("\xEF\xBF\xBD"), std::string::npos) << "a split character reached the client";
    EXPECT_NE(t, "\xC3");
    text += t;
  }
  EXPECT_EQ(text, "a\xC3\xA9" "b");
  EXPECT_EQ(json::parse(s.events[s.events.size() - 2])["choices"][0]["finish_reason"], "stop");
}

TEST(HttpServerTest, EchoAndContinuousUsage) {
  Harness h;
  auto r = h.Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 3, "echo": true})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "hihel");
  StreamResult s = Stream(h.port, "/v1/completions",
                          R"({"prompt": "hi", "max_tokens": 3, "echo": true, "stream": true,
                              "stream_options": {"include_usage": true, "continuous_usage_stats": true}})");
  ASSERT_GE(s.events.size(), 3u);
  EXPECT_EQ(json::parse(s.events[0])["choices"][0]["text"], "hih");
  EXPECT_EQ(json::parse(s.events[0])["usage"]["completion_tokens"], 1);
  EXPECT_EQ(json::parse(s.events[1])["usage"]["completion_tokens"], 2);
  EXPECT_EQ(json::parse(s.events[s.events.size() - 2])["usage"]["completion_tokens"], 3);
}

TEST(HttpServerTest, Logprobs) {
  Harness h;
  auto r = h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 3, "logprobs": 2})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json lp = json::parse(r->body)["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({"h", "e", "l"}));
  EXPECT_EQ(lp["token_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"], json::array({0, 1, 2}));
  EXPECT_EQ(h.engine.submitted()[0].logprobs, 2);
  r = h.Post("/v1/chat/completions",
             R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "logprobs": true, "top_logprobs": 1})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  lp = json::parse(r->body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["content"].size(), 2u);
  EXPECT_EQ(lp["content"][0]["token"], "h");
  EXPECT_EQ(lp["content"][0]["bytes"], json::array({104}));
  EXPECT_EQ(lp["content"][0]["top_logprobs"].size(), 1u);
}

TEST(HttpServerTest, BadRequestsGetOpenAIErrorsAndTheServerKeepsServing) {
  Harness h;
  struct Case {
    const char* path;
    std::string body;
    int status;
    const char* message_part;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{oops", 400, "not valid JSON"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "a"})", 400, "must be an integer"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": -1})", 400, "at least 1"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 100000000000})", 400, "maximum context length is 256"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 255})", 400, "you requested 257 tokens (2 in the messages, 255"},
      {"/v1/completions", "{\"prompt\": \"\xFF\"}", 400, "UTF-8"},
      {"/v1/completions", R"({"prompt": "x", "n": 0})", 400, "n must be at least 1"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", 400, "non-negative"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 2})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": [999999]})", 400, "out of vocabulary"},
      {"/v1/completions", R"({"prompt": "x", "stop_token_ids": [999999]})", 400, "out of vocabulary"},
      {"/v1/completions", R"({"prompt": [], "max_tokens": 1})", 400, "must not be empty"},
      {"/v1/completions", R"({"prompt": "", "add_special_tokens": false})", 400, "prompt is empty"},
      {"/v1/completions", R"({"model": "other", "prompt": "x"})", 404, "The model `other` does not exist."},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 1}]})", 400, "content"},
      {"/tokenize", R"({"model": "other", "prompt": "x"})", 404, "does not exist"},
      {"/detokenize", R"({"tokens": [999999]})", 400, "out of vocabulary"},
  };
  for (const Case& c : cases) {
    auto r = h.Post(c.path, c.body);
    ASSERT_TRUE(r) << c.body;
    EXPECT_EQ(r->status, c.status) << c.body << " -> " << r->body;
    const json j = json::parse(r->body);
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.message_part), std::string::npos)
        << c.body << " -> " << r->body;
    EXPECT_EQ(j["error"]["code"], c.status);
    EXPECT_TRUE(j["error"].contains("type") && j["error"].contains("param"));
    auto health = h.Client().Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
  }
  // Unknown fields are ignored, as vLLM does.
  auto r = h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1, "frobnicate": true})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_TRUE(h.Idle());
}

TEST(HttpServerTest, TokenizeDetokenize) {
  Harness h;
  auto r = h.Post("/tokenize", R"({"prompt": "hi"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["tokens"], json::array({2, Id("h"), Id("i")}));
  EXPECT_EQ(j["count"], 3);
  EXPECT_EQ(j["max_model_len"], 256);
  r = h.Post("/tokenize", R"({"prompt": "hi", "add_special_tokens": false})");
  EXPECT_EQ(json::parse(r->body)["count"], 2);
  r = h.Post("/tokenize", R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["tokens"][1], 105);
  r = h.Post("/detokenize", "{\"tokens\": [" + std::to_string(Id("h")) + ", " + std::to_string(Id("i")) + "]}");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["prompt"], "hi");
}

TEST(HttpServerTest, ApiKey) {
  Harness h({}, "sekret");
  auto r = h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_TRUE(json::parse(r->body).contains("error"));
  r = h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "wrong");
  EXPECT_EQ(r->status, 401);
  r = h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "sekret");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(h.Client().Get("/v1/models")->status, 401);
  EXPECT_EQ(h.Client("sekret").Get("/v1/models")->status, 200);
  for (const char* open : {"/health", "/metrics", "/version"}) EXPECT_EQ(h.Client().Get(open)->status, 200) << open;
}

TEST(HttpServerTest, QueueFullIs503) {
  FakeEngine::Options o;
  o.max_waiting = 1;
  o.step = 20ms;
  Harness h(o);
  std::thread busy([&] { h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 20})"); });
  while (h.engine.live() == 0) std::this_thread::sleep_for(1ms);
  auto r = h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("queue full"), std::string::npos);
  // n = 3 with room for none of them: nothing is left running.
  r = h.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2, "n": 3})");
  EXPECT_EQ(r->status, 503);
  busy.join();
  EXPECT_TRUE(h.Idle());
}

TEST(HttpServerTest, StreamingClientDisconnectAbortsAtOnce) {
  FakeEngine::Options o;
  o.step = 10ms;
  Harness h(o);
  const int fd = Connect(h.port);
  ASSERT_GE(fd, 0);
  SendRequest(fd, "/v1/chat/completions",
              R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 200, "stream": true})");
  const std::string got = ReadUntil(fd, "data: ");
  EXPECT_NE(got.find("data: "), std::string::npos);
  EXPECT_EQ(h.engine.live(), 1u);
  close(fd);
  EXPECT_TRUE(h.Idle(1s)) << "the engine request outlived its client";
  EXPECT_EQ(h.engine.aborted().size(), 1u);
  const std::string metrics = h.Client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("finished_reason=\"abort\"} 1.0"), std::string::npos);
  EXPECT_NE(metrics.find("gemmakit:kv_blocks_used{model_name=\"test-model\",engine=\"0\",kv_group=\"full\"} 0.0"),
            std::string::npos);
}

TEST(HttpServerTest, NonStreamingClientDisconnectAborts) {
  FakeEngine::Options o;
  o.step = 10ms;
  Harness h(o);
  const int fd = Connect(h.port);
  ASSERT_GE(fd, 0);
  SendRequest(fd, "/v1/completions", R"({"prompt": "x", "max_tokens": 200})");
  while (h.engine.live() == 0) std::this_thread::sleep_for(1ms);
  close(fd);
  EXPECT_TRUE(h.Idle(1s)) << "the engine request outlived its client";
  EXPECT_EQ(h.engine.aborted().size(), 1u);
}

TEST(HttpServerTest, ManyConcurrentStreams) {
  FakeEngine::Options o;
  o.step = 5ms;
  Harness h(o);
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 12; ++i) {
    clients.emplace_back([&, i] {
      if (i % 3 == 2) {  // some hang up early
        const int fd = Connect(h.port);
        SendRequest(fd, "/v1/completions", R"({"prompt": "x", "max_tokens": 100, "stream": true})");
        ReadUntil(fd, "data: ");
        close(fd);
        return;
      }
      StreamResult s = Stream(h.port, "/v1/completions", R"({"prompt": "x", "max_tokens": 12, "stream": true})");
      if (!s.events.empty() && s.events.back() == "[DONE]") ++ok;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_TRUE(h.Idle());
}

TEST(HttpServerTest, StopDrainsInFlightStreamsThenRefuses) {
  FakeEngine::Options o;
  o.step = 20ms;
  Harness h(o);
  StreamResult s;
  std::thread client([&] {
    s = Stream(h.port, "/v1/completions", R"({"prompt": "x", "max_tokens": 15, "stream": true})");
  });
  while (h.engine.live() == 0) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(50ms);
  h.server->Stop();  // returns at once; the stream goes on
  client.join();
  ASSERT_FALSE(s.events.empty());
  EXPECT_EQ(s.events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < s.events.size(); ++i) text += json::parse(s.events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "hello hello hel");
  h.thread.join();  // Listen returned
  h.thread = std::thread([] {});
  EXPECT_LT(Connect(h.port), 0);  // no longer accepting
}

TEST(HttpServerTest, DeadEngine) {
  Harness h;
  h.engine.Kill();
  EXPECT_EQ(h.Client().Get("/health")->status, 503);
  auto r = h.Post("/v1/completions", R"({"prompt": "x"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
}

}  // namespace
}  // namespace gk::server
