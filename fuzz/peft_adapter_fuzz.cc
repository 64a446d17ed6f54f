// libFuzzer target for PEFT adapters: adapter_config.json NUL adapter_model.safetensors, read
// by the trainer (LoraAdapter::LoadPeft, src/model/train/lora.h) and by merge
// (OpenPeftLoraSource, src/model/lora_source.h) against a tiny Gemma 4 config; every
// module's factors are then read, and the source checked against the model as a server checks
// a Qwix item's (LoraAdapter::FromSource).
#include <cstdint>

#include "model/lora_source.h"
#include "model/train/lora.h"
#include "tiny_config.h"

using namespace gk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::SplitNul(fuzz::AsText(data, size), 2);
  if (parts.size() != 2) return 0;
  const std::string& dir = fuzz::FreshDir("peft");
  fuzz::WriteBytes(dir + "/adapter_config.json", parts[0]);
  fuzz::WriteBytes(dir + "/adapter_model.safetensors", parts[1]);
  auto a = LoraAdapter::LoadPeft(dir, fuzz::TinyConfig(), "model.language_model.");
  if (a.ok()) {
    fuzz::Check(a->ParameterCount() > 0);
  } else {
    fuzz::Check(!a.message().empty());
  }
  auto src = OpenPeftLoraSource(dir);
  if (!src.ok()) return 0;
  (void)(*src)->Describe();
  auto checked = LoraAdapter::FromSource(**src, fuzz::TinyConfig(), "model.language_model.");
  fuzz::Check(checked.ok() ? checked->ParameterCount() > 0 : !checked.message().empty());
  for (const std::string& m : (*src)->Modules()) {
    auto f = (*src)->Factors(m);
    if (f.ok()) fuzz::Check(int64_t(f->a.size()) == f->rank * f->in && int64_t(f->b.size()) == f->out * f->rank);
  }
  return 0;
}
