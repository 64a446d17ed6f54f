// gemmakit bench model|train|serve|compare|client-check
// gemmakit bench model --model DIR [--threads N] [--prompt-len 512] [--gen-len 128] [--repeats 3]
//                      [--mmap] [--json] [--quantize none|q8_0] [--batch 16] [--bf16-activations split|round]
//                      [--tp N [--no-tp-baseline]]   (under mpirun -np N: tensor parallel)
// gemmakit bench model --device cuda[:N] (--model DIR | --preset NAME [--num-layers N]) [--prompt-len 4096]
//                      [--gen-len 128] [--batch 64] [--batch-prompt 128] [--repeats 3] [--json]
// gemmakit bench train --model DIR --seq-len T [--rank 16] [--alpha 32] [--steps 3] [--remat | --compare-remat] [--full] [--precision bf16|f32]
//                      [--compare-torch [--alternations 3] [--torch-dtypes bf16,fp32] [--torch-script PATH]]
//                      [--threads N] [--json] [--targets q,k,v,o,gate,up,down] [--tp N (under mpirun -np N)]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/common.h"
#include "dist/communicator.h"
#include "tools/bench/model_bench.h"
#ifdef GK_HAVE_CUDA
#include "tools/bench/cuda/gpu_model_bench.h"
#include "tools/bench/cuda/gpu_train_bench.h"
#endif
#include "tools/bench/torch_anchor.h"
#include "tools/bench/train_bench.h"

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
               "  bench train         tokens/s of one LoRA training step vs the fp32 FLOP peak\n"
               "  bench serve         a serving benchmark client like vllm bench serve (bench serve --help)\n"
               "  bench compare       side-by-side tables and SVG plots of bench serve results\n"
               "  bench client-check  the serving client's own overhead at many streams"};
  app.require_subcommand(1);
  ModelBenchOptions o;
  bool mmap = false, json = false;
  CLI::App* model = app.add_subcommand("model", "prefill and decode tokens/s of a checkpoint");
  std::string preset;
  int num_layers = 0, batch_prompt = 128;
  auto* model_opt = model->add_option("--model", o.model_dir, "model directory");
  model->add_option("--preset", preset, "--device cuda: a preset's shape with random bf16 weights made on the GPU "
                                        "(no checkpoint), e.g. 31b")
      ->excludes(model_opt);
  model->add_option("--num-layers", num_layers, "with --preset: its first N layers only")->check(CLI::Range(1, 4096));
  std::string prefill_attention = "products";
  model->add_option("--prefill-attention", prefill_attention,
                    "--device cuda: prefill attention through cuBLASLt products (default) or the fused flash kernel")
      ->check(CLI::IsMember({"products", "flash"}));
  std::string decode_products = "cublaslt";
  model->add_option("--decode-products", decode_products,
                    "--device cuda: decode steps' weight products (1 to 8 tokens) through cuBLASLt (default) or "
                    "gemmakit's GEMV kernel")
      ->check(CLI::IsMember({"cublaslt", "gemv"}));
  model->add_option("--batch-prompt", batch_prompt, "--device cuda: each batched sequence's prompt tokens")
      ->check(CLI::Range(1, 1 << 20));
  model->add_option("--prompt-len", o.prompt_len, "prefill tokens")->check(CLI::Range(1, 1 << 20));
  model->add_option("--gen-len", o.gen_len, "decoded tokens")->check(CLI::Range(1, 1 << 20));
  model->add_option("--repeats", o.repeats, "runs; medians are reported")->check(CLI::Range(1, 100));
  model->add_flag("--mmap", mmap, "stream weights from an mmap of the file instead of anonymous memory");
  model->add_flag("--json", json, "print one JSON object instead of the table");
  model->add_option("--batch", o.batch, "sequences decoded together for the batched figure (0: skip)")
      ->check(CLI::Range(0, 4096));
  EngineFlags engine;
  engine.AddTo(*model);
  model->add_option("--gpu-memory-utilization", engine.gpu_memory_utilization,
                    "--device cuda: the share of the GPU's memory weights, activations and KV cache may take")
      ->check(CLI::Range(0.01, 1.0));
  bool no_baseline = false;
  model->add_flag("--no-tp-baseline", no_baseline,
                  "with --tp: skip the whole model on rank 0 alone (the scaling figure), for a model one rank cannot hold");

  TrainBenchOptions to;
  std::string targets = "q,k,v,o,gate,up,down";
  bool train_json = false;
  CLI::App* train = app.add_subcommand("train", "tokens/s of one LoRA training step (forward + backward)");
  train->add_option("--model", to.model_dir, "model directory");
  std::string train_device = "cpu", train_preset;
  int train_layers = 0, train_rows = 1;
  train->add_option("--device", train_device, "cpu (default) or cuda[:N]: the GPU trainer (LoRA, remat, one GPU)");
  train->add_option("--preset", train_preset, "--device cuda: a preset's shape with random bf16 weights made on the GPU "
                                               "(31b, e4b, ...), instead of --model");
  train->add_option("--num-layers", train_layers, "with --preset: its first N layers only")->check(CLI::Range(1, 4096));
  train->add_option("--rows", train_rows, "--device cuda: rows of --seq-len tokens per micro-batch (packed)")
      ->check(CLI::Range(1, 4096));
  train->add_option("--seq-len", to.seq_len, "tokens in the row (loss on every token)")
      ->required()
      ->check(CLI::Range(2, 1 << 20));
  train->add_option("--rank", to.rank, "LoRA rank")->check(CLI::Range(1, 4096));
  train->add_option("--alpha", to.alpha, "LoRA alpha (scaling alpha / rank)")->check(CLI::PositiveNumber);
  train->add_option("--steps", to.steps, "timed steps after one warm-up step")->check(CLI::Range(1, 1000));
  train->add_flag("--remat", to.remat, "recompute each layer's forward pass in the backward pass");
  train->add_flag("--compare-remat", to.compare_remat, "run with remat, then without, and report the saving");
  train->add_flag("--full", to.full, "full fine-tuning: every weight's gradient, no adapter");
  train->add_option("--precision", to.precision, "bf16: bf16 activations against bf16 weights (the default); f32")
      ->check(CLI::IsMember({"bf16", "f32"}));
  train->add_option("--threads", to.threads, "threads (0: all cores)")->check(CLI::Range(0, 1024));
  train->add_option("--targets", targets, "projections carrying a LoRA, comma-separated");
  train->add_flag("--json", train_json, "print one JSON object instead of the table");
  train->add_option("--tp", to.tp, "under mpirun -np N: the N ranks train the row together, tensor parallel")
      ->check(CLI::Range(1, 4096));
  TorchAnchorOptions torch;
  bool compare_torch = false;
  std::string torch_dtypes = "bf16,fp32";
  train->add_flag("--compare-torch", compare_torch,
                  "alternate with the tuned PyTorch anchor (bench/train_torch_eager.py) and print the ratio");
  train->add_option("--torch-script", torch.script, "the anchor script (default bench/train_torch_eager.py)");
  train->add_option("--torch-python", torch.python, "the Python with torch (default /usr/bin/python3)");
  train->add_option("--torch-dtypes", torch_dtypes, "the anchor's dtypes, comma-separated (bf16, fp32)");
  train->add_option("--alternations", torch.alternations, "gemmakit/PyTorch alternations (median reported)")
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  if (train->parsed()) {
    auto device = ParseDeviceSpec(train_device);
    if (!device.ok()) return Fail(device.status());
    if (device->kind == DeviceKind::kCuda) {
      if (Status st = CheckDeviceAvailable(*device); !st.ok()) return Fail(st);
      if (to.model_dir.empty() == train_preset.empty()) return Fail("bench train --device cuda needs --model DIR or --preset NAME");
      // What the GPU trainer does not run is refused, not ignored (it runs LoRA on all seven
      // projections with remat, in one process: the layout `plan --train` estimates).
      for (const auto& [given, what] : {std::pair{to.full, "--full (full fine-tuning)"},
                                        std::pair{to.compare_remat, "--compare-remat (the GPU always recomputes)"},
                                        std::pair{compare_torch, "--compare-torch"},
                                        std::pair{to.tp > 1, "--tp"},
                                        std::pair{bool(train->count("--targets")), "--targets (the GPU trains all seven projections)"}}) {
        if (given) return Fail(StrCat("bench train --device cuda: ", what, " runs on the CPU only"));
      }
#ifdef GK_HAVE_CUDA
      GpuTrainBenchOptions g;
      g.model_dir = to.model_dir;
      g.preset = train_preset;
      g.num_layers = train_layers;
      g.device = device->index;
      g.seq_len = to.seq_len;
      g.rows = train_rows;
      g.rank = train->count("--rank") ? to.rank : 64;  // the reference case's LoRA
      g.alpha = train->count("--alpha") ? to.alpha : double(g.rank);
      g.steps = to.steps;
      g.precision = to.precision;
      auto r = RunGpuTrainBench(g);
      if (!r.ok()) return Fail(r.status());
      std::printf("%s", train_json ? (r->dump() + "\n").c_str() : FormatGpuTrainBench(*r).c_str());
      return 0;
#else
      return Fail("this gemmakit was built without the CUDA backend");
#endif
    }
    if (to.model_dir.empty()) return Fail("bench train needs --model DIR (--preset runs on --device cuda only)");
    to.targets = SplitCommas(targets);
    if (compare_torch) {
      // The default script is the source tree's: from the working directory, else beside the
      // build directory holding this binary (build/gemmakit -> bench/).
      if (!train->get_option("--torch-script")->count() && !std::filesystem::exists(torch.script)) {
        const std::string beside = ExecutableDir() + "/../bench/train_torch_eager.py";
        if (std::filesystem::exists(beside)) torch.script = beside;
      }
      torch.dtypes = SplitCommas(torch_dtypes);
      for (const std::string& d : torch.dtypes) {
        if (d != "bf16" && d != "fp32") return Fail(Status::Error(StrCat("--torch-dtypes: unknown dtype \"", d, "\"")));
      }
      auto c = CompareWithTorch(to, torch);
      if (!c.ok()) return Fail(c.status());
      if (train_json) {
        std::printf("%s\n", TorchComparisonToJson(*c).dump().c_str());
      } else {
        std::printf("%s", FormatTorchComparison(*c, c->last.precision).c_str());
      }
      return 0;
    }
    auto world = dist::World();  // under mpirun: data parallel, scaling against one rank
    if (!world.ok()) return Fail(world.status());
    to.comm = *world;
    auto tr = RunTrainBench(to);
    if (!tr.ok()) {
      const int rc = Fail(tr.status());
      if (to.comm->size() > 1) to.comm->Abort(rc);
      return rc;
    }
    if (to.comm->rank() != 0) return 0;  // rank 0 reports
    if (train_json) {
      std::printf("%s\n", TrainBenchToJson(*tr).dump().c_str());
    } else {
      std::printf("%s", FormatTrainBench(*tr).c_str());
    }
    return 0;
  }
  engine.Apply();
  if (Status st = engine.CheckDevice(); !st.ok()) return Fail(st);
  if (o.model_dir.empty() && preset.empty()) return Fail("bench model needs --model DIR (or, with --device cuda, --preset NAME)");
  if (num_layers > 0 && preset.empty()) return Fail("--num-layers takes a --preset's first layers; a --model runs whole");
  // A flag the device's benchmark does not use is refused, not ignored.
  const bool gpu = engine.device != "cpu";
  for (const char* flag : gpu ? std::vector<const char*>{"--mmap", "--no-tp-baseline"}
                              : std::vector<const char*>{"--prefill-attention", "--decode-products", "--batch-prompt",
                                                         "--gpu-memory-utilization", "--enforce-eager"}) {
    if (model->count(flag) > 0) {
      return Fail(StrCat("bench model: ", flag, gpu ? " runs on the CPU only" : " takes --device cuda"));
    }
  }
  if (engine.batch_invariant && (decode_products == "gemv" || prefill_attention == "flash")) {
    return Fail("bench model: --batch-invariant runs every product through cuBLASLt and every row through the paged kernel; "
                "it takes neither --decode-products gemv nor --prefill-attention flash");
  }
  if (gpu) {
#ifdef GK_HAVE_CUDA
    GpuModelBenchOptions g;
    g.model_dir = o.model_dir;
    g.preset = preset;
    g.num_layers = num_layers;
    g.device = ParseDeviceSpec(engine.device)->index;
    // The GPU figures' defaults are the issue's: a 4,096-token prefill and the 64-prompt burst.
    g.prompt_len = model->count("--prompt-len") ? o.prompt_len : 4096;
    g.gen_len = o.gen_len;
    g.batch = model->count("--batch") ? o.batch : 64;
    g.batch_prompt = batch_prompt;
    g.repeats = o.repeats;
    g.gpu_memory_utilization = engine.gpu_memory_utilization;
    g.cuda_graphs = !engine.enforce_eager;
    g.batch_invariant = engine.batch_invariant;
    g.flash_prefill = prefill_attention == "flash";
    g.gemv_decode = decode_products == "gemv";
    auto r = RunGpuModelBench(g);
    if (!r.ok()) return Fail(r.status());
    std::printf("%s", json ? (r->dump() + "\n").c_str() : FormatGpuModelBench(*r).c_str());
    return 0;
#else
    return Fail("this gemmakit was built without the CUDA backend");
#endif
  }
  if (!preset.empty()) {
    return Fail(StrCat("--preset runs on --device cuda only; for the CPU write the model first: gemmakit init --preset ",
                       preset, " --out DIR"));
  }
  o.threads = engine.threads;
  o.load_mode = mmap ? WeightLoadMode::kMmap : WeightLoadMode::kCopy;
  o.quantize = engine.Quantize();
  auto tp = engine.TensorParallelGroup();
  if (!tp.ok()) return Fail(tp.status());
  o.tp = *tp;
  o.tp_baseline = !no_baseline;
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
