// libFuzzer target for config.json (src/model/config.h): the input is the file. A config that
// parses is valid (ValidateModelConfig), its per-layer queries answer for every layer, and it
// writes back (ModelConfigToJson) as a config that parses again.
#include <cstdint>

#include "fuzz_util.h"
#include "model/config.h"
#include "util/guarded_parse.h"

using namespace gk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j = ParseJson(fuzz::AsText(data, size), "config.json");
  if (!j.ok()) return 0;
  auto c = ParseModelConfig(*j);
  if (!c.ok()) {
    fuzz::Check(!c.message().empty());
    return 0;
  }
  fuzz::Check(ValidateModelConfig(*c).ok());
  for (int l = 0; l < c->num_layers; ++l) {
    (void)c->HeadDim(l), (void)c->KvHeads(l), (void)c->MlpWidth(l), (void)c->KvSourceLayer(l), (void)c->Rope(l);
  }
  (void)c->MaxHeadDim(), (void)c->MaxKvHeads();
  auto again = ParseModelConfig(ModelConfigToJson(*c));
  fuzz::Check(again.ok());
  return 0;
}
