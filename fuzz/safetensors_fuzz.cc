// libFuzzer target for the safetensors reader (src/formats/safetensors.h): the input is a whole
// file; a header that validates must let every tensor be read (bounded) without a crash.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/gk_safetensors_fuzz_" + std::to_string(getpid()) + ".safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto file = gk::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  for (const gk::TensorInfo& t : (*file)->tensors()) {
    if (t.nbytes > (1u << 20)) continue;
    std::vector<uint8_t> buf(t.nbytes);
    (void)(*file)->ReadInto(t, buf.data());
  }
  return 0;
}
