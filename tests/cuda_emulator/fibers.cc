#include "fibers.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

static_assert(sizeof(void*) == 8, "the emulator's fibers are written for x86-64");

// rbp, rbx, r12-r15 are callee-saved (System V AMD64): push them, swap stacks, pop the other
// context's, and return into it.
asm(R"(
.pushsection .text
.globl gk_emu_switch
.type gk_emu_switch,@function
gk_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size gk_emu_switch,.-gk_emu_switch
.popsection
)");

namespace gk_emu {

// Stacks of equal size mapped one after another would have their tops, where a thread's frames
// live, at the same address modulo the stack size, so in the same sets of every cache level:
// a block's threads, run in turn, would evict one another's frames at every switch. Each top
// sits a different number of cache lines (17 per index, coprime to 1,024) below the stack's
// end, within 64 KiB.
constexpr size_t kStagger = size_t(64) << 10;

FiberStack::FiberStack(size_t bytes, size_t index) : bytes_(bytes + kStagger) {
  // Untouched pages cost nothing; a guard page below catches an overflow.
  base_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base_ == MAP_FAILED) {
    std::fprintf(stderr, "cuda emulator: cannot map a %zu-byte fiber stack\n", bytes_);
    std::abort();
  }
  mprotect(base_, 4096, PROT_NONE);
  const uintptr_t end = reinterpret_cast<uintptr_t>(base_) + bytes_;
  top_ = reinterpret_cast<uint64_t*>((end - index * 17 % 1024 * 64) & ~uintptr_t(15));
}

FiberStack::~FiberStack() { munmap(base_, bytes_); }

void* FiberStack::Prepare(void (*entry)()) {
  // From the (16-byte-aligned) top: a fake return address (entry never returns), entry's address
  // for gk_emu_switch's `ret`, and six zero registers. After the `ret`, rsp is 8 mod 16, as at
  // any function's entry.
  uint64_t* top = top_;
  top[-1] = 0;
  top[-2] = reinterpret_cast<uint64_t>(entry);
  for (int i = 3; i <= 8; ++i) top[-i] = 0;
  return top - 8;
}

}  // namespace gk_emu
