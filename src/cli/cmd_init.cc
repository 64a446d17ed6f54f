// gemmakit init --preset NAME --out DIR [--seed N] [--dtype bf16|f32] [--no-weights] [--num-layers N]
#include <CLI/CLI.hpp>
#include <filesystem>

#include "cli/common.h"
#include "formats/gemma4_tokens.h"
#include "model/presets.h"
#include "model/random_init.h"
#include "util/atomic_file.h"

namespace gk::cli {
namespace {

// Copies the Gemma 3 tokenizer files, relabelled with Gemma 4's control-token names for
// Gemma 4 models.
Status WriteTokenizer(const std::string& from_dir, const std::string& out_dir, Arch arch) {
  GK_ASSIGN_OR_RETURN(std::string json, ReadFile(from_dir + "/tokenizer.json"));
  if (arch == Arch::kGemma4) {
    GK_ASSIGN_OR_RETURN(json, RenameToGemma4Tokens(json));
  }
  GK_RETURN_IF_ERROR(WriteFileAtomic(out_dir + "/tokenizer.json", json));
  auto config = ReadFile(from_dir + "/tokenizer_config.json");
  if (config.ok()) {
    std::string text = *config;
    if (arch == Arch::kGemma4) {
      GK_ASSIGN_OR_RETURN(text, RenameToGemma4TokenizerConfig(text));
    }
    GK_RETURN_IF_ERROR(WriteFileAtomic(out_dir + "/tokenizer_config.json", text));
  }
  return Status::Ok();
}

}  // namespace

int RunInit(int argc, char** argv) {
  CLI::App app{"Write a model in Hugging Face layout (config.json, model.safetensors, tokenizer) with seeded random weights."};
  std::string preset, out, dtype = "bf16", tokenizer_dir = DefaultTokenizerDir();
  uint64_t seed = 0;
  bool no_weights = false;
  std::string presets;
  for (const auto& n : PresetNames()) presets += (presets.empty() ? "" : ", ") + n;
  app.add_option("--preset", preset, "model shape: " + presets)->required();
  app.add_option("--out", out, "output directory")->required();
  app.add_option("--seed", seed, "random seed (same seed, same bytes)");
  app.add_option("--dtype", dtype, "weight dtype")->check(CLI::IsMember({"bf16", "f32"}));
  app.add_flag("--no-weights", no_weights, "write only config files (for planning with the real shapes)");
  int num_layers = 0;
  app.add_option("--num-layers", num_layers,
                 "keep the preset's tensor shapes but only its first N layers (e.g. a 31B-shaped checkpoint that fits a disk)")
      ->check(CLI::PositiveNumber);
  app.add_option("--tokenizer-dir", tokenizer_dir, "directory holding the Gemma 3 tokenizer.json to install");
  CLI11_PARSE(app, argc, argv);

  auto config = PresetConfig(preset, num_layers);
  if (!config.ok()) return Fail(config.status());
  RandomModelOptions o;
  o.seed = seed;
  o.dtype = dtype == "f32" ? DType::kF32 : DType::kBF16;
  o.write_weights = !no_weights;
  const bool have_tokenizer = std::filesystem::exists(tokenizer_dir + "/tokenizer.json");
  if (!have_tokenizer && !no_weights) {
    return Fail(StrCat("no tokenizer.json in ", tokenizer_dir,
                       "; run `make deps` (scripts/fetch_tokenizer.sh) or pass --tokenizer-dir"));
  }
  Status s = WriteRandomModel(*config, out, o);
  if (!s.ok()) return Fail(s);
  if (have_tokenizer) {
    s = WriteTokenizer(tokenizer_dir, out, config->arch);
    if (!s.ok()) return Fail(s);
  }
  std::fprintf(stderr, "wrote %s model to %s: %.3f B parameters%s\n", preset.c_str(), out.c_str(),
               double(config->ParameterCount()) / 1e9, no_weights ? " (config only)" : "");
  return 0;
}

}  // namespace gk::cli
