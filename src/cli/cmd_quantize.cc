// gemmakit quantize --model DIR --out DIR [--type q8_0]
// Writes a quantized copy of a checkpoint (format: model/quantize.h) that every command loads
// directly; config and tokenizer files are copied.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/common.h"
#include "model/quantize.h"

namespace gk::cli {

int RunQuantize(int argc, char** argv) {
  CLI::App app{"Write a quantized copy of a checkpoint (int8 weights with a scale per block of 32)."};
  std::string model_dir, out_dir, type = "q8_0";
  app.add_option("--model", model_dir, "model directory (Hugging Face layout)")->required();
  app.add_option("--out", out_dir, "output directory (created; must differ from --model)")->required();
  app.add_option("--type", type, "quantization")->check(CLI::IsMember({"q8_0"}));
  CLI11_PARSE(app, argc, argv);
  ConversionProgress progress("quantize");
  Status s = WriteQuantizedCheckpoint(model_dir, out_dir, *ParseQuantType(type), &progress);
  if (s.ok()) progress.Finish();
  if (!s.ok()) return Fail(s);
  std::fprintf(stderr, "wrote %s (%s)\n", out_dir.c_str(), type.c_str());
  return 0;
}

}  // namespace gk::cli
