// Shared pieces of the subcommands. The CLI is the only layer that prints errors and
// chooses exit codes: one line "gemmakit: error: ..." on stderr and exit status 1.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engines/generate/stop_ids.h"
#include "formats/tokenizer.h"
#include "model/config.h"
#include "model/load_runner.h"
#include "model/quantize.h"
#include "model/tensor_parallel.h"
#include "util/result.h"

namespace gk::cli {

int Fail(const std::string& message);
int Fail(const Status& status);

// The directory of the running executable (for files installed beside it).
std::string ExecutableDir();
// Where `init` finds the Gemma 3 tokenizer fetched by the set-up step:
// --tokenizer-dir, else $GEMMAKIT_TOKENIZER_DIR, else <exe dir>/tokenizer/gemma3.
std::string DefaultTokenizerDir();
// tokenizer.json of a model directory.
Result<Tokenizer> LoadModelTokenizer(const std::string& model_dir);
// StopIds (the ids that end a generation) lives in engines/generate/stop_ids.h.
// The engine flags every model-running command takes: --threads, --quantize none|q8_0 and
// --bf16-activations split|round. Apply() after parsing sets the process-wide kernel mode:
// the flag's, else $GEMMAKIT_BF16_ACTIVATIONS's, else round.
struct EngineFlags {
  std::string device = "cpu";
  int threads = 0;
  std::string quantize = "none";
  std::string activations;
  int tp = 1;
  double gpu_memory_utilization = 0.9;  // --device cuda: share of the GPU's memory (serve and bench model set it)
  bool enforce_eager = false;           // --device cuda: no CUDA graphs
  bool batch_invariant = false;         // --device cuda: CudaModelOptions::batch_invariant
  void AddTo(CLI::App& app, bool tensor_parallel = true);
  void Apply() const;
  QuantType Quantize() const;
  // --device cpu | cuda | cuda:N: one clear line when the device cannot run the model here (no
  // CUDA build, no device, too old a GPU, a CPU-only flag with a GPU).
  Status CheckDevice() const;
  // The model on --device (model/load_runner.h), lo's max_chunk and CPU options applied.
  Result<std::unique_ptr<ModelRunner>> LoadRunner(const std::string& model_dir, ThreadPool* pool,
                                                  const ModelLoadOptions& lo) const;
  // --preset: random weights of config's shape made on --device (a GPU).
  Result<std::unique_ptr<ModelRunner>> RandomRunner(const ModelConfig& config, const ModelLoadOptions& lo) const;
  // --device and --gpu-memory-utilization with lo, as the runner loaders take them.
  Result<RunnerOptions> Runner(const ModelLoadOptions& lo) const;
  // --tp N: every rank of `mpirun -np N` holds 1/N of the model (model/tensor_parallel.h). Ranks
  // other than 0 then print nothing on stdout, and an error on any rank ends them all (Fail).
  // A run under mpirun without --tp, or with another rank count, is refused.
  Result<TensorParallel> TensorParallelGroup() const;
};
// Parses "1,2,3".
Result<std::vector<int32_t>> ParseIdList(const std::string& text);
// "a,b,,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> SplitCommas(const std::string& text);

// Subcommands: each parses its own flags from argv (argv[0] is the subcommand name).
int RunInit(int argc, char** argv);
int RunGenerate(int argc, char** argv);
int RunLogprobs(int argc, char** argv);
int RunBench(int argc, char** argv);
// bench serve / compare / client-check (cmd_bench_serve.cc), dispatched by RunBench.
int RunBenchServe(int argc, char** argv);
int RunBenchCompare(int argc, char** argv);
int RunBenchClientCheck(int argc, char** argv);
int RunQuantize(int argc, char** argv);
int RunServe(int argc, char** argv);
int RunEval(int argc, char** argv);   // eval verilog / eval compare (cmd_eval.cc)
int RunData(int argc, char** argv);   // data synth-verilog / prepare / stats (cmd_data.cc)
int RunTrain(int argc, char** argv);  // train (cmd_train.cc)
int RunMerge(int argc, char** argv);  // merge (cmd_merge.cc)
int RunVerify(int argc, char** argv);  // verify (cmd_verify.cc)
int RunConvert(int argc, char** argv);  // convert --from hf --to gguf (cmd_convert.cc)
int RunReport(int argc, char** argv);   // report RUN_DIR... --out report.html (cmd_report.cc)
int RunCost(int argc, char** argv);     // cost: training/serving $ and TCO; cost --paper (cmd_cost.cc)
int RunPlan(int argc, char** argv);     // plan: sharding, memory per device, roofline (cmd_plan.cc)
int RunDevices(int argc, char** argv);  // devices: the CPU and the CUDA devices (cmd_devices.cc)

}  // namespace gk::cli
