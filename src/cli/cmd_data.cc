// gemmakit data synth-verilog --out DIR --n N [--seed S] [--first K]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>

#include "cli/common.h"
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

}  // namespace

int RunData(int argc, char** argv) {
  CLI::App app{
      "Data sets for fine-tuning and evaluation.\n"
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
  CLI11_PARSE(app, argc, argv);
  if (synth->parsed()) return RunSynthVerilog(out, o);
  return Fail("unknown data subcommand");
}

}  // namespace gk::cli
