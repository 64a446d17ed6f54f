#include "server/http_server.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <thread>

#include <httplib.h>

#include "server/connection_probe.h"
#include "server/elastic_thread_pool.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "util/guarded_parse.h"

namespace gk::server {
namespace {

constexpr const char kVersion[] = "0.1.0";
constexpr const char kJson[] = "application/json";

}  // namespace

HttpServer::HttpServer(ServeContext ctx, ModelRegistry models, HttpServerOptions options)
    : ctx_(std::move(ctx)), models_(std::move(models)), options_(std::move(options)),
      svr_(std::make_unique<httplib::Server>()) {
  if (!ctx_.metrics) {
    own_metrics_ = std::make_unique<ServerMetrics>(models_.base_name());
    ctx_.metrics = own_metrics_.get();
  }
  // httplib 0.11.4 writes with send(..., 0): a client that disconnects would raise SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  const int threads = std::max(1, options_.http_threads), max_threads = std::max(threads, options_.max_http_threads);
  svr_->new_task_queue = [threads, max_threads] { return new ElasticThreadPool(threads, max_threads); };
  svr_->set_payload_max_length(options_.max_body_bytes);
  svr_->set_keep_alive_max_count(1000);
  svr_->set_tcp_nodelay(true);
  backlog_ = std::make_unique<DeepListenBacklog>(*svr_);
  Routes();
}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::Bind() {
  int port = options_.port;
  if (port == 0) {
    port = svr_->bind_to_any_port(options_.host);
    if (port < 0) return Result<int>::Error(StrCat("cannot bind ", options_.host, " to a free port"));
  } else if (!svr_->bind_to_port(options_.host, port)) {
    return Result<int>::Error(StrCat("cannot listen on ", options_.host, ":", port,
                                     " (address in use or not local?); pick another --port or --host"));
  }
  backlog_->Apply();
  return port;
}

void HttpServer::Listen() {
  in_listen_ = true;
  if (!draining_) svr_->listen_after_bind();
  in_listen_ = false;
}

void HttpServer::Stop() {
  draining_ = true;
  // httplib's stop() does nothing before listen_after_bind has started running: wait for that
  // (Listen checks draining_ after raising in_listen_, so one of the two always sees the other).
  while (in_listen_) {
    if (svr_->is_running()) {
      svr_->stop();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool HttpServer::Authorized(const httplib::Request& req) const {
  if (options_.api_key.empty()) return true;
  return req.get_header_value("Authorization") == "Bearer " + options_.api_key;
}

void HttpServer::SendError(httplib::Response& res, const ApiError& e) const {
  res.status = e.status;
  res.set_content(e.Body(), kJson);
}

std::optional<ApiError> HttpServer::CheckModel(const std::string& requested, ModelTarget* target) const {
  auto t = models_.Resolve(requested);
  if (!t) return ApiError::NotFound(StrCat("The model `", requested, "` does not exist."));
  *target = *t;
  return std::nullopt;
}

void HttpServer::Routes() {
  using httplib::Request;
  using httplib::Response;
  using httplib::Server;

  svr_->set_pre_routing_handler([this](const Request& req, Response& res) {
    const std::string& p = req.path;
    const bool open = p == "/health" || p == "/metrics" || p == "/version" || p == "/ping";
    if (open) return Server::HandlerResponse::Unhandled;
    if (!Authorized(req)) {
      SendError(res, ApiError::Unauthorized());
      return Server::HandlerResponse::Handled;
    }
    if (draining_) {
      SendError(res, ApiError::Unavailable("The server is shutting down."));
      return Server::HandlerResponse::Handled;
    }
    return Server::HandlerResponse::Unhandled;
  });
  // Statuses without a body of ours (unknown route, body too large, ...) get an error object too.
  svr_->set_error_handler([this](const Request& req, Response& res) {
    if (!res.body.empty() || res.has_header("Content-Type") || req.path == "/health") return;
    ApiError e{res.status, res.status == 404 ? "NotFoundError" : "invalid_request_error",
               res.status == 404 ? StrCat("Not found: ", req.method, " ", req.path)
                                 : StrCat("HTTP error ", res.status), ""};
    if (res.status == 413) e.message = "The request body is too large.";
    SendError(res, e);
  });
  svr_->set_exception_handler([this](const Request&, Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    SendError(res, ApiError::Internal(StrCat("Internal server error: ", what)));
  });

  svr_->Get("/health", [this](const Request&, Response& res) { res.status = ctx_.engine->alive() ? 200 : 503; });
  svr_->Get("/ping", [this](const Request&, Response& res) { res.status = ctx_.engine->alive() ? 200 : 503; });
  svr_->Get("/version", [](const Request&, Response& res) {
    res.set_content(DumpJson({{"version", kVersion}}), kJson);
  });
  svr_->Get("/metrics", [this](const Request&, Response& res) {
    res.set_content(ctx_.metrics->Render(ctx_.engine->Stats(), ctx_.engine->capacity()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  svr_->Get("/v1/models", [this](const Request&, Response& res) {
    res.set_content(DumpJson(ModelList(models_.Cards())), kJson);
  });
  svr_->Post("/v1/completions",
             [this](const Request& req, Response& res) { HandleGeneration(req, res, ApiKind::kCompletion); });
  svr_->Post("/v1/chat/completions",
             [this](const Request& req, Response& res) { HandleGeneration(req, res, ApiKind::kChat); });
  svr_->Post("/tokenize", [this](const Request& req, Response& res) { HandleTokenize(req, res); });
  svr_->Post("/detokenize", [this](const Request& req, Response& res) { HandleDetokenize(req, res); });
  if (options_.allow_runtime_lora && models_.loras() != nullptr) {
    svr_->Post("/v1/load_lora_adapter", [this](const Request& req, Response& res) { HandleLoadLora(req, res); });
    svr_->Post("/v1/unload_lora_adapter", [this](const Request& req, Response& res) { HandleUnloadLora(req, res); });
  }
}

void HttpServer::HandleGeneration(const httplib::Request& req, httplib::Response& res, ApiKind kind) {
  const auto arrival = RequestSession::Clock::now();
  OpenAIRequest r;
  if (auto e = ParseOpenAIRequest(req.body, kind, &r)) return SendError(res, *e);
  if (!r.ignored_fields.empty()) {
    std::string names;
    for (const std::string& f : r.ignored_fields) names += (names.empty() ? "" : ", ") + f;
    if (options_.reject_unknown_fields) {
      return SendError(res, ApiError::BadRequest(StrCat("Unknown request field(s): ", names), r.ignored_fields[0]));
    }
    if (options_.log_unknown_fields) {
      std::fprintf(stderr, "gemmakit serve: warning: ignoring unknown request field(s): %s\n", names.c_str());
    }
  }
  ModelTarget target;
  if (auto e = CheckModel(r.model, &target)) return SendError(res, *e);
  EngineLora lora;
  if (target.adapter) {  // reads the adapter again if it was evicted (on this thread, not the engine's)
    auto acquired = models_.loras()->Acquire(target.name);
    if (!acquired.ok()) {
      return SendError(res, models_.loras()->Has(target.name) ? ApiError::Internal(acquired.message())
                                                             : ApiError::NotFound(acquired.message()));
    }
    lora = std::move(*acquired);
  }
  if (kind == ApiKind::kChat) ApplyDefaultKwargs(ctx_.default_chat_template_kwargs, &r.chat);
  auto session = std::make_shared<RequestSession>(ctx_, std::move(r), target.name, arrival, std::move(lora));
  if (auto e = session->Start()) return SendError(res, *e);
  // The socket of this connection, to notice a client that hangs up while we wait.
  auto probe = std::make_shared<ConnectionProbe>(req.local_addr, req.local_port, req.remote_addr, req.remote_port);

  if (!session->request().stream) {
    RequestSession::Outcome out = session->Complete([&] { return probe->PeerClosed(); });
    if (out.client_gone) {
      res.status = 499;  // nginx's "client closed request"; nobody reads it
      return;
    }
    if (out.error) return SendError(res, *out.error);
    res.set_content(DumpJson(out.body), kJson);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [session, probe](size_t, httplib::DataSink& sink) {
        const bool ok = session->Stream([&](const std::string& s) { return sink.write(s.data(), s.size()); },
                                        [&] { return probe->PeerClosed(); });
        if (ok) sink.done();
        return ok;
      },
      // Runs when the response ends for any reason (also when the provider never ran).
      [session](bool) { session->AbortAll(); });
}

void HttpServer::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  TokenizeRequest r;
  if (auto e = ParseTokenizeRequest(req.body, &r)) return SendError(res, *e);
  ModelTarget target;
  if (auto e = CheckModel(r.model, &target)) return SendError(res, *e);
  std::vector<int32_t> tokens;
  if (r.is_chat) {
    ApplyDefaultKwargs(ctx_.default_chat_template_kwargs, &r.chat);
    if (auto e = ApplyChatTemplate(r.chat, *ctx_.tokenizer, *ctx_.config, ctx_.chat_format, &tokens)) {
      return SendError(res, *e);
    }
  } else {
    if (r.add_special_tokens) tokens.push_back(ctx_.config->bos_token_id);
    for (int32_t id : ctx_.tokenizer->Encode(r.prompt)) tokens.push_back(id);
  }
  json body = {{"count", tokens.size()},
               {"max_model_len", ctx_.max_model_len},
               {"tokens", tokens},
               {"token_strs", nullptr}};
  res.set_content(DumpJson(body), kJson);
}

void HttpServer::HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
  DetokenizeRequest r;
  if (auto e = ParseDetokenizeRequest(req.body, &r)) return SendError(res, *e);
  ModelTarget target;
  if (auto e = CheckModel(r.model, &target)) return SendError(res, *e);
  for (int32_t id : r.tokens) {
    if (id >= ctx_.config->vocab_size) {
      return SendError(res, ApiError::BadRequest(
                                StrCat("Token id ", id, " is out of vocabulary (", ctx_.config->vocab_size, " tokens)."),
                                "tokens"));
    }
  }
  res.set_content(DumpJson({{"prompt", ctx_.tokenizer->Decode(r.tokens)}}), kJson);
}

namespace {

// A JSON object body's string field, "" when absent or not a string.
std::string StringField(const nlohmann::json& body, const char* key) {
  return body.is_object() && body.contains(key) && body[key].is_string() ? body[key].get<std::string>() : "";
}

}  // namespace

// vLLM's /v1/load_lora_adapter: {"lora_name", "lora_path"}; 200 with a plain-text line.
void HttpServer::HandleLoadLora(const httplib::Request& req, httplib::Response& res) {
  auto body = ParseJson(req.body, "the request body");
  if (!body.ok()) return SendError(res, ApiError::BadRequest(body.message()));
  const std::string name = StringField(*body, "lora_name"), path = StringField(*body, "lora_path");
  if (name.empty() || path.empty()) {
    return SendError(res, ApiError::BadRequest("Both 'lora_name' and 'lora_path' must be provided."));
  }
  if (models_.IsBaseName(name)) {
    return SendError(res, ApiError::BadRequest(StrCat("'", name, "' is the name of the base model."), "lora_name"));
  }
  LoraRegistry& loras = *models_.loras();
  if (loras.Has(name)) {
    return SendError(res, ApiError::BadRequest(StrCat("The lora adapter '", name, "' has already been loaded.")));
  }
  // As --lora: "PATH:alpha=A" gives a Qwix item's alpha.
  auto where = ParseLoraLocation(path);
  if (!where.ok()) return SendError(res, ApiError::BadRequest(where.message(), "lora_path"));
  if (Status st = loras.Add(name, *where, /*confined=*/true); !st.ok()) {
    return SendError(res, ApiError::BadRequest(st.message(), "lora_path"));
  }
  std::fprintf(stderr, "gemmakit serve: loaded LoRA adapter '%s' from %s\n", name.c_str(), path.c_str());
  res.set_content(StrCat("Success: LoRA adapter '", name, "' added successfully."), "text/plain");
}

// vLLM's /v1/unload_lora_adapter: {"lora_name"}. Requests already running through it finish.
void HttpServer::HandleUnloadLora(const httplib::Request& req, httplib::Response& res) {
  auto body = ParseJson(req.body, "the request body");
  if (!body.ok()) return SendError(res, ApiError::BadRequest(body.message()));
  const std::string name = StringField(*body, "lora_name");
  if (name.empty()) {
    return SendError(res, ApiError::BadRequest("'lora_name' needs to be provided to unload a LoRA adapter."));
  }
  if (!models_.loras()->Remove(name)) {
    return SendError(res, ApiError::NotFound(StrCat("The lora adapter '", name, "' cannot be found.")));
  }
  std::fprintf(stderr, "gemmakit serve: unloaded LoRA adapter '%s'\n", name.c_str());
  res.set_content(StrCat("Success: LoRA adapter '", name, "' removed successfully."), "text/plain");
}

}  // namespace gk::server
