// A kernel's f32 output also written as bf16, for the products of bf16 weights that read it next
// (GemmRunner::StagingFor and RunStaged): the kernel that makes a product's input converts it as
// it goes, instead of one more launch per product (SplitToBf16). hi is the value rounded to
// bf16; in the split mode lo holds what hi leaves, and lo2 what lo leaves (three terms: exact).
#pragma once

#include <cstdint>

namespace gk::cuda {

struct Bf16Staging {
  uint16_t* hi = nullptr;  // null: no bf16 copy
  uint16_t* lo = nullptr;
  uint16_t* lo2 = nullptr;
};

}  // namespace gk::cuda
