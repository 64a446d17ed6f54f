// Test support (included by *_test.cc only): a LoRA adapter as training leaves one, with B != 0
// so that every path carries a delta (and gradient); PEFT's own init has B = 0.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "model/train/lora.h"

namespace gk {

// The projections `options` selects: A from PEFT's init seeded `seed`, B ~ N(0, b_std) from a
// std::mt19937_64 seeded seed + 1 (module order, row-major).
inline LoraAdapter RandomLoraAdapter(const ModelConfig& c, const std::string& prefix, const LoraOptions& options,
                                     uint64_t seed, float b_std) {
  auto a = LoraAdapter::Create(c, prefix, options);
  EXPECT_TRUE(a.ok()) << a.message();
  a->InitPeft(seed);
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> nd(0.f, b_std);
  for (LoraModule& m : a->modules()) {
    for (float& v : m.b) v = nd(rng);
  }
  return std::move(*a);
}

}  // namespace gk
