// gemmakit convert --from FORMAT --to FORMAT --in PATH --out PATH [options of the pair]
// One front end for the checkpoint converters of tools/bridge/. Each (from, to) pair is one
// row of kConverters; a pair with no row is refused as not supported yet.
//   hf -> gguf: a Hugging Face Gemma 4 / Gemma 3 directory as one GGUF file for llama.cpp and
//               Ollama (tools/bridge/gguf_export.h), --gguf-type auto|f32|bf16|f16|q8_0.
//   orbax -> gguf: a Tunix Gemma tree (with --config) through a temporary Hugging Face directory.
//   hf -> orbax, orbax -> hf, peft -> qwix, qwix -> peft: tools/bridge/convert.h (Tunix layout;
//               --config gives the Hugging Face config an Orbax item lacks; --step the step).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "cli/common.h"
#include "model/config.h"
#include "tools/bridge/convert.h"
#include "tools/bridge/gguf_export.h"
#include "util/progress.h"

namespace gk::cli {
namespace {

// Options of every pair; each converter reads the ones it understands.
struct ConvertArgs {
  std::string from, to, in, out;
  std::string gguf_type = "auto";
  std::string config;  // Hugging Face directory whose config.json describes an Orbax tree
  int64_t step = 0;
  double alpha = 0;
};

int Report(const ConvertArgs& a, const Result<bridge::ConvertReport>& r) {
  if (!r.ok()) return Fail(r.status());
  std::printf("wrote %s (%s): %lld arrays, %.3f GB\n", a.out.c_str(), r->layout.c_str(),
              static_cast<long long>(r->arrays), double(r->bytes) / 1e9);
  return 0;
}

int HfToOrbax(const ConvertArgs& a) {
  ConversionProgress progress("convert hf -> orbax");
  auto r = bridge::HfToTunixOrbax(a.in, a.out, a.step, &progress);
  if (r.ok()) progress.Finish();
  return Report(a, r);
}
int OrbaxToHf(const ConvertArgs& a) {
  ConversionProgress progress("convert orbax -> hf");
  auto r = bridge::OrbaxToHf(a.in, a.out, a.config, &progress);
  if (r.ok()) progress.Finish();
  return Report(a, r);
}
int PeftToQwix(const ConvertArgs& a) {
  if (a.config.empty()) return Fail("convert --from peft --to qwix: --config BASE_DIR gives the model's shapes");
  return Report(a, bridge::PeftToQwixOrbax(a.in, a.config, a.out, a.step));
}
int QwixToPeft(const ConvertArgs& a) {
  if (a.config.empty()) return Fail("convert --from qwix --to peft: --config BASE_DIR gives the model's shapes");
  return Report(a, bridge::QwixOrbaxToPeft(a.in, a.config, a.out, a.alpha));
}

int WriteGgufFrom(const ConvertArgs& a, const std::string& hf, const std::string& model_name,
                  ConversionProgress& progress) {
  auto type = bridge::ParseGgufType(a.gguf_type);
  if (!type.ok()) return Fail(type.status());
  const auto t0 = std::chrono::steady_clock::now();
  auto plan = bridge::PlanGgufExport(hf, *type, model_name);
  if (!plan.ok()) return Fail(plan.status());
  for (const std::string& note : plan->notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  uint64_t planned = 0;
  for (GgufTensorSpec& t : plan->tensors) {
    auto b = GgmlTensorBytes(uint32_t(t.type), t.ne, t.name);
    if (b.ok()) planned += *b;
    t.fill = progress.Track(std::move(t.fill));
  }
  progress.AddWork(planned, int64_t(plan->tensors.size()));
  Status s = WriteGguf(a.out, plan->kvs, plan->tensors);
  if (!s.ok()) return Fail(s);
  progress.FileDone(a.out);
  progress.Finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(a.out, ec);
  std::printf("wrote %s: %s, %zu tensors, %s, %.2f GB in %.1f s\n", a.out.c_str(), plan->arch.c_str(),
              plan->tensors.size(), std::string(bridge::GgufTypeName(plan->type)).c_str(),
              ec ? 0.0 : double(bytes) / 1e9, secs);
  return 0;
}

int HfToGguf(const ConvertArgs& a) {
  ConversionProgress progress("convert hf -> gguf");
  return WriteGgufFrom(a, a.in, "", progress);
}

// Through a Hugging Face directory beside --out (same file system, removed afterwards): the
// GGUF export reads safetensors. Disk use peaks at twice the model; memory stays one tensor.
int OrbaxToGguf(const ConvertArgs& a) {
  if (a.config.empty()) return Fail("convert --from orbax --to gguf: --config HF_DIR gives the config and tokenizer of the tree");
  namespace fs = std::filesystem;
  const std::string tmp = StrCat(a.out, ".hf-tmp-", getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  ConversionProgress progress("convert orbax -> gguf");  // both phases on one bar
  auto r = bridge::OrbaxToHf(a.in, tmp, a.config, &progress);
  int rc = 0;
  // With a config, OrbaxToHf reads a Gemma tree or fails naming the missing array.
  if (!r.ok()) {
    rc = Fail(r.status());
  } else {
    // general.name as an export from the config's own directory would give it.
    rc = WriteGgufFrom(a, tmp, bridge::GgufModelName(CheckpointDirOf(a.config)), progress);
  }
  fs::remove_all(tmp, ec);
  return rc;
}

struct Converter {
  const char* from;
  const char* to;
  int (*run)(const ConvertArgs&);
};

const Converter kConverters[] = {
    {"hf", "gguf", HfToGguf},
    {"hf", "orbax", HfToOrbax},
    {"orbax", "hf", OrbaxToHf},
    {"orbax", "gguf", OrbaxToGguf},
    {"peft", "qwix", PeftToQwix},
    {"qwix", "peft", QwixToPeft},
};

}  // namespace

int RunConvert(int argc, char** argv) {
  CLI::App app{"Convert a checkpoint between formats: hf -> gguf|orbax, orbax -> hf|gguf, peft <-> qwix (docs/BRIDGE.md)."};
  ConvertArgs a;
  app.add_option("--from", a.from, "source format: hf (safetensors directory or one .safetensors file), orbax (item or step directory), peft, qwix")
      ->required();
  app.add_option("--to", a.to, "target format: gguf (one file for llama.cpp / Ollama), hf, orbax (a checkpoint root), peft, qwix")
      ->required();
  app.add_option("--in", a.in, "source path")->required();
  app.add_option("--out", a.out, "target path")->required();
  app.add_option("--gguf-type", a.gguf_type,
                 "gguf: element type of the matrices: auto (the checkpoint's bf16/f16, else f16), f32, bf16, f16, "
                 "q8_0 (norms and 1-D tensors stay f32)")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "f16", "q8_0"}));
  app.add_option("--config", a.config,
                 "orbax/qwix: the Hugging Face directory whose config.json (and tokenizer) the tree belongs to; "
                 "orbax -> hf without it dumps the arrays under their tree paths");
  app.add_option("--step", a.step, "-> orbax/qwix: the step directory to write (default 0)");
  app.add_option("--alpha", a.alpha, "qwix -> peft: the LoRA alpha of the Tunix run (Qwix stores none; default: the rank)");
  CLI11_PARSE(app, argc, argv);
  std::string pairs;
  for (const Converter& c : kConverters) {
    if (a.from == c.from && a.to == c.to) return c.run(a);
    pairs += StrCat(pairs.empty() ? "" : ", ", c.from, " -> ", c.to);
  }
  return Fail(StrCat("convert --from ", a.from, " --to ", a.to, " is not supported yet (supported: ", pairs, ")"));
}

}  // namespace gk::cli
