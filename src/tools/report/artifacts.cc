#include "tools/report/artifacts.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <system_error>

#include "tools/report/json_fields.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::report {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Found {
  std::vector<std::string> training, summaries, sweeps, points;
};

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Result<Found> FindFiles(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Result<Found>::Error(StrCat("RUN_DIR ", dir, ": not a directory"));
  Found f;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) return Result<Found>::Error(StrCat("RUN_DIR ", dir, ": ", ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) return Result<Found>::Error(StrCat("RUN_DIR ", dir, ": ", ec.message()));
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().filename().string(), path = it->path().string();
    if (name == "training_run.json") f.training.push_back(path);
    else if (name == "summary.json") f.summaries.push_back(path);
    else if (name.rfind("sweep-", 0) == 0 && EndsWith(name, ".json")) f.sweeps.push_back(path);
    else if (name.find("qps") != std::string::npos && EndsWith(name, ".json")) f.points.push_back(path);
  }
  for (auto* v : {&f.training, &f.summaries, &f.sweeps, &f.points}) std::sort(v->begin(), v->end());
  return f;
}

Result<std::vector<StepPoint>> LoadMetrics(const std::string& path) {
  std::vector<StepPoint> steps;
  std::error_code ec;
  if (!fs::exists(path, ec)) return steps;
  GK_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  std::istringstream in(text);
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = StrCat(path, ":", line_no);
    GK_ASSIGN_OR_RETURN(const json j, ParseJson(line, where));
    StepPoint p;
    GK_ASSIGN_OR_RETURN(p.step, NumberField(j, "step", where));
    GK_ASSIGN_OR_RETURN(p.loss, NumberField(j, "loss", where));
    GK_ASSIGN_OR_RETURN(p.grad_norm, OptionalNumber(j, "grad_norm", where));
    steps.push_back(p);
  }
  return steps;
}

Result<TrainingArtifact> LoadTraining(const std::string& file) {
  GK_ASSIGN_OR_RETURN(const json j, ReadJsonFile(file));
  if (!j.is_object()) return Result<TrainingArtifact>::Error(StrCat(file, ": must be a JSON object"));
  TrainingArtifact t;
  t.file = file;
  GK_ASSIGN_OR_RETURN(t.wall_time_s, NumberField(j, "wall_time_s", file));
  GK_ASSIGN_OR_RETURN(t.tokens, NumberField(j, "tokens", file));
  GK_ASSIGN_OR_RETURN(t.tokens_per_s, NumberField(j, "tokens_per_s", file));
  GK_ASSIGN_OR_RETURN(t.final_loss, OptionalNumber(j, "final_loss", file));
  // Samples: the rows this invocation's optimizer steps consumed (micro_batch × grad_accum each).
  const json steps = j.value("steps", json::object()), batch = j.value("config", json::object()).value("batch", json::object());
  GK_ASSIGN_OR_RETURN(const auto done, OptionalNumber(steps, "done", file));
  GK_ASSIGN_OR_RETURN(const auto start, OptionalNumber(steps, "start", file));
  GK_ASSIGN_OR_RETURN(const auto micro, OptionalNumber(batch, "micro_batch", file));
  GK_ASSIGN_OR_RETURN(const auto accum, OptionalNumber(batch, "grad_accum", file));
  if (done && micro && accum) {
    t.samples = static_cast<int64_t>((*done - start.value_or(0)) * *micro * *accum);
  }
  const json data = j.value("config", json::object()).value("data", json::object());
  if (data.contains("loss") && data["loss"].is_string()) t.loss_kind = data["loss"].get<std::string>();
  const json config = j.value("config", json::object());
  if (config.contains("model") && config["model"].is_string()) t.model_dir = config["model"].get<std::string>();
  GK_ASSIGN_OR_RETURN(const auto seq, OptionalNumber(data, "max_seq_len", file));
  GK_ASSIGN_OR_RETURN(const auto rank, OptionalNumber(config.value("lora", json::object()), "rank", file));
  if (seq) t.max_seq_len = int64_t(*seq);
  if (micro) t.micro_batch = int64_t(*micro);
  if (rank) t.lora_rank = int64_t(*rank);
  const json memory = config.value("memory", json::object());
  t.remat = memory.is_object() && memory.contains("remat") && memory["remat"].is_boolean() && memory["remat"].get<bool>();
  GK_ASSIGN_OR_RETURN(t.steps, LoadMetrics((fs::path(file).parent_path() / "metrics.jsonl").string()));
  return t;
}

Result<EvalArtifact> LoadEval(const std::string& file, const json& j) {
  EvalArtifact e;
  e.file = file;
  if (!j["pass_at_k"].is_object()) return Result<EvalArtifact>::Error(StrCat(file, ": \"pass_at_k\" must be an object"));
  for (const auto& [key, v] : j["pass_at_k"].items()) {
    char* end = nullptr;
    const long k = std::strtol(key.c_str(), &end, 10);
    if (*end || k < 1 || !v.is_number()) {
      return Result<EvalArtifact>::Error(StrCat(file, ": \"pass_at_k\" entry \"", key, "\": ", v.dump(),
                                                " is not k (a positive integer) -> a number"));
    }
    e.pass_at_k[static_cast<int>(k)] = v.get<double>();
  }
  GK_ASSIGN_OR_RETURN(const double count, NumberField(j, "problem_count", file));
  GK_ASSIGN_OR_RETURN(const double all, NumberField(j, "problems_all_pass", file));
  GK_ASSIGN_OR_RETURN(const double none, NumberField(j, "problems_none_pass", file));
  e.problem_count = static_cast<int64_t>(count), e.all_pass = static_cast<int64_t>(all);
  e.none_pass = static_cast<int64_t>(none);
  if (j.contains("problems")) {
    if (!j["problems"].is_array()) return Result<EvalArtifact>::Error(StrCat(file, ": \"problems\" must be an array"));
    for (const json& p : j["problems"]) {
      ProblemRate r;
      if (!p.is_object() || !p.contains("problem") || !p["problem"].is_string()) {
        return Result<EvalArtifact>::Error(StrCat(file, ": a \"problems\" entry has no \"problem\" name"));
      }
      r.problem = p["problem"].get<std::string>();
      const std::string where = StrCat(file, " problem ", r.problem);
      GK_ASSIGN_OR_RETURN(const double n, NumberField(p, "n", where));
      GK_ASSIGN_OR_RETURN(const double c, NumberField(p, "c", where));
      GK_ASSIGN_OR_RETURN(r.rate, NumberField(p, "rate", where));
      r.n = static_cast<int64_t>(n), r.c = static_cast<int64_t>(c);
      e.problems.push_back(r);
    }
  }
  return e;
}

std::string OneRunOnly(const std::string& dir, const std::string& what, const std::vector<std::string>& files) {
  std::string list;
  for (const std::string& f : files) list += (list.empty() ? "" : ", ") + f;
  return StrCat("RUN_DIR ", dir, " holds ", files.size(), " ", what, " (", list,
                "); a RUN_DIR is one run: give each its own directory");
}

}  // namespace

Result<Run> LoadRun(const RunSpec& spec) {
  GK_ASSIGN_OR_RETURN(const Found f, FindFiles(spec.dir));
  Run run;
  run.spec = spec;
  if (f.training.size() > 1) return Result<Run>::Error(OneRunOnly(spec.dir, "training runs", f.training));
  if (!f.training.empty()) {
    GK_ASSIGN_OR_RETURN(run.training, LoadTraining(f.training[0]));
  }
  std::vector<std::string> evals;
  std::optional<json> eval_doc;
  for (const std::string& s : f.summaries) {
    GK_ASSIGN_OR_RETURN(json j, ReadJsonFile(s));
    if (!j.is_object() || !j.contains("pass_at_k")) continue;  // some other tool's summary
    evals.push_back(s);
    eval_doc = std::move(j);
  }
  if (evals.size() > 1) return Result<Run>::Error(OneRunOnly(spec.dir, "evals", evals));
  if (eval_doc) {
    GK_ASSIGN_OR_RETURN(run.eval, LoadEval(evals[0], *eval_doc));
  }
  GK_ASSIGN_OR_RETURN(run.serving, LoadServing(f.sweeps, f.points));
  return run;
}

std::string WorkloadName(const ServingWorkload& w) { return StrCat(w.input_len, " in / ", w.output_len, " out"); }

}  // namespace gk::report
