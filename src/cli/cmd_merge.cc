// gemmakit merge --base DIR (--adapter PEFT_DIR | --orbax ITEM_DIR [--alpha A]) --out DIR
// Merges a LoRA into a copy of a Hugging Face checkpoint (tools/bridge/merge.h), streaming.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/common.h"
#include "model/lora_source.h"
#include "tools/bridge/merge.h"

namespace gk::cli {

int RunMerge(int argc, char** argv) {
  CLI::App app{"Merge a LoRA adapter into a Hugging Face checkpoint: W += (alpha/r)·B·A in float32, rounded once"};
  std::string base, adapter, orbax, out;
  app.add_option("--base", base, "base checkpoint (Hugging Face directory)")->required();
  auto* a = app.add_option("--adapter", adapter, "PEFT adapter directory (adapter_config.json + adapter_model.safetensors)");
  auto* o = app.add_option("--orbax", orbax, "Tunix/Qwix LoRA checkpoint: an Orbax item directory (STEP/model_params)");
  a->excludes(o);
  double alpha = 0;
  app.add_option("--alpha", alpha, "--orbax: the LoRA alpha of the Tunix run (Qwix stores none; default: the rank, scale 1)");
  app.add_option("--out", out, "output directory (must not exist)")->required();
  CLI11_PARSE(app, argc, argv);
  if (adapter.empty() && orbax.empty()) return Fail("merge: give --adapter PEFT_DIR or --orbax ITEM_DIR");
  Result<std::unique_ptr<LoraSource>> src =
      adapter.empty() ? OpenQwixLoraSource(orbax, base, alpha) : OpenPeftLoraSource(adapter);
  if (!src.ok()) return Fail(src.status());
  ConversionProgress progress("merge");
  auto rep = bridge::MergeLora(base, **src, out, &progress);
  if (!rep.ok()) return Fail(rep.status());
  progress.Finish();
  const double gb = double(rep->bytes_written) / 1e9;
  std::printf("merged %s into %s: %lld of %lld tensors changed, %lld file(s), %.2f GB in %.2f s (%.2f GB/s); "
              "peak RSS %.2f GB, largest tensor %.2f GB\n",
              (*src)->Describe().c_str(), out.c_str(), static_cast<long long>(rep->merged_tensors),
              static_cast<long long>(rep->tensors), static_cast<long long>(rep->files), gb, rep->seconds,
              gb / std::max(rep->seconds, 1e-9), double(rep->peak_rss_bytes) / 1e9,
              double(rep->largest_tensor_bytes) / 1e9);
  return 0;
}

}  // namespace gk::cli
