// libFuzzer target for the GGUF reader (src/formats/gguf.h): the input is a whole file.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/gk_gguf_fuzz_" + std::to_string(getpid()) + ".gguf";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  (void)gk::GgufFile::Open(path);
  return 0;
}
