// gemmakit verify A B [--config DIR] [--alpha A] [--logits] [--atol X] [--all]
// Tensor-by-tensor comparison of two checkpoints in any supported formats
// (tools/bridge/verify.h); exit 0 when they hold the same tensors within --atol, 1 otherwise.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/common.h"
#include "tools/bridge/verify.h"

namespace gk::cli {

int RunVerify(int argc, char** argv) {
  CLI::App app{"Compare two checkpoints (Hugging Face, PEFT, Tunix Orbax, Qwix LoRA, GGUF) tensor by tensor"};
  std::string a, b;
  bridge::VerifyOptions o;
  double atol = 0;
  bool all = false;
  app.add_option("A", a, "first checkpoint")->required();
  app.add_option("B", b, "second checkpoint")->required();
  app.add_option("--config", o.config_dir, "the Hugging Face config (directory) of Orbax/Qwix trees");
  app.add_option("--alpha", o.alpha, "Qwix LoRA alpha (default: the rank)");
  app.add_flag("--logits", o.logits, "also run both models on a prompt and compare their logits");
  app.add_option("--atol", atol, "largest absolute difference still counted as equal (default 0: exact)");
  app.add_flag("--all", all, "list every tensor, not only the 10 with the largest differences");
  CLI11_PARSE(app, argc, argv);
  auto rep = bridge::VerifyCheckpoints(a, b, o);
  if (!rep.ok()) return Fail(rep.status());
  std::printf("A: %s (%s)\nB: %s (%s)\n", a.c_str(), rep->format_a.c_str(), b.c_str(), rep->format_b.c_str());
  std::vector<const bridge::TensorDiff*> shown;
  for (const auto& d : rep->tensors) shown.push_back(&d);
  std::stable_sort(shown.begin(), shown.end(), [](const auto* x, const auto* y) {
    return (!x->problem.empty()) > (!y->problem.empty()) || (x->problem.empty() == y->problem.empty() && x->max_abs > y->max_abs);
  });
  if (!all && shown.size() > 10) shown.resize(10);
  std::printf("| tensor | max abs diff | max rel diff |\n|---|---|---|\n");
  for (const auto* d : shown) {
    if (!d->problem.empty()) std::printf("| %s | %s | |\n", d->name.c_str(), d->problem.c_str());
    else std::printf("| %s | %.3g | %.3g |\n", d->name.c_str(), d->max_abs, d->max_rel);
  }
  std::printf("%zu tensors; only in A %lld, only in B %lld, shape mismatches %lld; max abs diff %.3g, max rel diff %.3g\n",
              rep->tensors.size(), static_cast<long long>(rep->only_a), static_cast<long long>(rep->only_b),
              static_cast<long long>(rep->mismatched), rep->max_abs, rep->max_rel);
  if (rep->logits_compared) {
    std::printf("logits on a %zu-token prompt: max abs diff %.3g, max rel diff %.3g\n", o.prompt.size(),
                rep->logits_max_abs, rep->logits_max_rel);
  }
  const bool same = rep->only_a == 0 && rep->only_b == 0 && rep->mismatched == 0 && rep->max_abs <= atol;
  std::printf("%s\n", same ? "same" : "different");
  return same ? 0 : 1;
}

}  // namespace gk::cli
