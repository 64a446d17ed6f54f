// gemmakit bench model|serve|compare|client-check
// gemmakit bench model --model DIR [--threads N] [--prompt-len 512] [--gen-len 128] [--repeats 3]
//                      [--mmap] [--json] [--quantize none|q8_0] [--batch 16] [--bf16-activations split|round]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "tools/bench/model_bench.h"

namespace gk::cli {

int RunBench(int argc, char** argv) {
  // The serving benchmarks have their own parsers (cmd_bench_serve.cc).
  if (argc >= 2) {
    const std::string sub = argv[1];
    if (sub == "serve") return RunBenchServe(argc - 1, argv + 1);
    if (sub == "compare") return RunBenchCompare(argc - 1, argv + 1);
    if (sub == "client-check") return RunBenchClientCheck(argc - 1, argv + 1);
  }
  CLI::App app{"Benchmarks; each figure is printed with its ceiling measured in the same run.\n"
               "  bench model         prefill and decode tokens/s of a checkpoint\n"
               "  bench serve         a serving benchmark client like vllm bench serve (bench serve --help)\n"
               "  bench compare       side-by-side tables and SVG plots of bench serve results\n"
               "  bench client-check  the serving client's own overhead at many streams"};
  app.require_subcommand(1);
  ModelBenchOptions o;
  bool mmap = false, json = false;
  CLI::App* model = app.add_subcommand("model", "prefill and decode tokens/s of a checkpoint");
  model->add_option("--model", o.model_dir, "model directory")->required();
  model->add_option("--prompt-len", o.prompt_len, "prefill tokens")->check(CLI::Range(1, 1 << 20));
  model->add_option("--gen-len", o.gen_len, "decoded tokens")->check(CLI::Range(1, 1 << 20));
  model->add_option("--repeats", o.repeats, "runs; medians are reported")->check(CLI::Range(1, 100));
  model->add_flag("--mmap", mmap, "stream weights from an mmap of the file instead of anonymous memory");
  model->add_flag("--json", json, "print one JSON object instead of the table");
  model->add_option("--batch", o.batch, "sequences decoded together for the batched figure (0: skip)")
      ->check(CLI::Range(0, 4096));
  EngineFlags engine;
  engine.AddTo(*model);
  CLI11_PARSE(app, argc, argv);
  engine.Apply();
  o.threads = engine.threads;
  o.load_mode = mmap ? WeightLoadMode::kMmap : WeightLoadMode::kCopy;
  o.quantize = engine.Quantize();
  auto r = RunModelBench(o);
  if (!r.ok()) return Fail(r.status());
  if (json) {
    std::printf("%s\n", ModelBenchToJson(*r).dump().c_str());
  } else {
    std::printf("%s", FormatModelBench(*r).c_str());
  }
  return 0;
}

}  // namespace gk::cli
