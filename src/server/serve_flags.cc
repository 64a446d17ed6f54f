#include "server/serve_flags.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gk::server {

Result<uint64_t> ParseByteSize(const std::string& text) {
  auto bad = [&] {
    return Result<uint64_t>::Error(StrCat("'", text, "' is not a byte size (examples: 4294967296, 4GiB, 512MiB, 1.5G)"));
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return bad();
  const std::string number = text.substr(0, i);
  char* end = nullptr;
  const double v = std::strtod(number.c_str(), &end);
  if (*end != 0 || !std::isfinite(v) || v < 0) return bad();
  std::string unit;
  for (size_t k = i; k < text.size(); ++k) {
    if (text[k] != ' ') unit += char(std::tolower(static_cast<unsigned char>(text[k])));
  }
  double mult = 1;
  if (!unit.empty() && unit != "b") {
    const char* kPrefixes = "kmgt";
    const char* p = std::strchr(kPrefixes, unit[0]);
    if (!p || unit[0] == 0) return bad();
    const int power = int(p - kPrefixes) + 1;
    const std::string rest = unit.substr(1);
    double base;
    if (rest.empty() || rest == "i" || rest == "ib") {
      base = 1024;
    } else if (rest == "b") {
      base = 1000;
    } else {
      return bad();
    }
    mult = std::pow(base, power);
  }
  const double bytes = v * mult;
  if (bytes >= 1.8e19) return bad();
  return uint64_t(std::llround(bytes));
}

Result<DType> ParseKvCacheDType(const std::string& t) {
  if (t == "auto") return DType::kUnknown;
  if (t == "f32" || t == "float32") return DType::kF32;
  if (t == "f16" || t == "float16" || t == "half") return DType::kF16;
  if (t == "bf16" || t == "bfloat16") return DType::kBF16;
  if (t == "fp8" || t == "fp8_e4m3") return DType::kFp8E4m3;
  if (t == "fp8_e5m2") return DType::kFp8E5m2;
  return Result<DType>::Error(
      StrCat("--kv-cache-dtype '", t, "' is not one of auto, f32, f16, bf16, fp8, fp8_e4m3, fp8_e5m2"));
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * uint64_t(sysconf(_SC_PAGE_SIZE)) : 0;
}

}  // namespace gk::server
