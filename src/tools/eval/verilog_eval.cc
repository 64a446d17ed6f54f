#include "tools/eval/verilog_eval.h"

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "tools/eval/verilog_problems.h"
#include "tools/eval/verilog_prompt.h"
#include "util/atomic_file.h"
#include "util/clock.h"

namespace gk::eval {

namespace {

struct Sample {
  size_t problem = 0;  // index into the problems
  int index = 0;
  std::string response, code;
};

Result<std::vector<Sample>> LoadCandidates(const std::string& path, const std::vector<VerilogProblem>& problems) {
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < problems.size(); ++i) by_name[problems[i].name] = i;
  std::vector<Sample> out;
  std::set<std::pair<size_t, int>> seen;  // pass@k counts each sample once
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    auto bad = [&](const std::string& why) { return Result<std::vector<Sample>>::Error(StrCat(path, ":", no, ": ", why)); };
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    if (!j.contains("problem") || !j["problem"].is_string()) return bad("no \"problem\" string");
    if (!j.contains("code") || !j["code"].is_string()) return bad("no \"code\" string");
    if (!j.contains("sample") || !j["sample"].is_number_integer()) return bad("no integer \"sample\"");
    auto it = by_name.find(j["problem"].get<std::string>());
    if (it == by_name.end()) {
      return bad(StrCat("problem ", j["problem"].get<std::string>(), " is not in the dataset (or not in --problems)"));
    }
    if (!seen.insert({it->second, j["sample"].get<int>()}).second) return bad("a second line for this problem and sample");
    out.push_back({it->second, j["sample"].get<int>(), "", j["code"].get<std::string>()});
  }
  if (out.empty()) return Result<std::vector<Sample>>::Error(StrCat(path, ": no candidates"));
  return out;
}

Status WriteJsonl(const std::string& path, const std::vector<nlohmann::ordered_json>& rows) {
  std::string text;
  for (const auto& r : rows) text += r.dump() + "\n";
  return WriteFileAtomic(path, text);
}

}  // namespace

Result<VerilogEvalResult> RunVerilogEval(const VerilogEvalOptions& o, const GenerateFn& generate) {
  if (o.n_samples < 1) return Result<VerilogEvalResult>::Error("--n-samples must be at least 1");
  for (int k : o.ks) {
    if (k < 1) return Result<VerilogEvalResult>::Error(StrCat("--k: ", k, " is not >= 1"));
  }
  VerilogEvalResult result;
  GK_ASSIGN_OR_RETURN(result.iverilog_version, IverilogVersion(o.score));
  GK_ASSIGN_OR_RETURN(std::vector<VerilogProblem> problems, LoadVerilogProblems(o.dataset, o.problems));
  if (!o.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out_dir, ec);
    if (ec) return Result<VerilogEvalResult>::Error(StrCat("--out ", o.out_dir, ": ", ec.message()));
  }

  std::vector<Sample> samples;
  if (!o.candidates.empty()) {
    GK_ASSIGN_OR_RETURN(samples, LoadCandidates(o.candidates, problems));
  } else {
    if (!generate) return Result<VerilogEvalResult>::Error("give --model, --base-url or --candidates");
    std::vector<GenerationJob> jobs;
    for (size_t i = 0; i < problems.size(); ++i) {
      for (int j = 0; j < o.n_samples; ++j) {
        jobs.push_back({BuildVerilogPrompt(problems[i].prompt), o.seed + i * o.n_samples + j});
        samples.push_back({i, j, "", ""});
      }
    }
    const double t0 = NowSeconds();
    GK_ASSIGN_OR_RETURN(std::vector<std::string> texts,
                        generate(jobs, o.generation, [&](int d, int t) {
                          if (o.progress) o.progress("generate", d, t);
                        }));
    result.generation_seconds = NowSeconds() - t0;
    std::vector<nlohmann::ordered_json> rows;
    for (size_t s = 0; s < samples.size(); ++s) {
      samples[s].response = texts[s];
      samples[s].code = ExtractVerilog(texts[s]);
      rows.push_back({{"problem", problems[samples[s].problem].name},
                      {"sample", samples[s].index},
                      {"code", samples[s].code},
                      {"response", samples[s].response}});
    }
    if (!o.out_dir.empty()) {  // first, so a crash while scoring loses no generation
      const std::string path = o.out_dir + "/generations.jsonl";
      GK_RETURN_IF_ERROR(WriteJsonl(path, rows));
      result.files_written.push_back(path);
    }
  }

  // Score in parallel: each sample is a few short-lived processes. The first worker to reach a
  // problem scores its reference solution once: a pass needs the same sample count.
  const int workers = o.workers > 0 ? o.workers : std::max(1u, std::thread::hardware_concurrency());
  std::vector<Result<SampleScore>> scores(samples.size(), Result<SampleScore>::Error("not scored"));
  std::vector<std::once_flag> baseline_once(problems.size());
  std::vector<Result<SampleScore>> baselines(problems.size(), Result<SampleScore>::Error("not scored"));
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  std::mutex progress_mu;
  const double t1 = NowSeconds();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t s; (s = next++) < samples.size();) {
        const size_t i = samples[s].problem;
        const VerilogProblem& p = problems[i];
        std::call_once(baseline_once[i],
                       [&] { baselines[i] = ScoreSample(ReferenceAsCandidate(p.ref), p.ref, p.test, o.score); });
        const long long expected = baselines[i].ok() ? baselines[i]->samples : -1;
        scores[s] = ScoreSample(samples[s].code, p.ref, p.test, o.score, expected);
        const int d = ++done;
        std::lock_guard<std::mutex> lock(progress_mu);
        if (o.progress) o.progress("score", d, static_cast<int>(samples.size()));
      }
    });
  }
  for (auto& t : threads) t.join();
  result.scoring_seconds = NowSeconds() - t1;

  std::vector<nlohmann::ordered_json> rows;
  for (size_t s = 0; s < samples.size(); ++s) {
    const size_t i = samples[s].problem;
    if (!baselines[i].ok()) return baselines[i].status();  // the harness's own failure, not the sample's
    if (!scores[s].ok()) return scores[s].status();
    const SampleScore& sc = *scores[s];
    SampleRecord r{problems[i].name, samples[s].index, sc.passed, CategoryName(sc.category), samples[s].code, sc.log};
    rows.push_back({{"problem", r.problem}, {"sample", r.sample}, {"passed", r.passed}, {"category", r.category},
                    {"reason", sc.reason}, {"mismatches", sc.mismatches}, {"samples", sc.samples},
                    {"reference_samples", baselines[i]->samples}, {"seconds", sc.seconds}, {"code", r.code},
                    {"log", r.log}});
    result.records.push_back(std::move(r));
  }
  result.summary = Summarize(result.records, o.ks);
  if (!o.out_dir.empty()) {
    nlohmann::ordered_json meta = o.metadata;
    meta["iverilog"] = result.iverilog_version;
    meta["sandbox"] = o.score.sandbox ? "landlock" : "none";
    meta["generation_seconds"] = result.generation_seconds;
    meta["scoring_seconds"] = result.scoring_seconds;
    meta["scoring_workers"] = workers;
    const std::string samples_path = o.out_dir + "/samples.jsonl", summary_path = o.out_dir + "/summary.json";
    GK_RETURN_IF_ERROR(WriteJsonl(samples_path, rows));
    GK_RETURN_IF_ERROR(WriteFileAtomic(summary_path, SummaryJson(result.summary, meta).dump(2) + "\n"));
    result.files_written.push_back(samples_path);
    result.files_written.push_back(summary_path);
    for (const auto& [name, svg] : EvalPlots(result.summary)) {
      const std::string path = o.out_dir + "/" + name;
      GK_RETURN_IF_ERROR(WriteFileAtomic(path, svg));
      result.files_written.push_back(path);
    }
  }
  return result;
}

}  // namespace gk::eval
