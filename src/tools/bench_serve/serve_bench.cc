#include "tools/bench_serve/serve_bench.h"

#include <cmath>
#include <ctime>
#include <filesystem>
#include <random>
#include <thread>

#include "tools/bench_serve/datasets.h"
#include "tools/bench_serve/result_report.h"
#include "util/atomic_file.h"
#include "util/clock.h"
#include "util/guarded_parse.h"
#include "util/host_info.h"

namespace gk::bench {

namespace {

// Collects a whole (small) response body: /v1/models.
class BodyHandler : public HttpResponseHandler {
 public:
  void OnStatus(int status, const std::string&, double) override { status_ = status; }
  void OnBody(std::string_view bytes, double) override { body_.append(bytes); }
  void OnDone(const std::string& error, double) override {
    error_ = error;
    done_ = true;
  }
  bool done_ = false;
  int status_ = 0;
  std::string body_, error_;
};

Result<nlohmann::json> GetJson(const BaseUrl& url, const std::string& path, const std::string& api_key,
                               double timeout_s) {
  GK_ASSIGN_OR_RETURN(std::unique_ptr<HttpClient> client, HttpClient::Create(url, timeout_s));
  const double deadline = NowSeconds() + timeout_s;
  for (;;) {
    HttpRequest req;
    req.method = "GET";
    req.path = path;
    if (!api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + api_key);
    BodyHandler h;
    client->Start(req, &h);
    while (!h.done_) client->Poll(0.05);
    if (h.error_.starts_with("cannot connect") && NowSeconds() < deadline) {  // server still starting
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    if (!h.error_.empty()) return Result<nlohmann::json>::Error(StrCat("GET ", url.text, path, ": ", h.error_));
    if (h.status_ != 200) {
      return Result<nlohmann::json>::Error(
          StrCat("GET ", url.text, path, ": HTTP ", h.status_, ": ", h.body_.substr(0, 200)));
    }
    return ParseJson(h.body_, StrCat("GET ", url.text, path));
  }
}

std::string DateText() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

nlohmann::ordered_json ClientMachine() {
  return {{"cpu", CpuModelName()}, {"cores", HardwareThreads()}};
}

Result<Tokenizer> LoadTokenizerFrom(const std::string& path) {
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec) ? path + "/tokenizer.json" : path;
  auto t = Tokenizer::Load(file);
  if (!t.ok()) return t.status().Wrap("--tokenizer");
  return t;
}

Status Validate(const ServeBenchOptions& o) {
  if (o.num_prompts < 1) return Status::Error("--num-prompts must be at least 1");
  if (!(o.burstiness > 0)) return Status::Error("--burstiness must be > 0");
  if (o.max_concurrency < 0) return Status::Error("--max-concurrency must be >= 0");
  if (o.request_rates.empty()) return Status::Error("--request-rate: give at least one rate");
  for (const auto& m : o.percentile_metrics) {
    if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el" && m != "client_queue_time" &&
        m != "e2el_including_client_queue") {
      return Status::Error(StrCat("--percentile-metrics: unknown metric '", m, "' (ttft, tpot, itl, e2el, ",
                                  "client_queue_time, e2el_including_client_queue)"));
    }
  }
  for (double p : o.metric_percentiles) {
    if (!(p > 0 && p < 100)) return Status::Error(StrCat("--metric-percentiles: ", p, " is not in (0, 100)"));
  }
  if (o.dataset_name != "random" && o.dataset_name != "jsonl") {
    return Status::Error(StrCat("--dataset-name ", o.dataset_name, ": expected random or jsonl"));
  }
  if (o.dataset_name == "jsonl" && o.dataset_path.empty()) return Status::Error("--dataset-name jsonl needs --dataset-path");
  if (o.dataset_name == "jsonl" && !o.input_lens.empty()) {
    return Status::Error("--input-lens sweeps random prompts; a jsonl dataset has its own lengths");
  }
  return Status::Ok();
}

std::string DefaultRequestIdPrefix() {
  std::random_device rd;
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", rd());
  return StrCat("bench-", buf, "-");
}

// With several points and a fixed --result-filename, each point's file gets its coordinates.
std::string PointFileName(const ServeBenchOptions& o, const PointSetup& setup, int input_len, bool many) {
  if (o.result_filename.empty()) {
    std::string name = ResultFileName(setup);
    if (many && o.input_lens.size() > 1) name.insert(name.find("qps") + 3, StrCat("-in", input_len));
    return name;
  }
  if (!many) return o.result_filename;
  std::string stem = o.result_filename, ext;
  if (stem.ends_with(".json")) {
    stem.resize(stem.size() - 5);
    ext = ".json";
  }
  return StrCat(stem, "-in", input_len, "-", RateText(setup.request_rate), "qps", ext);
}

Status SaveJson(const std::string& dir, const std::string& name, const nlohmann::ordered_json& j, std::string* path) {
  *path = dir.empty() ? name : dir + "/" + name;
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::Error(StrCat("--result-dir ", dir, ": ", ec.message()));
  }
  return WriteFileAtomic(*path, j.dump(2) + "\n").Wrap("writing the result");
}

}  // namespace

Result<std::vector<double>> ParseRates(const std::string& text) {
  std::vector<double> rates;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string word = text.substr(pos, comma - pos);
    if (word == "inf") {
      rates.push_back(1.0 / 0.0);
    } else {
      char* end = nullptr;
      const double r = std::strtod(word.c_str(), &end);
      if (word.empty() || *end != '\0' || !(r > 0) || std::isinf(r)) {
        return Result<std::vector<double>>::Error(StrCat("--request-rate: '", word, "' is not a rate > 0 or inf"));
      }
      rates.push_back(r);
    }
    pos = comma + 1;
  }
  return rates;
}

Result<ServeBenchResult> RunServeBench(const ServeBenchOptions& o, const std::function<void(const std::string&)>& print) {
  GK_RETURN_IF_ERROR(Validate(o));
  GK_ASSIGN_OR_RETURN(BaseUrl url, ParseBaseUrl(o.base_url));
  GK_ASSIGN_OR_RETURN(ApiEndpoint endpoint, ParseEndpoint(o.endpoint));
  GK_ASSIGN_OR_RETURN(GoodputSlo goodput, ParseGoodput(o.goodput));

  // The model: as given, or the server's first. /v1/models also says whose server it is.
  // Waits for a server that is still starting as long as the ready check would (30 s when that is skipped).
  const double wait_s = o.ready_check_timeout_s > 0 ? o.ready_check_timeout_s : 30;
  GK_ASSIGN_OR_RETURN(nlohmann::json models, GetJson(url, "/v1/models", o.api_key, wait_s));
  std::string model = o.model, owned_by;
  if (models.contains("data") && models["data"].is_array() && !models["data"].empty()) {
    const auto& first = models["data"][0];
    if (model.empty() && first.contains("id") && first["id"].is_string()) model = first["id"].get<std::string>();
    if (first.contains("owned_by") && first["owned_by"].is_string()) owned_by = first["owned_by"].get<std::string>();
  }
  if (model.empty()) return Result<ServeBenchResult>::Error(StrCat(url.text, "/v1/models lists no model; pass --model"));

  std::optional<Tokenizer> tokenizer;
  std::string tokenizer_id = o.tokenizer;
  if (tokenizer_id.empty() && std::filesystem::is_directory(o.model)) tokenizer_id = o.model;
  if (!tokenizer_id.empty()) {
    GK_ASSIGN_OR_RETURN(Tokenizer t, LoadTokenizerFrom(tokenizer_id));
    tokenizer.emplace(std::move(t));
  } else if (o.dataset_name == "random") {
    return Result<ServeBenchResult>::Error(
        "--dataset-name random needs the model's tokenizer: pass --tokenizer DIR (a directory with tokenizer.json)");
  }

  const bool ignore_eos = o.ignore_eos || o.dataset_name == "random";
  std::vector<int> lens = o.input_lens.empty() ? std::vector<int>{o.input_len} : o.input_lens;
  const bool many = lens.size() * o.request_rates.size() > 1;
  const std::string date = DateText();
  const std::string id_prefix = o.request_id_prefix.empty() ? DefaultRequestIdPrefix() : o.request_id_prefix;
  std::vector<SampleRequest> jsonl;
  if (o.dataset_name == "jsonl") {
    GK_ASSIGN_OR_RETURN(jsonl, LoadJsonl(o.dataset_path, o.output_len, o.num_prompts, tokenizer ? &*tokenizer : nullptr));
    lens = {0};  // one "length": the file's own
  }
  if (o.sampling.temperature == std::nullopt) {
    print("WARNING: --temperature not set: the server's default applies (vLLM >= PR #32723 behaves the same; "
          "the reference case used --temperature 0)\n");
  }

  ServeBenchResult result;
  int k = 0;
  for (int len : lens) {
    for (double rate : o.request_rates) {
      const uint64_t seed = o.seed + static_cast<uint64_t>(k++);
      std::vector<SampleRequest> requests;
      if (o.dataset_name == "random") {
        RandomDatasetOptions ro{o.num_prompts, len, o.output_len, o.range_ratio, o.prefix_len, seed};
        GK_ASSIGN_OR_RETURN(requests, SampleRandom(ro, *tokenizer));
      } else {
        requests = jsonl;
      }
      print(StrCat("Traffic request rate: ", RateText(rate), "\nBurstiness factor: ", RateText(o.burstiness),
                   o.burstiness == 1.0 ? " (Poisson process)" : " (Gamma distribution)",
                   "\nMaximum request concurrency: ", o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : "None",
                   o.dataset_name == "random" ? StrCat("\nInput length: ", len, ", output length: ", o.output_len) : "",
                   "\n"));
      RunOptions ro;
      ro.url = url;
      ro.endpoint = endpoint;
      ro.model = model;
      ro.lora_modules = o.lora_modules;
      ro.lora_round_robin = o.lora_assignment == "round-robin";
      ro.request_rate = rate;
      ro.burstiness = o.burstiness;
      ro.max_concurrency = o.max_concurrency;
      ro.ignore_eos = ignore_eos;
      ro.sampling = o.sampling;
      ro.api_key = o.api_key;
      ro.headers = o.headers;
      ro.request_id_prefix = id_prefix;
      ro.seed = seed;
      ro.ready_check_timeout_s = o.ready_check_timeout_s;
      ro.num_warmups = o.num_warmups;
      ro.request_timeout_s = o.request_timeout_s;
      ro.progress = o.progress;
      GK_ASSIGN_OR_RETURN(RunResult run, RunBenchmark(requests, ro));
      // vLLM counts output tokens by re-tokenizing the text when the server sent no usage.
      for (auto& out : run.outcomes) {
        if (out.success && out.output_tokens == 0 && tokenizer) {
          out.output_tokens = static_cast<int>(tokenizer->Encode(out.generated_text).size());
        }
      }
      const BenchMetrics m = CalculateMetrics(run.outcomes, run.duration_s, o.metric_percentiles, goodput);
      int shown = 0;
      for (const auto& out : run.outcomes) {
        if (!out.success && shown < 10) {
          if (shown == 0) print("Failed requests during benchmark run detected (capping to 10):\n");
          print(StrCat("Error ", shown++, ": ", out.error, "\n"));
        }
      }
      PointSetup setup;
      setup.date = date;
      setup.endpoint_type = endpoint == ApiEndpoint::kCompletions ? "openai" : "openai-chat";
      setup.label = o.label;
      setup.model_id = model;
      setup.tokenizer_id = tokenizer_id;
      setup.num_prompts = static_cast<int>(requests.size());
      setup.request_rate = rate;
      setup.burstiness = o.burstiness;
      setup.max_concurrency = o.max_concurrency;
      setup.percentile_metrics = o.percentile_metrics;
      setup.percentiles = o.metric_percentiles;
      setup.goodput = goodput;
      setup.metadata = o.metadata;
      setup.save_detailed = o.save_detailed;
      setup.gemmakit = {{"tool", "gemmakit bench serve"},
                        {"base_url", url.text},
                        {"server_owned_by", owned_by},
                        {"client_machine", ClientMachine()},
                        {"command", o.command_line},
                        {"dataset", o.dataset_name},
                        {"input_len", o.dataset_name == "random" ? nlohmann::ordered_json(len) : nlohmann::ordered_json()},
                        {"output_len", o.output_len},
                        {"range_ratio", o.range_ratio},
                        {"prefix_len", o.prefix_len},
                        {"seed", seed},
                        {"ignore_eos", ignore_eos},
                        {"temperature", o.sampling.temperature ? nlohmann::ordered_json(*o.sampling.temperature)
                                                               : nlohmann::ordered_json()}};
      print(FormatSummary(m, run, setup));
      print(FormatClientOverhead(run));
      SweepPoint point{len, o.output_len, rate, "", ResultJson(m, run, setup)};
      if (o.save_result) {
        GK_RETURN_IF_ERROR(SaveJson(o.result_dir, PointFileName(o, setup, len, many), point.result, &point.result_file));
        result.files_written.push_back(point.result_file);
      }
      result.points.push_back(std::move(point));
    }
  }
  if (many) {
    print(FormatSweep(result.points));
    if (o.save_result) {
      nlohmann::ordered_json setup = {{"date", date},     {"label", o.label},        {"model_id", model},
                                      {"base_url", url.text}, {"server_owned_by", owned_by},
                                      {"command", o.command_line}};
      std::string base = model.substr(model.rfind('/') == std::string::npos ? 0 : model.rfind('/') + 1);
      std::string path;
      GK_RETURN_IF_ERROR(SaveJson(o.result_dir, StrCat("sweep-", o.label.empty() ? "openai" : o.label, "-", base, "-",
                                                       date, ".json"),
                                  SweepJson(result.points, setup), &path));
      result.files_written.push_back(path);
    }
  }
  return result;
}

}  // namespace gk::bench
