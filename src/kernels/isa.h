// Instruction-set selection for the SIMD kernels, chosen once at run time from CPUID.
// GEMMAKIT_ISA=scalar|avx2|avx512 forces a lower path (tests use it to compare every path).
#pragma once

#include <string_view>

namespace gk {

enum class Isa { kScalar, kAvx2, kAvx512 };

Isa BestSupportedIsa();  // what this CPU can run
Isa ActiveIsa();         // BestSupportedIsa() capped by GEMMAKIT_ISA or SetActiveIsa
void SetActiveIsa(Isa isa);  // for tests and benchmarks; capped at BestSupportedIsa()
std::string_view IsaName(Isa isa);
bool ParseIsa(std::string_view name, Isa* out);

}  // namespace gk
