// gemmakit: one binary, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/common.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int, char**);
};

const Command kCommands[] = {
    {"devices", "the CPU and the CUDA devices models can run on (--device cpu|cuda|cuda:N)", gk::cli::RunDevices},
    {"init", "write a model with seeded random weights in Hugging Face layout", gk::cli::RunInit},
    {"generate", "generate text from a prompt or a chat message", gk::cli::RunGenerate},
    {"logprobs", "per-position log-probabilities and argmax of a text or token list", gk::cli::RunLogprobs},
    {"bench", "benchmarks: bench model (speed vs the machine's limits), bench serve (like vllm bench serve), bench compare", gk::cli::RunBench},
    {"quantize", "write a quantized copy of a checkpoint (q8_0: int8 weights, a scale per 32)", gk::cli::RunQuantize},
    {"serve", "an OpenAI-compatible HTTP server (continuous batching, paged KV cache)", gk::cli::RunServe},
    {"data", "data synth-verilog (spec-to-RTL tasks, no download), data prepare (tokenize SFT rows), data stats", gk::cli::RunData},
    {"train", "LoRA fine-tuning from a TOML recipe (checkpoints, resume, metrics)", gk::cli::RunTrain},
    {"merge", "merge a LoRA (PEFT or Tunix/Qwix Orbax) into a Hugging Face checkpoint, streaming", gk::cli::RunMerge},
    {"convert", "convert a checkpoint: hf -> gguf (llama.cpp / Ollama) or orbax (Tunix), orbax -> hf or gguf, peft <-> qwix", gk::cli::RunConvert},
    {"verify", "compare two checkpoints (HF, PEFT, Orbax, Qwix, GGUF) tensor by tensor, optionally their logits", gk::cli::RunVerify},
    {"eval", "eval verilog: verilog-eval with iverilog (sandboxed) and pass@k; eval compare", gk::cli::RunEval},
    {"report", "compare runs (training, eval, serving, cost) in one HTML page and a Markdown twin", gk::cli::RunReport},
    {"cost", "training and serving cost ($/1M tokens, TCO) from run artifacts; cost --paper checks the reference case", gk::cli::RunCost},
    {"plan", "sharding plan, memory per device, KV capacity and roofline projections on a catalog machine", gk::cli::RunPlan},
};

void Usage(FILE* out) {
  std::fprintf(out, "usage: gemmakit <command> [options]   (gemmakit <command> --help for its options)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    Usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::string(argv[1]) == c.name) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "gemmakit: error: unknown command '%s' (run gemmakit --help)\n", argv[1]);
  return 2;
}
