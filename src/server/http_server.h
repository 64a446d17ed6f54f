// The OpenAI-compatible HTTP front end of `gemmakit serve` (cpp-httplib): routes, API key,
// JSON errors, SSE streaming, disconnect detection, and draining on shutdown.
//
//   POST /v1/completions, /v1/chat/completions   (RequestSession does the work)
//   GET  /v1/models, /health, /version, /metrics  POST /tokenize, /detokenize
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter   (with allow_runtime_lora, as vLLM
//        with VLLM_ALLOW_RUNTIME_LORA_UPDATING; else 404 like any unknown route)
//
// Threads: httplib's pool serves connections (one thread per connection while it is open);
// each request handler submits to the engine and waits on its own queue. With --api-key every
// route except /health, /metrics, /version and /ping needs "Authorization: Bearer KEY".
// Stop() closes the listening socket; requests in flight finish, then Listen() returns.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "server/listen_backlog.h"
#include "server/model_registry.h"
#include "server/request_session.h"
#include "server/server_metrics.h"
#include "util/result.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace gk::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;            // 0: any free port (Bind returns it)
  std::string api_key;        // "" = no authentication
  int http_threads = 64;      // threads started for connections (one per open connection)
  int max_http_threads = 4096;  // the pool grows to this many open connections (elastic_thread_pool.h)
  size_t max_body_bytes = size_t(64) << 20;
  bool log_unknown_fields = true;  // warn on stderr about ignored request fields
  bool reject_unknown_fields = false;  // answer 400 instead (vLLM ignores them: the default)
  bool allow_runtime_lora = false;     // the LoRA load/unload routes (needs the registry's LoraRegistry)
};

class HttpServer {
 public:
  // ctx.metrics may be null: the server then keeps its own ServerMetrics.
  HttpServer(ServeContext ctx, ModelRegistry models, HttpServerOptions options);
  ~HttpServer();

  // Binds the listening socket; returns the port (the chosen one when options.port is 0).
  Result<int> Bind();
  // Serves until Stop(); returns once every in-flight request has finished.
  void Listen();
  // Stops accepting connections and new requests (503 while draining); in-flight requests
  // finish. Safe to call from any thread, including a signal-watching one.
  void Stop();
  bool draining() const { return draining_.load(); }

  ServerMetrics& metrics() { return *ctx_.metrics; }

 private:
  void Routes();
  bool Authorized(const httplib::Request& req) const;
  void SendError(httplib::Response& res, const ApiError& e) const;
  void HandleGeneration(const httplib::Request& req, httplib::Response& res, ApiKind kind);
  void HandleTokenize(const httplib::Request& req, httplib::Response& res);
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res);
  void HandleLoadLora(const httplib::Request& req, httplib::Response& res);
  void HandleUnloadLora(const httplib::Request& req, httplib::Response& res);
  std::optional<ApiError> CheckModel(const std::string& requested, ModelTarget* target) const;

  ServeContext ctx_;
  std::unique_ptr<ServerMetrics> own_metrics_;
  ModelRegistry models_;
  HttpServerOptions options_;
  std::unique_ptr<httplib::Server> svr_;
  std::unique_ptr<DeepListenBacklog> backlog_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> in_listen_{false};
};

}  // namespace gk::server
