// libFuzzer target for training recipes (src/engines/train/recipe.h): the input is the TOML
// file, parsed, validated and written back as JSON; each of its lines is also applied to the
// default recipe as a --set override.
#include <cstdint>
#include <string>
#include <vector>

#include "engines/train/recipe.h"
#include "fuzz_util.h"

using namespace gk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::AsText(data, size));
  auto r = train::ParseRecipe(text, "fuzz.toml");
  if (r.ok()) {
    Status v = train::ValidateRecipe(*r);
    fuzz::Check(v.ok() || !v.message().empty());
    (void)r->ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    fuzz::Check(!r.message().empty());
  }
  std::vector<std::string> overrides;
  for (size_t pos = 0; pos < text.size() && overrides.size() < 16;) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    overrides.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  train::TrainRecipe recipe;
  if (train::ApplyOverrides(recipe, overrides).ok()) (void)train::ValidateRecipe(recipe);
  return 0;
}
