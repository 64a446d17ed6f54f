// gemmakit train --config RECIPE.toml [--set key=value ...] [--resume] [--threads N]
// LoRA SFT (engines/train/trainer.h). A JSONL `data` is tokenized once into RUN/dataset
// (reused while its source and settings are unchanged); SIGTERM/SIGINT checkpoint and exit 143/130.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/common.h"
#include "dist/communicator.h"
#include "engines/train/recipe.h"
#include "engines/train/trainer.h"
#include "formats/chat_format.h"
#include "formats/token_dataset.h"
#include "model/config.h"
#include "tools/data/sft_prepare.h"
#include "tools/plot/svg_plot.h"
#include "util/atomic_file.h"
#include "util/stop_signals.h"

namespace gk::cli {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

// The first signal asks for a checkpoint and a clean stop; a second one kills at once.
void OnSignal(int sig) {
  g_signal.store(sig);
  if (g_stop.exchange(true)) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

bool IsDatasetDir(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path + "/dataset.json", ec);
}

// The chat template a JSONL is rendered with: data.chat_template, else the checkpoint's, else the
// built-in one, as `data prepare` and serving choose it.
Result<ChatFormat> RecipeChatFormat(const train::TrainRecipe& r, const ModelConfig& config) {
  Result<ChatFormat> f = ChatFormat::ForModel(
      r.model, config.arch == Arch::kGemma3 ? BuiltinChat::kGemma3 : BuiltinChat::kGemma4, r.chat_template);
  if (!f.ok() && !r.chat_template.empty()) return f.status().Wrap("data.chat_template");
  return f;
}

// Tokenizes the recipe's JSONL into RUN/dataset, unless a dataset made from the same file with
// the same settings and chat template is already there.
Result<std::string> PreparedDataset(const train::TrainRecipe& r) {
  if (IsDatasetDir(r.data)) {
    if (!r.chat_template.empty()) {
      std::fprintf(stderr, "note: data.chat_template is not used: %s is already tokenized\n", r.data.c_str());
    }
    return r.data;
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(r.data, ec)) {
    return Status::Error(StrCat("data: ", r.data, " is neither a JSONL file nor a `gemmakit data prepare` directory"));
  }
  GK_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(r.model));
  GK_ASSIGN_OR_RETURN(const ChatFormat format, RecipeChatFormat(r, config));
  const std::string dir = r.out + "/dataset";
  const nlohmann::json want = {{"source", std::filesystem::absolute(r.data).string()},
                               {"source_bytes", std::filesystem::file_size(r.data, ec)},
                               {"max_seq_len", r.max_seq_len},
                               {"loss", r.loss},
                               {"max_rows", r.max_rows},
                               {"model", std::filesystem::absolute(r.model).string()},
                               {"chat_template", r.chat_template},
                               {"chat_template_used", format.Describe()}};
  if (IsDatasetDir(dir)) {
    auto existing = TokenDataset::Open(dir);
    if (existing.ok() && existing->meta().value("recipe_inputs", nlohmann::json()) == want) return dir;
  }
  GK_ASSIGN_OR_RETURN(Tokenizer tokenizer, LoadModelTokenizer(r.model));
  data::SftPrepareOptions o;
  o.max_seq_len = r.max_seq_len;
  GK_ASSIGN_OR_RETURN(o.loss, data::ParseLossMode(r.loss));
  o.max_rows = r.max_rows;
  data::SftPrepareReport report;
  GK_ASSIGN_OR_RETURN(std::vector<TokenRow> rows, data::PrepareSft(r.data, tokenizer, format, o, &report));
  std::string dropped;
  for (const auto& [why, n] : report.dropped) {
    if (n > 0) dropped += StrCat(dropped.empty() ? "" : ", ", why, " ", n);
  }
  std::fprintf(stderr, "data: %lld rows read, %lld kept, dropped: %s; %lld tokens, %lld loss tokens\n",
               static_cast<long long>(report.raw), static_cast<long long>(report.kept),
               dropped.empty() ? "none" : dropped.c_str(), static_cast<long long>(report.tokens),
               static_cast<long long>(report.loss_tokens));
  if (rows.empty()) return Status::Error(StrCat("data: no usable rows in ", r.data));
  nlohmann::json meta = {{"recipe_inputs", want},
                         {"raw", report.raw},
                         {"kept", report.kept},
                         {"dropped", report.dropped},
                         {"loss", r.loss},
                         {"max_seq_len", r.max_seq_len},
                         {"chat_template", format.Describe()}};
  GK_RETURN_IF_ERROR(WriteTokenDataset(dir, rows, meta));
  return dir;
}

void PrintProgress(const train::StepLog& s, bool tty, int64_t log_every) {
  const double eta = s.step > 0 ? s.elapsed_s / double(s.step) * double(s.total_steps - s.step) : 0;
  if (tty) {
    const int width = 24, filled = int(double(width) * double(s.step) / double(std::max<int64_t>(1, s.total_steps)));
    std::fprintf(stderr, "\r[%s%s] step %lld/%lld loss %.4f acc %.3f lr %.2e |g| %.3f %.0f tok/s eta %.0fs   ",
                 std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(),
                 static_cast<long long>(s.step), static_cast<long long>(s.total_steps), s.loss, s.accuracy,
                 s.learning_rate, s.grad_norm, s.tokens_per_s, eta);
    if (s.step == s.total_steps) std::fputc('\n', stderr);
  } else if (s.step % log_every == 0 || s.step == s.total_steps) {
    std::fprintf(stderr, "step %lld/%lld loss %.4f acc %.3f lr %.3e grad_norm %.4f tokens %lld %.0f tok/s elapsed %.1fs\n",
                 static_cast<long long>(s.step), static_cast<long long>(s.total_steps), s.loss, s.accuracy,
                 s.learning_rate, s.grad_norm, static_cast<long long>(s.tokens), s.tokens_per_s, s.elapsed_s);
  }
}

// The loss curve as text (one row per step bucket) and as RUN/loss.svg.
void ReportLossCurve(const std::vector<train::StepLog>& logs, const std::string& out) {
  if (logs.empty()) return;
  double lo = logs[0].loss, hi = logs[0].loss;
  for (const auto& l : logs) lo = std::min(lo, l.loss), hi = std::max(hi, l.loss);
  const size_t rows = std::min<size_t>(logs.size(), 20), per = (logs.size() + rows - 1) / rows;
  std::printf("loss curve (%zu steps):\n", logs.size());
  for (size_t i = 0; i < logs.size(); i += per) {
    const train::StepLog& l = logs[std::min(logs.size() - 1, i + per - 1)];
    // Bars span the curve's own range, so that a fall from 13 to 11 is visible.
    const int bar = 2 + (hi > lo ? int(38.0 * (l.loss - lo) / (hi - lo) + 0.5) : 0);
    std::printf("  step %5lld  %8.4f  %s\n", static_cast<long long>(l.step), l.loss, std::string(size_t(bar), '*').c_str());
  }
  plot::LineChart chart;
  chart.title = "Training loss";
  chart.x_label = "optimizer step";
  chart.y_label = "loss (mean over target tokens)";
  plot::PlotSeries series;
  series.label = "loss";
  for (const auto& l : logs) series.points.emplace_back(double(l.step), l.loss);
  chart.series.push_back(std::move(series));
  (void)WriteFileAtomic(out + "/loss.svg", plot::RenderSvg(chart));
}

}  // namespace

int RunTrain(int argc, char** argv) {
  CLI::App app{"supervised fine-tuning, LoRA or full (recipe format: docs/TRAIN.md)"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool resume = false;
  EngineFlags engine;
  app.add_option("--config", config_path, "recipe TOML (e.g. recipes/tiny-verilog-lora.toml)")->required();
  app.add_option("--set", overrides, "override a recipe key: --set lora.rank=8 --set out=runs/x (repeatable)");
  app.add_flag("--resume", resume, "continue from the newest complete checkpoint in the run directory");
  app.add_option("--threads", engine.threads, "worker threads (0 = all cores)");
  app.add_option("--device", engine.device,
                 "where the passes run: cpu (default) or cuda[:N] (one GPU, LoRA; the optimizer and checkpoints stay on "
                 "the host, so a run resumes on either)");
  int tp = 1;
  app.add_option("--tp", tp,
                 "tensor parallelism under mpirun: groups of N ranks each hold the model split N ways (LoRA); "
                 "-np a multiple of N, the groups data parallel")
      ->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);

  auto device = ParseDeviceSpec(engine.device);
  if (!device.ok()) return Fail(device.status());
  if (Status st = CheckDeviceAvailable(*device); !st.ok()) return Fail(st);
  auto recipe = train::LoadRecipe(config_path);
  if (!recipe.ok()) return Fail(recipe.status());
  Status s = train::ApplyOverrides(*recipe, overrides);
  if (!s.ok()) return Fail(s);
  s = train::ValidateRecipe(*recipe);
  if (!s.ok()) return Fail(s);
  InstallStopHandler(OnSignal);  // before the first worker thread (MPI's too): util/stop_signals.h
  // Under mpirun: data parallel over the ranks (engines/train/trainer.h); else one process.
  auto world = dist::World();
  if (!world.ok()) return Fail(world.status());
  dist::Communicator& comm = **world;
  const bool writer = comm.rank() == 0;
  std::error_code ec;
  std::filesystem::create_directories(recipe->out, ec);
  if (ec) return Fail(StrCat(recipe->out, ": cannot create the run directory: ", ec.message()));
  // Rank 0 tokenizes RUN/dataset; the others then reuse it (or, on a machine of their own,
  // tokenize the same rows). The flag all-reduce is also the barrier between the two.
  Result<std::string> dataset = writer ? PreparedDataset(*recipe) : Result<std::string>::Error("");
  if (comm.size() > 1) {
    int64_t failed = writer && !dataset.ok() ? 1 : 0;
    if (Status st = comm.AllReduceMax(std::span<int64_t>(&failed, 1)); !st.ok()) return Fail(st);
    if (failed && writer) return Fail(dataset.status());
    if (failed) return Fail(StrCat("rank ", comm.rank(), ": rank 0 could not prepare the data (its message is above)"));
    if (!writer) dataset = PreparedDataset(*recipe);
  }
  if (!dataset.ok()) return Fail(dataset.status());
  if (writer && comm.size() > 1) {
    if (tp > 1) {
      std::fprintf(stderr, "tensor parallel: %d ranks per copy of the model, %d data-parallel copies (%s)\n", tp,
                   comm.size() / tp, comm.backend().c_str());
    } else {
      std::fprintf(stderr, "data parallel: %d ranks (%s), micro-batches dealt round-robin\n", comm.size(),
                   comm.backend().c_str());
    }
  }

  ThreadPool pool(engine.threads);
  auto trainer = train::Trainer::Create(*recipe, *dataset, &pool, resume, &comm, tp, *device);
  if (!trainer.ok()) return Fail(trainer.status());
  // From here a rank that fails alone would leave the others in a collective: end them all.
  auto fail_all = [&](const Status& st) {
    const int rc = Fail(st);
    if (comm.size() > 1) comm.Abort(rc);
    return rc;
  };
  if (writer && (*trainer)->start_step() > 0) {
    std::fprintf(stderr, "resuming at step %lld of %lld\n", static_cast<long long>((*trainer)->start_step()),
                 static_cast<long long>((*trainer)->total_steps()));
  }
  const bool tty = isatty(STDERR_FILENO);
  std::vector<train::StepLog> logs;
  s = (*trainer)->Run(&g_stop, [&](const train::StepLog& l) {
    logs.push_back(l);
    PrintProgress(l, tty, recipe->log_every);
  });
  if (!s.ok()) return fail_all(s);
  const nlohmann::json& sum = (*trainer)->summary();
  if (!writer) return (*trainer)->stopped() ? 128 + (g_signal.load() ? g_signal.load() : SIGTERM) : 0;
  if ((*trainer)->stopped()) {
    std::fprintf(stderr, "\nstopped by signal %d at step %lld: checkpoint written to %s; continue with --resume\n",
                 g_signal.load(), static_cast<long long>(sum["steps"]["done"].get<int64_t>()), recipe->out.c_str());
    return 128 + (g_signal.load() ? g_signal.load() : SIGTERM);
  }
  ReportLossCurve(logs, recipe->out);
  const char* result = recipe->full_finetune ? "model" : "adapter";
  std::printf("trained %lld steps in %.1f s (%.0f tokens/s); %s: %s/%s; run record: %s/training_run.json\n",
              static_cast<long long>(sum["steps"]["done"].get<int64_t>() - sum["steps"]["start"].get<int64_t>()),
              sum["wall_time_s"].get<double>(), sum["tokens_per_s"].get<double>(), result, recipe->out.c_str(), result,
              recipe->out.c_str());
  return 0;
}

}  // namespace gk::cli
