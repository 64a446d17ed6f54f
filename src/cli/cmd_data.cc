// gemmakit data synth-verilog --out DIR --n N [--seed S] [--first K]
// gemmakit data prepare --input FILE.jsonl --model DIR --max-seq-len N --loss assistant|all
//                       [--max-rows K] [--chat-template FILE|NAME] --out DIR
// gemmakit data stats (--input FILE.jsonl --model DIR [--chat-template FILE|NAME] | --dataset DIR)
//                     [--bin-width N] [--json]
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "formats/chat_format.h"
#include "formats/token_dataset.h"
#include "tools/data/sft_prepare.h"
#include "tools/data/verilog_synth.h"

namespace gk::cli {
namespace {

int RunSynthVerilog(const std::string& out, const data::VerilogSynthOptions& o) {
  auto tasks = data::SynthesizeVerilogTasks(o);
  if (!tasks.ok()) return Fail(tasks.status());
  Status s = data::WriteVerilogTasks(*tasks, out);
  if (!s.ok()) return Fail(s);
  std::map<std::string, int> per_family;
  for (const data::VerilogTask& t : *tasks) ++per_family[t.family];
  std::string mix;
  for (const auto& [family, n] : per_family) mix += StrCat(mix.empty() ? "" : ", ", family, " ", n);
  std::fprintf(stderr, "wrote %zu tasks (positions %lld..%lld of seed %llu; %zu in the catalogue) to %s: %s\n",
               tasks->size(), static_cast<long long>(o.first), static_cast<long long>(o.first + o.n - 1),
               static_cast<unsigned long long>(o.seed), data::VerilogSynthCatalogueSize(), out.c_str(), mix.c_str());
  return 0;
}

struct SftFlags {
  std::string input, model, out, dataset, loss = "assistant", chat_template;
  int64_t max_seq_len = 0, max_rows = -1, bin_width = 256;
  bool json = false;
};

std::string DropSummary(const data::SftPrepareReport& r) {
  std::string out;
  for (const auto& [reason, n] : r.dropped) {
    if (n > 0) out += StrCat(out.empty() ? "" : ", ", reason, " ", n);
  }
  return out.empty() ? "none" : out;
}

struct LoadedSft {
  std::vector<TokenRow> rows;
  data::SftPrepareReport report;
  std::string arch;
  std::string chat_template;  // ChatFormat::Describe()
};

Result<LoadedSft> LoadSft(const SftFlags& f, const data::SftPrepareOptions& o) {
  GK_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(f.model));
  GK_ASSIGN_OR_RETURN(Tokenizer tokenizer, LoadModelTokenizer(f.model));
  // The checkpoint's template (or --chat-template): training sees what serving will render.
  GK_ASSIGN_OR_RETURN(const ChatFormat format,
                      ChatFormat::ForModel(f.model, config.arch == Arch::kGemma3 ? BuiltinChat::kGemma3
                                                                                 : BuiltinChat::kGemma4,
                                           f.chat_template));
  LoadedSft s;
  s.arch = config.arch == Arch::kGemma3 ? "gemma3" : "gemma4";
  s.chat_template = format.Describe();
  GK_ASSIGN_OR_RETURN(s.rows, data::PrepareSft(f.input, tokenizer, format, o, &s.report));
  return s;
}

std::string AbsolutePath(const std::string& p) {
  std::error_code ec;
  const std::filesystem::path a = std::filesystem::absolute(p, ec);
  return ec ? p : a.lexically_normal().string();
}

int RunPrepare(const SftFlags& f) {
  data::SftPrepareOptions o;
  auto loss = data::ParseLossMode(f.loss);
  if (!loss.ok()) return Fail(loss.status());
  o.loss = *loss;
  o.max_seq_len = f.max_seq_len;
  o.max_rows = f.max_rows;
  auto s = LoadSft(f, o);
  if (!s.ok()) return Fail(s.status());
  const data::SftPrepareReport& r = s->report;
  if (r.kept == 0) {
    return Fail(StrCat("no rows kept from ", f.input, " (", r.raw, " read; dropped: ", DropSummary(r),
                       r.examples.empty() ? "" : "; first: " + r.examples[0], ")"));
  }
  const nlohmann::json meta = {
      {"created_by", "gemmakit data prepare"},
      {"source", AbsolutePath(f.input)},
      {"model", AbsolutePath(f.model)},
      {"tokenizer", AbsolutePath(f.model + "/tokenizer.json")},
      {"arch", s->arch},
      {"chat_template", s->chat_template},
      {"control_ids", {{"bos", 2}, {"turn", 105}, {"turn_end", 106}}},
      {"max_seq_len", o.max_seq_len},
      {"loss", data::LossModeName(o.loss)},
      {"max_rows", o.max_rows < 0 ? nlohmann::json(nullptr) : nlohmann::json(o.max_rows)},
      {"raw", r.raw},
      {"kept", r.kept},
      {"dropped", r.dropped},
      {"tokens", r.tokens},
      {"loss_tokens", r.loss_tokens},
  };
  Status st = WriteTokenDataset(f.out, s->rows, meta);
  if (!st.ok()) return Fail(st);
  std::printf("read %lld rows from %s: kept %lld (%.2f %%), dropped %lld (%s)\n", static_cast<long long>(r.raw),
              f.input.c_str(), static_cast<long long>(r.kept), 100.0 * double(r.kept) / double(r.raw),
              static_cast<long long>(r.raw - r.kept), DropSummary(r).c_str());
  for (const std::string& e : r.examples) std::printf("  %s\n", e.c_str());
  std::printf("tokens %lld, loss tokens %lld (%.2f %% of tokens; --loss %s, max_seq_len %lld)\n",
              static_cast<long long>(r.tokens), static_cast<long long>(r.loss_tokens),
              100.0 * double(r.loss_tokens) / double(r.tokens), data::LossModeName(o.loss),
              static_cast<long long>(o.max_seq_len));
  std::printf("chat template: %s\n", s->chat_template.c_str());
  std::printf("wrote %s\n", f.out.c_str());
  return 0;
}

nlohmann::json StatsJson(const data::LengthStats& s) {
  nlohmann::json hist = nlohmann::json::array(), over = nlohmann::json::object();
  for (const auto& [upper, n] : s.histogram) hist.push_back({{"upper", upper}, {"rows", n}});
  for (const auto& [limit, n] : s.rows_over) over[std::to_string(limit)] = n;
  return {{"rows", s.count},        {"tokens", s.total_tokens}, {"min", s.min},
          {"max", s.max},           {"mean", s.mean},           {"percentiles", s.percentiles},
          {"bin_width", s.bin_width}, {"histogram", hist},      {"rows_over", over}};
}

int RunStats(const SftFlags& f) {
  if (f.input.empty() == f.dataset.empty()) {
    return Fail("data stats: give either --input FILE.jsonl with --model DIR, or --dataset DIR");
  }
  if (!f.input.empty() && f.model.empty()) return Fail("data stats: --input needs --model DIR (for its tokenizer)");
  std::vector<int64_t> lengths;
  nlohmann::json out = nlohmann::json::object();
  std::string header;
  if (!f.dataset.empty()) {
    auto ds = TokenDataset::Open(f.dataset);
    if (!ds.ok()) return Fail(ds.status());
    for (int64_t i = 0; i < ds->rows(); ++i) lengths.push_back(ds->RowLength(i));
    out["dataset"] = f.dataset;
    out["meta"] = ds->meta();
    out["loss_tokens"] = ds->total_loss_tokens();
    header = StrCat("data set ", f.dataset, ": ", ds->rows(), " rows, ", ds->total_loss_tokens(), " loss tokens\n");
  } else {
    data::SftPrepareOptions o;
    o.max_seq_len = std::numeric_limits<int64_t>::max();  // the whole distribution: nothing is too long
    o.max_rows = f.max_rows;
    auto s = LoadSft(f, o);
    if (!s.ok()) return Fail(s.status());
    for (const TokenRow& r : s->rows) lengths.push_back(int64_t(r.tokens.size()));
    out["input"] = f.input;
    out["chat_template"] = s->chat_template;
    out["raw"] = s->report.raw;
    out["kept"] = s->report.kept;
    out["dropped"] = s->report.dropped;
    header = StrCat("read ", s->report.raw, " rows from ", f.input, ": ", s->report.kept, " usable, dropped ",
                    s->report.raw - s->report.kept, " (", DropSummary(s->report), "); chat template: ",
                    s->chat_template, "\n");
  }
  const data::LengthStats stats = data::ComputeLengthStats(lengths, f.bin_width);
  if (f.json) {
    out["lengths"] = StatsJson(stats);
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::fputs(header.c_str(), stdout);
    std::fputs(data::FormatLengthStats(stats).c_str(), stdout);
  }
  return 0;
}

}  // namespace

int RunData(int argc, char** argv) {
  CLI::App app{
      "Data sets for fine-tuning and evaluation.\n"
      "  data prepare        CodeV-R1 SFT JSONL -> tokenized data set with a loss mask (what training reads)\n"
      "  data stats          token-length statistics of a JSONL file or a data set (to choose max_seq_len)\n"
      "  data synth-verilog  spec-to-RTL tasks from built-in templates: verilog-eval layout + SFT JSONL"};
  app.require_subcommand(1);
  std::string out;
  data::VerilogSynthOptions o;
  CLI::App* synth = app.add_subcommand(
      "synth-verilog",
      "Write N spec-to-RTL tasks made from built-in templates, with no download:\n"
      "  DIR/dataset_spec-to-rtl/ProbNNN_<name>_{prompt.txt,ref.sv,test.sv} + problems.txt (the verilog-eval\n"
      "  layout; every reference passes its own testbench under iverilog) and DIR/sft.jsonl (CodeV-R1 rows:\n"
      "  system, prompt, response).\n"
      "--seed orders a fixed catalogue of distinct tasks and --first/--n take a window of that order. Windows of\n"
      "one seed never share a task, so a train set and a disjoint eval set are two windows of the same seed,\n"
      "e.g. --first 0 --n 1500 and --first 1500 --n 200.");
  synth->add_option("--out", out, "output directory")->required();
  synth->add_option("--n", o.n, "number of tasks")->required();
  synth->add_option("--seed", o.seed, "orders the catalogue (same seed, same tasks and bytes)");
  synth->add_option("--first", o.first, "position of the first task in the seed's order (default 0)");

  SftFlags f;
  CLI::App* prepare = app.add_subcommand(
      "prepare",
      "Tokenize CodeV-R1 SFT rows (JSONL: system, prompt, response) into a data set for training.\n"
      "Each row: the <think> block is removed, the first ```verilog block of the <answer> is kept, and the\n"
      "conversation (user: prompt, assistant: code) is rendered by the model's chat template, the one serving\n"
      "uses (docs/CHAT_TEMPLATES.md; built in: <bos><|turn>user\\n{prompt}<turn|>\\n<|turn>model\\n{code}<turn|>\\n),\n"
      "and tokenized with the model's tokenizer. --loss assistant: the loss counts the model turn's body and\n"
      "its <turn|>; all: every token. Rows longer than --max-seq-len are dropped, not truncated. Bad rows are\n"
      "counted and skipped. Writes DIR/dataset.json + DIR/shard-NNNNN.safetensors (tokens, loss_mask, offsets)\n"
      "atomically.");
  prepare->add_option("--input", f.input, "CodeV-R1 SFT JSONL file")->required();
  prepare->add_option("--model", f.model, "model directory (its tokenizer.json and config.json)")->required();
  prepare->add_option("--max-seq-len", f.max_seq_len, "drop rows longer than this many tokens (the reference: 3072)")
      ->required();
  prepare->add_option("--loss", f.loss, "assistant (the model turn only) or all (every token)")->required();
  prepare->add_option("--max-rows", f.max_rows, "read at most K input rows (the reference: 10000)");
  const char* template_help =
      "chat template file, or the name of one of the checkpoint's templates (default: the checkpoint's "
      "chat_template.jinja / tokenizer_config.json, else the built-in one)";
  prepare->add_option("--chat-template", f.chat_template, template_help);
  prepare->add_option("--out", f.out, "output data set directory (an existing data set there is replaced)")->required();

  CLI::App* stats = app.add_subcommand(
      "stats",
      "Token lengths of SFT rows: histogram, percentiles (numpy's linear interpolation) and how many rows\n"
      "each candidate max_seq_len (1024 ... 8192) would drop. Either a JSONL file tokenized like `data\n"
      "prepare` does (--input with --model; no length limit) or a prepared data set (--dataset).");
  stats->add_option("--input", f.input, "CodeV-R1 SFT JSONL file");
  stats->add_option("--model", f.model, "model directory whose tokenizer.json tokenizes --input");
  stats->add_option("--dataset", f.dataset, "a data set written by `data prepare`");
  stats->add_option("--max-rows", f.max_rows, "read at most K input rows");
  stats->add_option("--chat-template", f.chat_template, template_help);
  stats->add_option("--bin-width", f.bin_width, "histogram bin width in tokens (default 256)");
  stats->add_flag("--json", f.json, "print JSON instead of text");

  CLI11_PARSE(app, argc, argv);
  if (synth->parsed()) return RunSynthVerilog(out, o);
  // Checked here rather than by CLI11 so that a bad value gets the one-line error of every other failure.
  if ((prepare->parsed() || stats->parsed()) && f.max_rows != -1 && f.max_rows < 1) {
    return Fail(StrCat("--max-rows ", f.max_rows, ": must be at least 1"));
  }
  if (prepare->parsed() && f.max_seq_len < 1)
    return Fail(StrCat("--max-seq-len ", f.max_seq_len, ": must be at least 1"));
  if (stats->parsed() && f.bin_width < 1) return Fail(StrCat("--bin-width ", f.bin_width, ": must be at least 1"));
  if (prepare->parsed()) return RunPrepare(f);
  if (stats->parsed()) return RunStats(f);
  return Fail("unknown data subcommand");
}

}  // namespace gk::cli
