#include "cli/common.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "dist/communicator.h"
#include "kernels/device.h"
#include "kernels/matmul.h"
#include "model/load_runner.h"
#include "util/guarded_parse.h"

namespace gk::cli {

namespace {
// Set by a tensor-parallel run: a rank that stopped alone would leave the others waiting in
// their next collective, so an error on any rank ends every rank.
dist::Communicator* g_abort_world_on_fail = nullptr;
}  // namespace

// One line whatever the message quotes (a tensor name with a newline, a NUL byte).
int Fail(const std::string& message) {
  std::fprintf(stderr, "gemmakit: error: %s\n", OneLine(message).c_str());
  if (g_abort_world_on_fail != nullptr) g_abort_world_on_fail->Abort(1);
  return 1;
}

int Fail(const Status& status) { return Fail(status.message()); }

std::string ExecutableDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  return std::filesystem::path(buf).parent_path().string();
}

std::string DefaultTokenizerDir() {
  if (const char* e = std::getenv("GEMMAKIT_TOKENIZER_DIR")) return e;
  return ExecutableDir() + "/tokenizer/gemma3";
}

Result<Tokenizer> LoadModelTokenizer(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer.json";
  if (!std::filesystem::exists(path)) {
    return Result<Tokenizer>::Error(StrCat(path, " not found; the model directory needs its tokenizer.json"));
  }
  return Tokenizer::Load(path);
}

void EngineFlags::AddTo(CLI::App& app, bool tensor_parallel) {
  app.add_option("--device", device, "where the model runs: cpu (default), cuda or cuda:N (`gemmakit devices` lists them)");
  app.add_flag("--enforce-eager", enforce_eager,
               "--device cuda: launch every step's kernels one by one, without replaying decode steps as CUDA graphs "
               "(vLLM's flag)");
  app.add_flag("--batch-invariant", batch_invariant,
               "--device cuda: a greedy request gives the same text alone and in any batch (one cuBLASLt algorithm per "
               "weight, no split-K, attention split at fixed lengths; slower), as vLLM's VLLM_BATCH_INVARIANT=1");
  app.add_option("--threads", threads, "worker threads (0 = all cores)");
  app.add_option("--quantize", quantize, "quantize the weights at load: none or q8_0 (int8, block scales)")
      ->check(CLI::IsMember({"none", "q8_0"}));
  app.add_option("--bf16-activations", activations,
                 "round: activations rounded to bf16 against bf16 weights, as PyTorch, vLLM and llama.cpp compute "
                 "(the default); split: f32-accurate products, slower prefill")
      ->check(CLI::IsMember({"split", "round"}));
  if (!tensor_parallel) return;
  app.add_option("--tp", tp, "tensor parallelism: split the model over the N ranks of `mpirun -np N`")
      ->check(CLI::Range(1, 4096));
}

void EngineFlags::Apply() const {
  if (!activations.empty()) {
    SetBf16Activations(activations == "round" ? Bf16Activations::kRound : Bf16Activations::kSplit);
  } else if (std::getenv("GEMMAKIT_BF16_ACTIVATIONS") == nullptr) {
    // The commands' default is round (README, "Numerics of bf16 models"); the library's, which the
    // oracle tests use, stays split.
    SetBf16Activations(Bf16Activations::kRound);
  }
}

QuantType EngineFlags::Quantize() const { return *ParseQuantType(quantize); }

Status EngineFlags::CheckDevice() const {
  GK_ASSIGN_OR_RETURN(DeviceSpec spec, ParseDeviceSpec(device));
  GK_RETURN_IF_ERROR(CheckDeviceAvailable(spec));
  if (spec.kind == DeviceKind::kCuda) {
    if (Quantize() != QuantType::kNone) {
      return Status::Error(StrCat("--quantize runs on the CPU only; --device ", spec.ToString(), " takes bf16 or f32 weights"));
    }
    if (tp > 1) return Status::Error(StrCat("--tp runs on CPUs only; --device ", spec.ToString(), " runs on one GPU"));
  } else if (batch_invariant) {
    return Status::Error("--batch-invariant takes --device cuda: on the CPU a row's sums do not depend on its batch already");
  }
  return Status::Ok();
}

Result<RunnerOptions> EngineFlags::Runner(const ModelLoadOptions& lo) const {
  RunnerOptions o;
  GK_ASSIGN_OR_RETURN(o.device, ParseDeviceSpec(device));
  o.cpu = lo;
  o.gpu_memory_utilization = gpu_memory_utilization;
  o.cuda_graphs = !enforce_eager;
  o.batch_invariant = batch_invariant;
  return o;
}

Result<std::unique_ptr<ModelRunner>> EngineFlags::LoadRunner(const std::string& model_dir, ThreadPool* pool,
                                                             const ModelLoadOptions& lo) const {
  GK_ASSIGN_OR_RETURN(const RunnerOptions o, Runner(lo));
  return LoadModelRunner(model_dir, pool, o);
}

Result<std::unique_ptr<ModelRunner>> EngineFlags::RandomRunner(const ModelConfig& config, const ModelLoadOptions& lo) const {
  GK_ASSIGN_OR_RETURN(const RunnerOptions o, Runner(lo));
  return RandomModelRunner(config, o);
}

Result<TensorParallel> EngineFlags::TensorParallelGroup() const {
  if (tp < 1) return Status::Error(StrCat("--tp must be at least 1, got ", tp));
  if (tp == 1 && !dist::LaunchedByMpi()) return TensorParallel{};
  GK_ASSIGN_OR_RETURN(dist::Communicator * world, dist::World());
  if (world->size() != tp) {
    return Status::Error(StrCat("--tp ", tp, " needs exactly ", tp, " ranks (mpirun -np ", tp, "); this run has ",
                                world->size(), tp == 1 ? " (give --tp N to split the model over the ranks)" : ""));
  }
  if (tp == 1) return TensorParallel{};
  if (world->rank() != 0) {  // rank 0 alone prints results
    if (std::freopen("/dev/null", "w", stdout) == nullptr) return Status::Error("cannot silence stdout on rank > 0");
  }
  g_abort_world_on_fail = world;
  return TensorParallel{world, world->rank(), world->size()};
}

Result<std::vector<int32_t>> ParseIdList(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != 0 || v < 0 || v > INT32_MAX) {
      return Result<std::vector<int32_t>>::Error(StrCat("--tokens: '", item, "' is not a token id (expected 2,651,1234,...)"));
    }
    ids.push_back(int32_t(v));
    pos = comma + 1;
  }
  return ids;
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    if (comma > pos) out.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

}  // namespace gk::cli
