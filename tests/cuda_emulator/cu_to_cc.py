#!/usr/bin/env python3
"""Rewrites a CUDA source (src/**/*.cu, or a header of kernels, *.cuh) as C++ for the CUDA
emulator: the constructs that are not C++, and shared memory's lifetime. Line numbers are kept
(#line), so compiler messages and the emulator's name the .cu.

  Kernel<T><<<grid, block, smem, stream>>>(args)  ->  ::gk_emu::Launch(grid, block, smem, stream)("Kernel<T>", Kernel<T>, args)
  extern __shared__ __align__(16) T name[];       ->  T* name = static_cast<T*>(::gk_emu::DynamicShared());
  __shared__ T a[N], b;  (in a function)          ->  static thread_local T a[N], b; ::gk_emu::FreshShared(&a, sizeof(a)); ...

A static __shared__ variable is one per OS thread here (the blocks run one after another), so
it would keep the last block's values; FreshShared fills it with 0xff bytes (NaN, -1) the first
time each block reaches it, as the dynamic shared memory is, so that a read before a write
shows instead of finding the last block's value.

usage: cu_to_cc.py IN.cu OUT.cc
"""
import os
import re
import sys

LAUNCH = re.compile(r"\b([A-Za-z_][\w:]*(?:<[^;{}()<>]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w:\s]+?)\s+(\w+)\s*\[\s*\]\s*;")
_DECLARATOR = r"\w+\s*(?:\[[^\];]*\]\s*)*"
STATIC_SHARED = re.compile(
    r"^([ \t]+)__shared__\s+((?:__align__\(\s*\d+\s*\)\s+)?[\w:<>,\s]+?)\s+(" + _DECLARATOR + r"(?:,\s*" + _DECLARATOR + r")*);",
    re.M)


def rewrite(text):
    def launch(m):
        kernel, config = m.group(1), m.group(2)
        rest = text[m.end():]
        empty = rest.lstrip().startswith(")")
        return f'::gk_emu::Launch({config})("{kernel}", {kernel}{"" if empty else ", "}'

    text = LAUNCH.sub(launch, text)
    text = DYNAMIC_SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = static_cast<{m.group(1)}*>(::gk_emu::DynamicShared());", text)

    def static_shared(m):
        names = [d.split("[")[0].strip() for d in m.group(3).split(",")]
        fresh = " ".join(f"::gk_emu::FreshShared(&{n}, sizeof({n}));" for n in names)
        return f"{m.group(1)}static thread_local {m.group(2)} {m.group(3)}; {fresh}"

    text = STATIC_SHARED.sub(static_shared, text)
    code = re.sub(r"//[^\n]*", "", text)  # what is left, comments aside
    at = re.search(r"<<<|\b__shared__\b", code)
    if at:
        line = code[: at.start()].count("\n") + 1
        sys.exit(f"cu_to_cc.py: a launch or shared variable the rewrite does not know, line {line}: {at.group(0)}")
    return text


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    body = rewrite(text)
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        f.write('#include "cuda_emulator.h"\n#line 1 "%s"\n' % src)
        f.write(body)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
