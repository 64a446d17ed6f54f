#include "server/request_session.h"

#include <algorithm>
#include <climits>
#include <ctime>
#include <random>

#include "util/result.h"

namespace gk::server {
namespace {

constexpr std::chrono::milliseconds kPoll{50};

double Seconds(RequestSession::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

RequestSession::RequestSession(const ServeContext& ctx, OpenAIRequest request, std::string model_name,
                               Clock::time_point arrival, EngineLora lora)
    : ctx_(ctx),
      request_(std::move(request)),
      model_name_(std::move(model_name)),
      lora_(std::move(lora)),
      arrival_(arrival),
      id_(NewRequestId(request_.kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-")),
      created_(int64_t(std::time(nullptr))),
      channel_(std::make_shared<Channel>()) {}

RequestSession::~RequestSession() { AbortUnfinished(/*count=*/true); }

std::optional<ApiError> RequestSession::Start() {
  if (auto e = BuildPrompts(request_, *ctx_.tokenizer, *ctx_.config, ctx_.chat_format, &prompts_)) return e;
  std::vector<int64_t> max_tokens(prompts_.size());
  for (size_t p = 0; p < prompts_.size(); ++p) {
    if (auto e = CheckContextLength(request_, int64_t(prompts_[p].tokens.size()), ctx_.max_model_len,
                                    &max_tokens[p])) {
      return e;
    }
  }
  std::vector<int32_t> stop_ids = request_.stop_token_ids;
  if (!request_.ignore_eos) stop_ids.insert(stop_ids.end(), ctx_.eos_ids.begin(), ctx_.eos_ids.end());
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());

  const int n = request_.n;
  choices_.resize(prompts_.size() * size_t(n));
  std::random_device rd;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    for (int j = 0; j < n; ++j) {
      Choice& c = choices_[p * size_t(n) + size_t(j)];
      c.index = int(p) * n + j;
      c.prompt = int(p);
      const bool parse = request_.kind == ApiKind::kChat &&
                         (ctx_.reasoning_parser || (ctx_.tool_call_parser && request_.parse_tool_calls));
      // The parser needs the markers (special tokens) in the decoded text; it removes them.
      c.text = std::make_unique<TextStream>(*ctx_.tokenizer, request_.skip_special_tokens && !parse, request_.stop,
                                            request_.include_stop_str_in_output);
      if (parse) {
        Gemma4OutputOptions po;
        po.reasoning = ctx_.reasoning_parser;
        po.tool_calls = ctx_.tool_call_parser && request_.parse_tool_calls;
        c.parser = std::make_unique<Gemma4OutputStream>(po);
      }
    }
  }
  // All choices go to the engine at once: it schedules them in the same step
  // (ServeEngine::SubmitGroup), so a seeded request gives the same text however busy the
  // machine is.
  std::vector<EngineRequest> requests;
  std::vector<OutputCallback> callbacks;
  for (Choice& c : choices_) {
    const int j = c.index % n;
    EngineRequest er;
    er.prompt = prompts_[size_t(c.prompt)].tokens;
    er.sampling.temperature = float(request_.temperature);
    er.sampling.top_k = request_.top_k;
    er.sampling.top_p = float(request_.top_p);
    er.sampling.seed = request_.seed ? uint64_t(*request_.seed) + uint64_t(j)
                                     : (uint64_t(rd()) << 32) ^ uint64_t(rd());
    er.max_tokens = int(std::min<int64_t>(max_tokens[size_t(c.prompt)], INT_MAX));
    er.min_tokens = int(std::min<int64_t>(request_.min_tokens, INT_MAX));
    er.stop_token_ids = stop_ids;
    er.logprobs = request_.logprobs;
    er.cache_salt = request_.cache_salt;
    er.lora = lora_;
    std::shared_ptr<Channel> ch = channel_;
    ServerMetrics* metrics = ctx_.metrics;
    const int index = int(&c - choices_.data());
    // Runs on the engine thread: copy, queue, notify; nothing that blocks.
    callbacks.push_back([ch, metrics, index](const RequestOutput& out) {
      const Clock::time_point at = Clock::now();
      if (out.finish != FinishReason::kNone && metrics) metrics->ObserveQueue(out.queued_seconds);
      {
        std::lock_guard<std::mutex> lock(ch->mu);
        ch->events.push_back({index, out, at});
      }
      ch->cv.notify_one();
    });
    requests.push_back(std::move(er));
  }
  auto ids = ctx_.engine->SubmitGroup(std::move(requests), std::move(callbacks));
  if (!ids.ok()) {
    const std::string& m = ids.message();
    if (m.rfind("queue full", 0) == 0) return ApiError::Unavailable(StrCat("The server is overloaded: ", m));
    if (m.find("shutting down") != std::string::npos || !ctx_.engine->alive()) {
      return ApiError::Unavailable(StrCat("The server is shutting down: ", m));
    }
    return ApiError::BadRequest(m);
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices_[i].id = (*ids)[i];
    choices_[i].submitted = true;
  }
  return std::nullopt;
}

void RequestSession::Take(std::deque<Event>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(channel_->mu);
  if (channel_->events.empty()) channel_->cv.wait_for(lock, timeout, [&] { return !channel_->events.empty(); });
  out->swap(channel_->events);
}

bool RequestSession::AllDone() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.done; });
}

void RequestSession::Finish(Choice& c, const std::string& reason, Clock::time_point at) {
  c.done = true;
  c.finish = reason;
  if (!ctx_.metrics) return;
  ctx_.metrics->CountFinished(reason);
  if (reason == "abort") return;
  const double e2e = Seconds(at - arrival_);
  ctx_.metrics->ObserveE2e(e2e);
  if (c.completion_tokens > 1 && c.got_first) {
    ctx_.metrics->ObserveTpot(Seconds(at - c.first_at) / double(c.completion_tokens - 1));
  }
}

void RequestSession::Route(Choice& c, const std::string& text, bool final, Delta* d) const {
  if (!c.parser) {
    d->text += text;
    return;
  }
  Gemma4Output o = c.parser->Add(text);
  if (final) {
    Gemma4Output rest = c.parser->Finish();
    o.reasoning += rest.reasoning;
    o.content += rest.content;
    for (Gemma4ToolCall& t : rest.tool_calls) o.tool_calls.push_back(std::move(t));
  }
  d->text += o.content;
  if (request_.include_reasoning) d->reasoning += o.reasoning;
  for (Gemma4ToolCall& t : o.tool_calls) d->tool_calls.push_back(std::move(t));
}

RequestSession::Delta RequestSession::Apply(Choice& c, const RequestOutput& out, Clock::time_point at) {
  Delta d;
  if (c.done) return d;  // e.g. the abort that follows a stop string
  c.cached_tokens = std::max(c.cached_tokens, out.cached_prompt_tokens);
  if (!out.tokens.empty() && ctx_.metrics) {
    if (!c.got_first) {
      ctx_.metrics->ObserveTtft(Seconds(at - arrival_));
    } else {
      ctx_.metrics->ObserveItl(Seconds(at - c.last_at));
    }
  }
  if (!out.tokens.empty()) {
    if (!c.got_first) c.first_at = at;
    c.got_first = true;
    c.last_at = at;
  }
  std::string text;
  std::string finish;  // "" while the choice goes on
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    const int32_t t = out.tokens[i];
    ++c.completion_tokens;
    text += c.text->Add(t);
    if (request_.logprobs >= 0 && i < out.logprobs.size()) {
      const TokenLogprob& lp = out.logprobs[i];
      LogprobEntry e;
      e.token = ctx_.tokenizer->Decode(std::span<const int32_t>(&t, 1));
      e.logprob = lp.logprob;
      e.text_offset = int64_t(c.text->decoded_before_last());
      for (const auto& [id, v] : lp.top) {
        e.top.emplace_back(ctx_.tokenizer->Decode(std::span<const int32_t>(&id, 1)), v);
      }
      d.logprobs.push_back(std::move(e));
    }
    if (c.text->stopped()) {
      ctx_.engine->Abort(c.id);  // a stop string ends the request; its blocks are freed
      c.stop_reason = c.text->matched_stop();
      finish = "stop";
      break;
    }
  }
  if (finish.empty() && out.finish != FinishReason::kNone) {
    text += c.text->Finish();
    if (out.finish == FinishReason::kStop && out.stop_token >= 0 &&
        std::find(request_.stop_token_ids.begin(), request_.stop_token_ids.end(), out.stop_token) !=
            request_.stop_token_ids.end()) {
      c.stop_reason = out.stop_token;
    }
    finish = FinishReasonName(out.finish);
  }
  Route(c, text, !finish.empty(), &d);
  c.tool_calls_seen += int(d.tool_calls.size());
  if (!finish.empty()) {
    if (finish == "stop" && c.tool_calls_seen > 0) finish = "tool_calls";  // as vLLM reports a call
    Finish(c, finish, at);
    d.finished = true;
  }
  d.any = !d.text.empty() || !d.reasoning.empty() || !d.tool_calls.empty() || !d.logprobs.empty() || d.finished;
  return d;
}

void RequestSession::AbortUnfinished(bool count) {
  for (Choice& c : choices_) {
    if (c.done) continue;
    if (c.submitted) ctx_.engine->Abort(c.id);
    c.done = true;
    c.finish = "abort";
    if (count && c.submitted && ctx_.metrics) ctx_.metrics->CountFinished("abort");
  }
}

void RequestSession::AbortAll() { AbortUnfinished(/*count=*/true); }

Usage RequestSession::TotalUsage() const {
  Usage u;
  const size_t n = size_t(request_.n);
  for (size_t p = 0; p < prompts_.size(); ++p) {
    u.prompt_tokens += int64_t(prompts_[p].tokens.size());
    int64_t cached = 0;
    for (size_t j = 0; j < n; ++j) {
      const Choice& c = choices_[p * n + j];
      u.completion_tokens += c.completion_tokens;
      cached = std::max(cached, c.cached_tokens);
    }
    u.cached_tokens += cached;
  }
  return u;
}

json RequestSession::ChoiceLogprobs(const std::vector<LogprobEntry>& entries) const {
  if (request_.logprobs < 0) return nullptr;
  return request_.kind == ApiKind::kChat ? ChatLogprobs(entries) : CompletionLogprobs(entries);
}

ChoiceOut RequestSession::MakeOut(const Choice& c, std::string text, const std::vector<LogprobEntry>* lps) const {
  ChoiceOut o;
  o.index = c.index;
  o.text = std::move(text);
  o.logprobs = lps ? ChoiceLogprobs(*lps) : json(nullptr);
  o.finish_reason = c.done ? c.finish : "";
  o.stop_reason = c.done ? c.stop_reason : json(nullptr);
  return o;
}

bool RequestSession::EngineDead() {
  // The engine thread is gone and no output is pending: give queued callbacks a few polls.
  if (ctx_.engine->alive()) {
    dead_polls_ = 0;
    return false;
  }
  return ++dead_polls_ > 3;
}

RequestSession::Outcome RequestSession::Complete(const Gone& gone) {
  Outcome result;
  std::deque<Event> events;
  while (!AllDone()) {
    Take(&events, kPoll);
    if (gone && gone()) {
      AbortAll();
      result.client_gone = true;
      return result;
    }
    if (events.empty()) {
      if (EngineDead()) {
        AbortUnfinished(/*count=*/true);
        result.error = ApiError::Internal("The engine stopped while the request was running.");
        return result;
      }
      continue;
    }
    for (const Event& ev : events) {
      Choice& c = choices_[size_t(ev.choice)];
      Delta d = Apply(c, ev.out, ev.at);
      c.all_text += d.text;
      c.all_reasoning += d.reasoning;
      for (Gemma4ToolCall& t : d.tool_calls) c.all_tool_calls.push_back(std::move(t));
      for (LogprobEntry& e : d.logprobs) c.all_logprobs.push_back(std::move(e));
    }
    events.clear();
  }
  std::vector<ChoiceOut> outs;
  for (const Choice& c : choices_) {
    std::string text = c.all_text;
    if (request_.echo) text = prompts_[size_t(c.prompt)].echo_text + text;
    ChoiceOut o = MakeOut(c, std::move(text), &c.all_logprobs);
    o.reasoning = c.all_reasoning;
    o.tool_calls = c.all_tool_calls;
    outs.push_back(std::move(o));
  }
  const Usage usage = TotalUsage();
  result.body = request_.kind == ApiKind::kChat ? ChatResponse(id_, created_, model_name_, outs, usage)
                                                : CompletionResponse(id_, created_, model_name_, outs, usage);
  return result;
}

bool RequestSession::Stream(const std::function<bool(const std::string&)>& write, const Gone& gone) {
  const bool chat = request_.kind == ApiKind::kChat;
  auto usage_of = [&](const Choice& c) -> std::optional<json> {
    if (request_.continuous_usage_stats) {
      Usage u;
      u.prompt_tokens = int64_t(prompts_[size_t(c.prompt)].tokens.size());
      u.completion_tokens = c.completion_tokens;
      u.cached_tokens = c.cached_tokens;
      return u.ToJson();
    }
    if (request_.include_usage) return json(nullptr);
    return std::nullopt;
  };
  auto send = [&](const std::string& event) {
    if (write(event)) return true;
    AbortAll();
    return false;
  };
  std::deque<Event> events;
  while (!AllDone()) {
    Take(&events, kPoll);
    if (events.empty()) {
      if (gone && gone()) {
        AbortAll();
        return false;
      }
      if (EngineDead()) {
        AbortUnfinished(/*count=*/true);
        send(SseEvent(ApiError::Internal("The engine stopped while the request was running.").ToJson()));
        return send(kSseDone);
      }
      continue;
    }
    for (const Event& ev : events) {
      Choice& c = choices_[size_t(ev.choice)];
      Delta d = Apply(c, ev.out, ev.at);
      if (!d.any) continue;
      std::string text = std::move(d.text);
      ChoiceOut o = MakeOut(c, "", request_.logprobs >= 0 ? &d.logprobs : nullptr);
      o.reasoning = std::move(d.reasoning);
      o.tool_call_index = c.tool_calls_seen - int(d.tool_calls.size());
      o.tool_calls = std::move(d.tool_calls);
      if (!c.started_stream) {
        // The first chunk of a choice: only now, with its first output (or its end).
        if (text.empty() && o.reasoning.empty() && o.tool_calls.empty() && d.logprobs.empty() && !d.finished) continue;
        c.started_stream = true;
        o.role = chat;
        if (request_.echo) text = prompts_[size_t(c.prompt)].echo_text + text;
      }
      o.text = std::move(text);
      const json chunk = chat ? ChatChunk(id_, created_, model_name_, o, usage_of(c))
                              : CompletionChunk(id_, created_, model_name_, o, usage_of(c));
      if (!send(SseEvent(chunk))) return false;
    }
    events.clear();
    if (gone && gone()) {
      AbortAll();
      return false;
    }
  }
  if (request_.include_usage || request_.continuous_usage_stats) {
    if (!send(SseEvent(UsageChunk(chat, id_, created_, model_name_, TotalUsage())))) return false;
  }
  return send(kSseDone);
}

}  // namespace gk::server
