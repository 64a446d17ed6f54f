// One kernel launch as the emulator runs it (kernel_runner.cc), and as a captured graph keeps it.
#pragma once

#include "cuda_emulator.h"

namespace gk_emu {

struct KernelCall {
  const char* name = "";
  dim3 grid, block;
  size_t smem = 0;
  Entry entry = nullptr;
  void* closure = nullptr;  // the kernel's parameters
};

// Runs every block of the launch to completion on this OS thread.
void ExecuteKernel(const KernelCall& k);

}  // namespace gk_emu
