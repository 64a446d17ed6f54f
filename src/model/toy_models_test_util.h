// Test support (included by *_test.cc only): presets shrunk to toy size, written to a
// per-process temp directory with seeded random weights.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "model/presets.h"
#include "model/random_init.h"
#include "util/test_temp_dir.h"

namespace gk {

// `preset` with a 300-token vocabulary and the given sliding window; Gemma 3 presets also get
// a toy width (64 hidden, 6 layers of which the last is full attention, head dim 32).
inline ModelConfig ToyConfig(const std::string& preset, int sliding_window) {
  ModelConfig c = *PresetConfig(preset);
  c.vocab_size = 300;
  c.vocab_size_per_layer_input = 300;
  c.sliding_window = sliding_window;
  if (c.arch == Arch::kGemma3) {
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_layers = 6;
    c.layer_types.assign(6, LayerType::kSliding);
    c.layer_types[5] = LayerType::kFull;
    c.head_dim = c.global_head_dim = 32;
  }
  return c;
}

// Writes `c` with random weights of `dtype` to TestTempDir(name); returns the directory.
inline std::string WriteToyModel(const ModelConfig& c, const std::string& name, DType dtype, uint64_t seed) {
  const std::string dir = TestTempDir(name);
  RandomModelOptions o;
  o.seed = seed;
  o.dtype = dtype;
  EXPECT_TRUE(WriteRandomModel(c, dir, o).ok());
  return dir;
}

}  // namespace gk
