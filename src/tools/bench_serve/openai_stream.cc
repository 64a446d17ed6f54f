#include "tools/bench_serve/openai_stream.h"

#include "util/guarded_parse.h"

namespace gk::bench {

Result<ApiEndpoint> ParseEndpoint(const std::string& path) {
  if (path == "/v1/completions") return ApiEndpoint::kCompletions;
  if (path == "/v1/chat/completions") return ApiEndpoint::kChatCompletions;
  return Result<ApiEndpoint>::Error(
      StrCat("--endpoint ", path, ": expected /v1/completions or /v1/chat/completions"));
}

const char* EndpointPath(ApiEndpoint endpoint) {
  return endpoint == ApiEndpoint::kCompletions ? "/v1/completions" : "/v1/chat/completions";
}

HttpRequest BuildStreamRequest(const StreamRequestSpec& spec, const SamplingFlags& sampling) {
  nlohmann::json body;
  body["model"] = spec.model;
  if (spec.endpoint == ApiEndpoint::kCompletions) {
    body["prompt"] = spec.prompt;
    body["max_tokens"] = spec.max_tokens;
    body["repetition_penalty"] = 1.0;
  } else {
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", spec.prompt}}});
    body["max_completion_tokens"] = spec.max_tokens;
  }
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (spec.ignore_eos) body["ignore_eos"] = true;
  if (sampling.temperature) body["temperature"] = *sampling.temperature;
  if (sampling.top_p) body["top_p"] = *sampling.top_p;
  if (sampling.top_k) body["top_k"] = *sampling.top_k;
  if (sampling.min_p) body["min_p"] = *sampling.min_p;
  if (sampling.logprobs) body["logprobs"] = *sampling.logprobs;
  for (const auto& [k, v] : sampling.extra_body.items()) body[k] = v;

  HttpRequest r;
  r.method = "POST";
  r.path = EndpointPath(spec.endpoint);
  r.body = body.dump();
  r.headers.emplace_back("Content-Type", "application/json");
  r.headers.emplace_back("Accept", "text/event-stream");
  if (!spec.api_key.empty()) r.headers.emplace_back("Authorization", "Bearer " + spec.api_key);
  if (!spec.request_id.empty()) r.headers.emplace_back("x-request-id", spec.request_id);
  for (const auto& h : spec.headers) r.headers.push_back(h);
  return r;
}

OpenAiStreamHandler::OpenAiStreamHandler(ApiEndpoint endpoint, int dataset_prompt_len) : endpoint_(endpoint) {
  outcome_.prompt_len = dataset_prompt_len;
}

void OpenAiStreamHandler::OnStatus(int status, const std::string& reason, double now) {
  status_ = status;
  status_reason_ = reason;
}

void OpenAiStreamHandler::Fail(std::string error) {
  if (outcome_.error.empty()) outcome_.error = std::move(error);
}

void OpenAiStreamHandler::OnBody(std::string_view bytes, double now) {
  if (status_ != 200) {  // keep the start of an error body for the report
    if (error_body_.size() < 300) error_body_.append(bytes.substr(0, 300 - error_body_.size()));
    return;
  }
  sse_.Feed(bytes, [&](std::string_view data) { OnData(data, now); });
}

void OpenAiStreamHandler::OnData(std::string_view data, double now) {
  ++chunks_;
  if (saw_done_ || !outcome_.error.empty()) return;
  if (data == "[DONE]") {
    saw_done_ = true;
    return;
  }
  const auto parsed = ParseJson(data, "SSE data");
  if (!parsed.ok() || !parsed->is_object()) {
    Fail(StrCat("malformed SSE data (not a JSON object): ", OneLine(data.substr(0, 80))));
    return;
  }
  const nlohmann::json& j = *parsed;
  if (auto err = j.find("error"); err != j.end()) {  // vLLM streams errors as a data message
    Fail(StrCat("error in stream: ", err->dump().substr(0, 200)));
    return;
  }
  auto choices = j.find("choices");
  if (choices != j.end() && choices->is_array() && !choices->empty()) {
    if (!first_chunk_) {
      first_chunk_ = true;
      outcome_.ttft = now - outcome_.start_time;
    } else {
      outcome_.itl.push_back(now - last_chunk_time_);
    }
    last_chunk_time_ = now;
    const nlohmann::json& c0 = (*choices)[0];
    const nlohmann::json* text = nullptr;
    if (endpoint_ == ApiEndpoint::kCompletions) {
      if (auto t = c0.find("text"); t != c0.end()) text = &*t;
    } else if (auto d = c0.find("delta"); d != c0.end() && d->is_object()) {
      if (auto t = d->find("content"); t != d->end()) text = &*t;
    }
    if (text && text->is_string()) outcome_.generated_text += text->get<std::string>();
  }
  if (auto usage = j.find("usage"); usage != j.end() && usage->is_object()) {
    if (auto ct = usage->find("completion_tokens"); ct != usage->end() && ct->is_number_integer()) {
      outcome_.output_tokens = ct->get<int>();
    }
    if (auto pt = usage->find("prompt_tokens"); pt != usage->end() && pt->is_number_integer()) {
      outcome_.prompt_len = pt->get<int>();
    }
  }
}

void OpenAiStreamHandler::OnDone(const std::string& error, double now) {
  done_ = true;
  if (!error.empty()) {
    Fail(error);
  } else if (status_ != 200) {
    Fail(StrCat("HTTP ", status_, " ", status_reason_, error_body_.empty() ? "" : ": ", error_body_));
  } else if (!saw_done_) {
    Fail(sse_.pending() ? "the stream ended inside an SSE event" : "the stream ended without data: [DONE]");
  }
  if (outcome_.error.empty() && !first_chunk_) Fail("Never received a valid chunk to calculate TTFT.");
  outcome_.success = outcome_.error.empty();
  outcome_.latency = first_chunk_ ? last_chunk_time_ - outcome_.start_time : 0;
  if (!outcome_.success) {
    outcome_.itl.clear();
    outcome_.ttft = 0;
    outcome_.latency = 0;
  }
  if (on_done_) on_done_();
}

}  // namespace gk::bench
