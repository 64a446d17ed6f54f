// Named model shapes for `gemmakit init`: the released Gemma 4 sizes, Gemma 3 shapes for
// comparisons with other engines, and tiny models that exercise every feature in tests.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "util/result.h"

namespace gk {

// tiny      Gemma 4 31B's features at toy width: sliding + full layers, K=V full layers,
//           proportional partial RoPE, GQA, layer scalars, softcap; the real 262,144 vocabulary.
// tiny-e2b  the E2B features: per-layer embeddings, KV sharing, double-wide MLP.
// tiny-moe  the 26B-A4B feature: a mixture-of-experts block beside the dense MLP.
// e2b, e4b, 31b, gemma3-270m, gemma3-1b: the real shapes.
Result<ModelConfig> PresetConfig(const std::string& name);
// The preset's first num_layers layers (0: all), with the same tensor shapes: a 31B-shaped model
// that fits a disk or a GPU. KV-shared layers (E2B/E4B) keep their share of the layers.
// Errors: an unknown name, more layers than the preset has.
Result<ModelConfig> PresetConfig(const std::string& name, int num_layers);
std::vector<std::string> PresetNames();

}  // namespace gk
