#include "tools/bench/torch_anchor.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "util/clock.h"

namespace gk {
namespace {

std::string ShellQuoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string LastLine(const std::string& s) {
  size_t end = s.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t begin = s.rfind('\n', end);
  return s.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin == std::string::npos ? 0 : begin + 1));
}

}  // namespace

Status CheckAnchorRuns(const TorchAnchorOptions& a) {
  if (access(a.script.c_str(), R_OK) != 0) {
    return Status::Error(StrCat(a.script, ": the PyTorch anchor script is not there (run from the source tree, or "
                                          "pass --torch-script PATH)"));
  }
  if (access(a.python.c_str(), X_OK) != 0) return Status::Error(StrCat(a.python, ": no such Python"));
  return Status::Ok();
}

Result<nlohmann::json> RunTorchAnchor(const TorchAnchorOptions& a, const TrainBenchOptions& o, const std::string& dtype) {
  GK_RETURN_IF_ERROR(CheckAnchorRuns(a));
  GK_ASSIGN_OR_RETURN(const std::vector<std::string> names, LoraTargetNames(o.targets));  // q -> q_proj
  std::string targets;
  for (const std::string& t : names) targets += (targets.empty() ? "" : ",") + t;
  const std::string cmd =
      StrCat(ShellQuoted(a.python), " ", ShellQuoted(a.script), " --model ", ShellQuoted(o.model_dir), " --seq-len ",
             o.seq_len, " --rank ", o.rank, " --alpha ", o.alpha, " --targets ", ShellQuoted(targets), " --steps ",
             o.steps, " --threads ", o.threads, " --seed ", o.seed, " --dtype ", dtype, " --json 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return Status::Error(StrCat("cannot start ", a.python));
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, pipe)) out += buf;
  const int rc = pclose(pipe);
  if (rc != 0) {
    return Status::Error(StrCat(a.script, " --dtype ", dtype, " failed (exit ", WIFEXITED(rc) ? WEXITSTATUS(rc) : rc,
                                "): ", LastLine(out)));
  }
  // Its JSON object is the last line (warnings may come before it).
  const nlohmann::json j = nlohmann::json::parse(LastLine(out), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tokens_per_s") || !j["tokens_per_s"].is_number()) {
    return Status::Error(StrCat(a.script, " printed no JSON result: ", LastLine(out)));
  }
  return j;
}

Result<TorchComparison> CompareWithTorch(const TrainBenchOptions& o, const TorchAnchorOptions& a) {
  if (o.threads <= 0) return Status::Error("--compare-torch needs --threads N (both sides pinned to the same count)");
  if (a.alternations < 1) return Status::Error("--alternations must be at least 1");
  GK_RETURN_IF_ERROR(CheckAnchorRuns(a));  // before the first alternation's gemmakit run
  if (o.full || o.tp > 1 || o.compare_remat || o.remat) {
    return Status::Error("--compare-torch compares one LoRA step without remat (the anchor keeps every activation)");
  }
  TorchComparison c;
  for (const std::string& d : a.dtypes) c.torch_tokens_per_s.push_back({d, {}});
  for (int i = 0; i < a.alternations; ++i) {
    GK_ASSIGN_OR_RETURN(c.last, RunTrainBench(o));
    c.gemmakit_tokens_per_s.push_back(c.last.runs.front().tokens_per_s);
    std::fprintf(stderr, "alternation %d: gemmakit %.1f tokens/s", i + 1, c.gemmakit_tokens_per_s.back());
    for (auto& [dtype, tps] : c.torch_tokens_per_s) {
      auto run = RunTorchAnchor(a, o, dtype);
      if (!run.ok()) std::fprintf(stderr, "\n");
      GK_ASSIGN_OR_RETURN(nlohmann::json j, std::move(run));
      tps.push_back(j["tokens_per_s"].get<double>());
      std::fprintf(stderr, ", torch %s %.1f", dtype.c_str(), tps.back());
      c.torch_runs.push_back(std::move(j));
    }
    std::fprintf(stderr, "\n");
  }
  return c;
}

std::string FormatTorchComparison(const TorchComparison& c, const std::string& precision) {
  std::string out = FormatTrainBench(c.last);
  char buf[512];
  const double gk = MedianOf(c.gemmakit_tokens_per_s);
  std::snprintf(buf, sizeof buf, "torch    %zu alternations, medians: gemmakit (%s) %.1f tokens/s", c.gemmakit_tokens_per_s.size(),
                precision.c_str(), gk);
  out += buf;
  for (const auto& [dtype, tps] : c.torch_tokens_per_s) {
    const double t = MedianOf(tps);
    std::snprintf(buf, sizeof buf, "; PyTorch eager %s %.1f tokens/s (gemmakit %.2fx)", dtype.c_str(), t,
                  gk / std::max(t, 1e-9));
    out += buf;
  }
  return out + "\n";
}

nlohmann::json TorchComparisonToJson(const TorchComparison& c) {
  nlohmann::json j = TrainBenchToJson(c.last);
  nlohmann::json t = {{"gemmakit_tokens_per_s", c.gemmakit_tokens_per_s},
                      {"gemmakit_median", MedianOf(c.gemmakit_tokens_per_s)},
                      {"runs", c.torch_runs}};
  for (const auto& [dtype, tps] : c.torch_tokens_per_s) {
    t[dtype] = {{"tokens_per_s", tps},
                {"median", MedianOf(tps)},
                {"gemmakit_ratio", MedianOf(c.gemmakit_tokens_per_s) / std::max(MedianOf(tps), 1e-9)}};
  }
  j["compare_torch"] = t;
  return j;
}

}  // namespace gk
