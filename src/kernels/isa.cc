#include "kernels/isa.h"

#include <atomic>
#include <cstdlib>

namespace gk {
namespace {

std::atomic<int> g_forced{-1};

Isa Cap(Isa want) { return int(want) < int(BestSupportedIsa()) ? want : BestSupportedIsa(); }

}  // namespace

Isa BestSupportedIsa() {
  static const Isa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {
      return Isa::kAvx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
    return Isa::kScalar;
  }();
  return best;
}

Isa ActiveIsa() {
  int forced = g_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return Isa(forced);
  static const Isa from_env = [] {
    const char* e = std::getenv("GEMMAKIT_ISA");
    Isa isa;
    if (e && ParseIsa(e, &isa)) return Cap(isa);
    return BestSupportedIsa();
  }();
  return from_env;
}

void SetActiveIsa(Isa isa) { g_forced.store(int(Cap(isa))); }

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

bool ParseIsa(std::string_view name, Isa* out) {
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (IsaName(i) == name) {
      *out = i;
      return true;
    }
  }
  return false;
}

}  // namespace gk
